"""Sweep reports from a tidy results frame: P:D goodput heatmap, attainment vs rate, Pareto front.

Expected columns of `results_df`, one row per (configuration, offered rate) evaluated:

    mode              str    required: 'disaggregated' or 'colocated'
    rate_rps          float  required: offered request rate of this row
    attainment_both   float  share of requests meeting both TTFT and TPOT SLOs (0..1)
    goodput_rps       float  the configuration's goodput (same on all its rows, or only on
                             one); when absent it is derived as the highest rate_rps whose
                             attainment_both >= attainment_target
    attainment_target float  default 0.9
    prefill, decode   int    instances per side (disaggregated rows)
    colocated         int    instances (colocated rows)
    gpus              int    GPUs the configuration uses (per-GPU goodput = goodput_rps / gpus)
    ttft_p90_s        float  p90 TTFT at this row's rate
    config            str    configuration label; default "mode=... k=v" over the CONFIG_KEYS
                             that vary within the frame (pdsim sweep's result rows fit)

Each plot is drawn only when its columns are present: the heatmap needs prefill, decode and a
goodput; the rate curves need attainment_both; the Pareto front needs gpus and ttft_p90_s.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.figure import Plot, new_figure, render, spans_decades
from analysis.html import Document, Section, Table, write_document

REQUIRED = ("mode", "rate_rps")
NUMERIC = (
    "rate_rps",
    "attainment_both",
    "goodput_rps",
    "attainment_target",
    "prefill",
    "decode",
    "colocated",
    "gpus",
    "ttft_p90_s",
)
# Columns that identify a configuration (as `pdsim.search.rows.result_row` writes them). A
# default label names `mode` plus the keys that vary within the frame and apply to that mode.
CONFIG_KEYS = (
    "scenario",
    "model",
    "hardware",
    "perf",
    "mode",
    "prefill",
    "decode",
    "colocated",
    "prefill_tp",
    "decode_tp",
    "colocated_tp",
    "routing",
    "admission",
)
MODE_ONLY = {
    "prefill": "disaggregated",
    "decode": "disaggregated",
    "prefill_tp": "disaggregated",
    "decode_tp": "disaggregated",
    "colocated": "colocated",
    "colocated_tp": "colocated",
}
DEFAULT_TARGET = 0.9
MAX_CURVES = 8


class SweepError(ValueError):
    """A sweep results frame without the columns or values the report needs."""


def check_results(df: pd.DataFrame, source: str = "sweep results") -> None:
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise SweepError(f"{source}: missing columns {missing} (have {list(df.columns)})")
    if df.empty:
        raise SweepError(f"{source}: no rows")
    for column in NUMERIC:
        if column in df.columns and not pd.api.types.is_numeric_dtype(df[column]):
            raise SweepError(
                f"{source}: column {column!r} has non-numeric value {df[column].iloc[0]!r}"
            )


def config_labels(df: pd.DataFrame) -> pd.Series:
    """The `config` column, else "mode=... k=v ..." over the keys that vary in the frame."""
    if "config" in df.columns:
        return df["config"].astype(str)
    keys = [k for k in CONFIG_KEYS if k in df.columns and (k == "mode" or df[k].nunique() > 1)]
    labels = [
        _label(dict(zip(keys, values, strict=True))) for values in df[keys].itertuples(index=False)
    ]
    return pd.Series(labels, index=df.index, dtype=object)


def _label(values: dict[str, object]) -> str:
    mode = str(values.get("mode", ""))
    parts = [
        f"{k}={_fmt(v)}"
        for k, v in values.items()
        if not pd.isna(v) and MODE_ONLY.get(k, mode) == mode
    ]
    return " ".join(parts)


def _fmt(value: object) -> str:
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return str(int(value))
    return str(value)


def config_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: goodput, per-GPU goodput, p90 TTFT at the goodput rate."""
    df = df.assign(config=config_labels(df))
    rows = [_config_row(name, part) for name, part in df.groupby("config", sort=True)]
    out = pd.DataFrame(rows)
    if "gpus" in out.columns:
        out["goodput_per_gpu_rps"] = out["goodput_rps"] / out["gpus"]
    return out.sort_values("goodput_rps", ascending=False, kind="stable").reset_index(drop=True)


def _config_row(name: str, part: pd.DataFrame) -> dict[str, object]:
    part = part.sort_values("rate_rps", kind="stable")
    target = (
        float(part["attainment_target"].iloc[0])
        if "attainment_target" in part.columns
        else DEFAULT_TARGET
    )
    meets = part["attainment_both"] >= target if "attainment_both" in part.columns else None
    if "goodput_rps" in part.columns and part["goodput_rps"].notna().any():
        goodput = float(part["goodput_rps"].max())
    elif meets is not None:
        goodput = float(part.loc[meets, "rate_rps"].max()) if meets.any() else 0.0
    else:
        goodput = float("nan")
    at = part[meets] if meets is not None and meets.any() else part
    row: dict[str, object] = {"config": name, "mode": part["mode"].iloc[0], "goodput_rps": goodput}
    for key in ("prefill", "decode", "colocated", "gpus"):
        if key in part.columns:
            row[key] = part[key].iloc[0]
    if "ttft_p90_s" in part.columns:
        row["ttft_p90_s"] = float(at["ttft_p90_s"].iloc[-1])
    return row


def pareto_mask(ttft_s: np.ndarray, per_gpu: np.ndarray) -> np.ndarray:
    """True for points no other point beats on both (lower TTFT, higher per-GPU goodput)."""
    order = np.lexsort((-per_gpu, ttft_s))
    mask = np.zeros(ttft_s.size, dtype=bool)
    best = -np.inf
    for i in order:
        if np.isfinite(ttft_s[i]) and per_gpu[i] > best:
            mask[i] = True
            best = per_gpu[i]
    return mask


