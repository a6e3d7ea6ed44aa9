"""The fidelity error table: simulated vs measured TTFT, TPOT, E2E and SLO goodput.

Definitions are pdsim.metrics' (identical for both traces, both measured at the client):
TTFT = first_token_s - arrival_s, the client's send time to the client's receipt of the first
token; TPOT = (last_token_s - first_token_s) / (output_tokens - 1), so the first token is
excluded; SLO goodput = requests meeting both the TTFT and the TPOT SLO per second of the
arrival window (attainment x offered rate; failed and rejected requests are misses).
Relative error = (sim - real) / |real|. Under a closed loop (benchmark clients) each trace is cut
to its own steady-state window (pdsim.workload.closed_loop) and the table adds the loop's
throughputs: output tokens/s and tokens/s per user (mean of 1/TPOT).

`slo_scan` repeats the goodput comparison at tighter SLOs (both bounds scaled together), where
attainment is below 1 and goodput actually discriminates: an SLO loose enough that every request
meets it on both sides makes the goodput error 0 whatever the simulator does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pdsim import metrics
from pdsim.metrics import Slo
from pdsim.workload.closed_loop import ClosedLoop

DEFINITIONS = (
    "TTFT = first_token_s - arrival_s (client send -> first token received at the client); "
    "TPOT = (last_token_s - first_token_s) / (output_tokens - 1) (first token excluded); "
    "E2E = finish_s - arrival_s; SLO goodput = requests meeting both SLOs / arrival window (s); "
    "relative error = (sim - real) / |real|"
)


@dataclass(frozen=True)
class Target:
    metric: str
    stat: str  # p50 | p90 | value
    bound: float  # max |relative error|


TARGETS = (
    Target("ttft_s", "p50", 0.10), Target("ttft_s", "p90", 0.20),
    Target("tpot_s", "p50", 0.10), Target("tpot_s", "p90", 0.20),
    Target("goodput_rps", "value", 0.10),
)


def _values(df: pd.DataFrame) -> dict[str, pd.Series]:
    finished = df[df["status"] == "finished"]
    return {"ttft_s": metrics.ttft_s(finished), "tpot_s": metrics.tpot_s(finished), "e2e_s": metrics.e2e_s(finished)}


def slo_goodput_rps(df: pd.DataFrame, slo: Slo) -> float:
    """Requests meeting both SLOs per second of the arrival window."""
    rate = metrics.summarize(df, slo)["offered_rate_rps"]
    return float(metrics.attainment(df, slo)["both"] * rate) if len(df) else math.nan


def prefix_hit_ratio(df: pd.DataFrame) -> float:
    """Prompt tokens served from the prefix cache / prompt tokens, over finished requests."""
    finished = df[df["status"] == "finished"]
    total = float(finished["input_tokens"].sum())
    return float(finished["cached_prefix_tokens"].sum()) / total if total > 0 else math.nan


def steady_rows(df: pd.DataFrame, loop: ClosedLoop | None) -> pd.DataFrame:
    """The rows a closed loop's steady-state window counts (all rows: open loop, or no window)."""
    if loop is None:
        return df
    window = loop.window(df["arrival_s"].to_numpy(dtype=float), df["finish_s"].to_numpy(dtype=float))
    return df[window.counted] if window.reached else df


def _loop_rows(sim: pd.DataFrame, real: pd.DataFrame, slo: Slo, loop: ClosedLoop) -> list[tuple[str, str, float, float]]:
    a, b = metrics.summarize(sim, slo, loop=loop), metrics.summarize(real, slo, loop=loop)
    return [("output_tokens_per_s", "value", a["output_tokens_per_s"], b["output_tokens_per_s"]),
            ("tokens_per_s_per_user", "mean", a["tokens_per_s_per_user"]["mean"], b["tokens_per_s_per_user"]["mean"])]


