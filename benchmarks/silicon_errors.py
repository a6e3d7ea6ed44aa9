"""Error tables of TTFT/TPOT predictions against measured silicon rows, and the outlier flag.

Absolute percentage error = |predicted - measured| / measured. A table row (a group of silicon
rows) gives: rows, coverage (share of them the predictor answered), and for TTFT and TPOT the
median and mean APE and the shares within 10% and 20%, over the rows it answered. Groups:
everything, each mode (agg, disagg), then (system, mode, backend, model).

Outliers are flagged, never dropped: a measurement is `suspect` when it is more than
SUSPECT_RATIO times the same metric of the same configuration (model, system, backend, version,
quantization, parallelism, isl, osl, measurement campaign: config id or source file) at the next
higher concurrency that was measured - more
load cannot make a closed loop faster, so such a row (e.g. a TPOT of hundreds of ms beside
10-30 ms) is more likely a broken run than a property of the engine. Tables are given over all
rows; the overall line is repeated without the suspect rows.

Some measurements appear more than once (the database dump lists one run under several config
ids or version labels, some with the metrics rounded): a row `repeats` an earlier one when its
engine, model, system, precision, mode, lengths, concurrency and layout are the same and its TTFT
and TPOT agree to three significant digits. The overall and per-mode lines are repeated over each
measurement once.
"""

from __future__ import annotations

import re

import pandas as pd

SUSPECT_RATIO = 2.0
SERIES_KEYS = ("model_path", "system", "backend", "backend_version", "mode", "precision", "gemm_quant_mode",
               "moe_quant_mode", "isl", "osl", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
               "moe_ep_size", "prefill_tp_size", "prefill_num_workers", "prefill_attention_dp_size",
               "prefill_moe_ep_size", "decode_tp_size", "decode_num_workers", "decode_attention_dp_size",
               "decode_moe_ep_size")
GROUP_KEYS = ("system", "mode", "backend", "model")


def campaign(source: str) -> str:
    """The measurement campaign of a row (its config id or source file, not its concurrency or date)."""
    found = re.search(r"(config_id=\d+|source_file=[^;]+)", source or "")
    return found.group(1) if found else ""


def suspect_rows(rows: pd.DataFrame) -> pd.Series:
    """Per row: '' or why its measurement looks wrong (see the module docstring)."""
    keys = [k for k in SERIES_KEYS if k in rows.columns] + ["_campaign"]
    out = pd.Series("", index=rows.index, dtype=object)
    frame = rows.assign(_c=rows["concurrency"], _campaign=rows.get("silicon_data_source", pd.Series("", index=rows.index))
                        .map(campaign)).fillna({k: "" for k in keys})
    for _, series in frame.groupby(keys, sort=False, dropna=False):
        series = series[series["_c"] > 0].sort_values("_c")
        for metric in ("silicon_ttft_ms", "silicon_tpot_ms"):
            values, conc = series[metric].to_numpy(), series["_c"].to_numpy()
            for i in range(len(series) - 1):
                higher = values[i + 1:][conc[i + 1:] > conc[i]]
                if len(higher) and values[i] > SUSPECT_RATIO * higher[0]:
                    name = metric.removeprefix("silicon_").removesuffix("_ms").upper()
                    out[series.index[i]] += f"{name} {values[i]:.0f} ms > {SUSPECT_RATIO}x at higher concurrency; "
    return out.str.rstrip("; ")


REPEAT_KEYS = ("model_path", "system", "backend", "mode", "precision", "isl", "osl", "concurrency", "tp_size",
               "attention_dp_size", "moe_ep_size", "prefill_tp_size", "prefill_num_workers",
               "prefill_attention_dp_size", "decode_tp_size", "decode_num_workers", "decode_attention_dp_size")


def _three_digits(values: pd.Series) -> pd.Series:
    return values.map(lambda v: float(f"{v:.3g}") if pd.notna(v) else v)


def repeated_rows(rows: pd.DataFrame) -> pd.Series:
    """Per row: True when it repeats an earlier row's measurement (see the module docstring)."""
    if not {"model_path", "concurrency"} <= set(rows.columns):  # no run identity: none repeats
        return pd.Series(False, index=rows.index)
    keys = [k for k in REPEAT_KEYS if k in rows.columns]
    frame = rows[keys].astype(str).assign(_ttft=_three_digits(rows["silicon_ttft_ms"]),
                                          _tpot=_three_digits(rows["silicon_tpot_ms"]))
    return frame.duplicated(keep="first")


def ape(predicted: pd.Series, measured: pd.Series) -> pd.Series:
    return (predicted - measured).abs() / measured


def _metric_cells(err: pd.Series) -> list[str]:
    if err.empty:
        return ["-", "-", "-", "-"]
    return [f"{100 * err.median():.1f}", f"{100 * err.mean():.1f}",
            f"{100 * (err <= 0.1).mean():.0f}", f"{100 * (err <= 0.2).mean():.0f}"]


def error_row(group: pd.DataFrame, prefix: str) -> list[str]:
    """[rows, coverage %, TTFT medAPE, meanAPE, <=10%, <=20%, TPOT ...] for one predictor."""
    ok = group[group[f"{prefix}_ok"]]
    ttft = ape(ok[f"{prefix}_ttft_ms"], ok["silicon_ttft_ms"])
    tpot = ape(ok[f"{prefix}_tpot_ms"], ok["silicon_tpot_ms"])
    coverage = f"{len(ok)} ({100 * len(ok) / len(group):.0f}%)" if len(group) else "0"
    return [coverage, *_metric_cells(ttft), *_metric_cells(tpot)]


HEADER = ["group", "rows", "predictor", "covered", "TTFT medAPE%", "TTFT meanAPE%", "TTFT <=10%",
          "TTFT <=20%", "TPOT medAPE%", "TPOT meanAPE%", "TPOT <=10%", "TPOT <=20%"]


def error_table(rows: pd.DataFrame, predictors: dict[str, str], by_group: bool = True) -> list[list[str]]:
    """Table rows for `rows` (one line per predictor per group); predictors: label -> column prefix.
    Groups: all, all without the suspect rows, each mode (`mode agg`, `mode disagg`: issue 40's bar
    holds in each) where there are two, the same over each measurement once where some repeat, then
    (with by_group) every (system, mode, backend, model)."""
    groups: list[tuple[str, pd.DataFrame]] = [("all", rows)]
    clean = rows[rows["suspect"] == ""]
    if len(clean) < len(rows):
        groups.append((f"all without {len(rows) - len(clean)} suspect", clean))
    if rows["mode"].nunique() > 1:
        groups += [(f"mode {mode}", part) for mode, part in rows.groupby("mode", sort=True)]
    once = rows[~repeated_rows(rows)]
    if len(once) < len(rows):
        groups.append((f"each measurement once ({len(once)})", once))
        if once["mode"].nunique() > 1:
            groups += [(f"mode {mode}, each measurement once", part) for mode, part in once.groupby("mode", sort=True)]
    if by_group:
        groups += [(" / ".join(str(k) for k in key), part)
                   for key, part in rows.groupby(list(GROUP_KEYS), sort=True)]
    table = []
    for label, part in groups:
        for i, (name, prefix) in enumerate(predictors.items()):
            table.append([label if i == 0 else "", str(len(part)) if i == 0 else "", name,
                          *error_row(part, prefix)])
    return table


def markdown(table: list[list[str]], header: list[str] = HEADER) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in table]
    return "\n".join(lines)