def heatmap(configs: pd.DataFrame) -> Plot | None:
    if not {"prefill", "decode"} <= set(configs.columns):
        return None
    dis = configs[
        (configs["mode"] == "disaggregated")
        & configs["prefill"].notna()
        & configs["decode"].notna()
    ]
    if dis.empty:
        return None
    grid = dis.pivot_table(index="prefill", columns="decode", values="goodput_rps", aggfunc="max")
    fig, axes = new_figure(panel=(1.0 * grid.shape[1] + 3.5, 0.7 * grid.shape[0] + 2.5))
    ax = axes[0, 0]
    image = ax.imshow(grid.to_numpy(dtype=float), origin="lower", cmap="viridis", aspect="auto")
    ax.set_title("number in each cell: goodput (req/s)", fontsize=9)
    values = grid.to_numpy(dtype=float)
    middle = np.nanmin(values) + 0.5 * (np.nanmax(values) - np.nanmin(values))
    for (i, j), value in np.ndenumerate(values):
        if np.isfinite(value):
            ax.text(
                j,
                i,
                f"{value:.3g}",
                ha="center",
                va="center",
                fontsize=9,
                color="black" if value > middle else "white",
            )
    ax.set_xticks(range(grid.shape[1]), [f"{int(v)}" for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{int(v)}" for v in grid.index])
    ax.set(xlabel="decode instances", ylabel="prefill instances")
    fig.colorbar(image, ax=ax, label="goodput (req/s)")
    return render(fig, "goodput_heatmap", "Goodput vs P:D ratio (disaggregated)")


def rate_curves(df: pd.DataFrame, goodput: pd.Series) -> Plot | None:
    """Attainment vs offered rate, one panel per mode, the MAX_CURVES best configs of each."""
    if "attainment_both" not in df.columns:
        return None
    df = df.assign(config=config_labels(df))
    modes = sorted(df["mode"].astype(str).unique())
    fig, axes = new_figure(1, len(modes), panel=(6.5, 4.5))
    target = (
        float(df["attainment_target"].iloc[0])
        if "attainment_target" in df.columns
        else DEFAULT_TARGET
    )
    for ax, mode in zip(axes.ravel(), modes, strict=True):
        part = df[df["mode"].astype(str) == mode]
        names = goodput.reindex(part["config"].unique()).sort_values(ascending=False, kind="stable")
        for k, name in enumerate(names.index[:MAX_CURVES]):
            rows = part[part["config"] == name].sort_values("rate_rps", kind="stable")
            short = name.removeprefix(f"mode={mode}").strip() or mode
            ax.plot(
                rows["rate_rps"],
                rows["attainment_both"],
                marker="o",
                ms=3,
                color=f"C{k}",
                label=f"{short} (goodput {names[name]:.3g})",
            )
        ax.axhline(target, color="grey", lw=1, ls="--", label=f"target {target:.0%}")
        if spans_decades(df["rate_rps"]):
            ax.set_xscale("log")
        shown = (
            f"best {MAX_CURVES} of {len(names)}"
            if len(names) > MAX_CURVES
            else f"{len(names)} configs"
        )
        ax.set(
            title=f"{mode} ({shown})",
            xlabel="offered rate (req/s)",
            ylabel="attainment (TTFT and TPOT)",
            ylim=(-0.02, 1.02),
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return render(fig, "attainment_vs_rate", "SLO attainment vs offered rate")


def pareto(configs: pd.DataFrame) -> Plot | None:
    if not {"gpus", "ttft_p90_s", "goodput_per_gpu_rps"} <= set(configs.columns):
        return None
    x = configs["ttft_p90_s"].to_numpy(dtype=float)
    y = configs["goodput_per_gpu_rps"].to_numpy(dtype=float)
    front = pareto_mask(x, y)
    fig, axes = new_figure(panel=(7.5, 4.8))
    ax = axes[0, 0]
    for mode, marker in (("disaggregated", "o"), ("colocated", "s")):
        sel = (configs["mode"] == mode).to_numpy()
        ax.scatter(x[sel], y[sel], marker=marker, alpha=0.6, label=mode)
    order = np.argsort(x[front])
    ax.step(x[front][order], y[front][order], "k-", where="post", lw=1, label="Pareto front")
    for i in np.flatnonzero(front):
        ax.annotate(
            configs["config"].iloc[i],
            (x[i], y[i]),
            fontsize=7,
            xytext=(4, 4),
            textcoords="offset points",
        )
    if spans_decades(x):
        ax.set_xscale("log")
    ax.set(xlabel="p90 TTFT at the goodput rate (s)", ylabel="goodput per GPU (req/s/GPU)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return render(fig, "pareto", "Per-GPU goodput vs TTFT (Pareto front)")


def write_sweep_report(results_df: pd.DataFrame, out_dir: Path | str) -> Path:
    """Write the sweep report (see the module docstring for columns); return the HTML path."""
    check_results(results_df)
    configs = config_table(results_df)
    goodput = configs.set_index("config")["goodput_rps"]
    found = [heatmap(configs), rate_curves(results_df, goodput), pareto(configs)]
    plots = tuple(p for p in found if p is not None)
    best = Table(
        "Configurations by goodput",
        configs,
        "goodput = highest offered rate at which at least the target share of requests "
        "meets both the TTFT and the TPOT SLO (DistServe's definition)",
    )
    doc = Document(
        f"Sweep report: {len(configs)} configurations, {len(results_df)} runs",
        (Section("Configurations", tables=(best,)), Section("Plots", plots=plots)),
        data={"configs": configs},
    )
    return write_document(doc, out_dir)