def error_table(sim: pd.DataFrame, real: pd.DataFrame, slo: Slo, loop: ClosedLoop | None = None) -> pd.DataFrame:
    """One row per (metric, statistic): sim, real, relative error, and the target bound if any;
    under a closed `loop` over each trace's steady-state window, with its throughputs."""
    whole_sim, whole_real = sim, real
    sim, real = steady_rows(sim, loop), steady_rows(real, loop)
    a, b = _values(sim), _values(real)
    rows = []
    for name in ("ttft_s", "tpot_s", "e2e_s"):
        pa, pb = metrics.percentiles(a[name]), metrics.percentiles(b[name])
        for stat in ("p50", "p90", "p99", "mean"):
            rows.append((name, stat, pa[stat], pb[stat]))
    rows.append(("attainment_both", "value", metrics.attainment(sim, slo)["both"], metrics.attainment(real, slo)["both"]))
    rows.append(("goodput_rps", "value", slo_goodput_rps(sim, slo), slo_goodput_rps(real, slo)))
    if "cached_prefix_tokens" in real and real["cached_prefix_tokens"].sum() > 0:  # the prefix cache hit
        rows.append(("prefix_hit_ratio", "value", prefix_hit_ratio(sim), prefix_hit_ratio(real)))
    if loop is not None:
        rows += _loop_rows(whole_sim, whole_real, slo, loop)
    bounds = {(t.metric, t.stat): t.bound for t in TARGETS}
    table = pd.DataFrame(rows, columns=["metric", "stat", "sim", "real"])
    with np.errstate(divide="ignore", invalid="ignore"):
        table["rel_err"] = (table["sim"] - table["real"]) / table["real"].abs()
    table["target"] = [bounds.get((m, s), math.nan) for m, s in zip(table["metric"], table["stat"], strict=True)]
    table["ok"] = [None if math.isnan(t) else bool(abs(e) <= t) for e, t in zip(table["rel_err"], table["target"], strict=True)]
    return table


SLO_SCALES = (0.3, 0.4, 0.5, 0.6, 0.75, 1.0)


def slo_scan(sim: pd.DataFrame, real: pd.DataFrame, slo: Slo, scales: tuple[float, ...] = SLO_SCALES,
             loop: ClosedLoop | None = None) -> pd.DataFrame:
    """SLO goodput of both traces with both SLO bounds multiplied by each scale (a closed loop's
    over each trace's steady-state window)."""
    sim, real = steady_rows(sim, loop), steady_rows(real, loop)
    rows = []
    for scale in scales:
        tight = Slo(slo.ttft_s * scale, slo.tpot_s * scale, slo.attainment_target)
        a, b = slo_goodput_rps(sim, tight), slo_goodput_rps(real, tight)
        rel = (a - b) / abs(b) if b else math.nan
        rows.append((scale, tight.ttft_s, tight.tpot_s, metrics.attainment(sim, tight)["both"],
                     metrics.attainment(real, tight)["both"], a, b, rel))
    return pd.DataFrame(rows, columns=["scale", "ttft_slo_s", "tpot_slo_s", "sim_attainment", "real_attainment",
                                       "sim_goodput_rps", "real_goodput_rps", "rel_err"])


def format_scan(scan: pd.DataFrame) -> str:
    """The SLO scan as markdown."""
    lines = ["| SLO scale | TTFT SLO (s) | TPOT SLO (s) | attainment sim | attainment real | goodput sim | "
             "goodput real | rel. error |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in scan.itertuples(index=False):
        lines.append(f"| {r.scale:g} | {r.ttft_slo_s:.3g} | {r.tpot_slo_s:.3g} | {r.sim_attainment:.3f} | "
                     f"{r.real_attainment:.3f} | {r.sim_goodput_rps:.4f} | {r.real_goodput_rps:.4f} | {r.rel_err:+.1%} |")
    return "\n".join(lines)


def format_table(table: pd.DataFrame) -> str:
    """The error table as markdown (what `pdsim fidelity` prints last)."""
    lines = ["| metric | stat | sim | real | rel. error | target | met |", "|---|---|---:|---:|---:|---:|:---:|"]
    for r in table.itertuples(index=False):
        target = "" if math.isnan(r.target) else f"±{r.target:.0%}"
        met = "" if r.ok is None else ("yes" if r.ok else "NO")
        lines.append(f"| {r.metric} | {r.stat} | {r.sim:.4f} | {r.real:.4f} | {r.rel_err:+.1%} | {target} | {met} |")
    return "\n".join(lines)


def targets_met(table: pd.DataFrame) -> bool:
    checked = table.dropna(subset=["target"])
    return bool(checked["ok"].all())


def format_report(headline: pd.DataFrame, scan: pd.DataFrame, calibrated: pd.DataFrame, slo: Slo,
                  predicted_from: str = "the profile and the idle probes") -> str:
    """The calibrated diagnostic, the SLO scan and the predicted table (last: the result, the
    targets apply to it) as markdown: what `pdsim fidelity` prints and writes to fidelity.md.
    `predicted_from`: what the prediction was told (loop.predicted_from)."""
    return "\n".join([
        "Calibrated (diagnostic: profile x this run's served slowdown; not a prediction):", "",
        format_table(calibrated), "",
        f"SLO: TTFT <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s:g} s.  {DEFINITIONS}.", "",
        "Predicted goodput at tighter SLOs (both bounds scaled):", "", format_scan(scan), "",
        f"Predicted (the result: pdsim told only {predicted_from}, nothing from this run; targets apply here):",
        "", format_table(headline)])
