"""Latency metrics and SLO attainment over a per-request trace (see pdsim.trace).

Definitions (stated in every summary):
- TTFT = first_token_s - arrival_s. The `prefill_end` variant (slo.ttft_definition) is
  prefill_end_s - arrival_s, as DistServe's simulator counts it.
- TPOT = (last_token_s - first_token_s) / (output_tokens - 1); requests with one output token
  have no TPOT (NaN) and meet any TPOT SLO. The `distserve` variant is
  (finish_s - prefill_end_s) / output_tokens: DistServe's simulator's number when the prefill
  emits no token (cluster.prefill_emits_token=false, so output_tokens decode steps follow the
  prefill); with SGLang's prefill token only output_tokens - 1 steps follow and it is lower.
  The `tbt_mooncake` variant is Mooncake's TBT (below; needs token times, which it turns on).
- ITL = gaps between consecutive token times (only where token_times_s was recorded).
- Mooncake TBT = mean of the longest 10% of a request's gaps (only where token times were recorded).
- E2E = finish_s - arrival_s for finished requests.
- Tokens per second per user = 1 / TPOT of a request (requests with >= 2 output tokens);
  output tokens per second per GPU = the run's output token throughput / the GPUs it uses.
- Closed loop (scenario.concurrency > 0): every statistic is over the steady-state window
  (pdsim.workload.closed_loop): latencies and SLO attainment over the requests it counts,
  throughputs over the completions inside it divided by its length.
- SLO attainment = fraction of *all* requests (failed and rejected count as misses) meeting the SLO.
- Goodput at a rate = that rate if the SLO target is met, else 0; the goodput search finds the
  highest such rate. Criterion `joint` (DistServe's paper): attainment(both) >= target.
  Criterion `percentiles` (DistServe's simulator's search): the target-quantile TTFT and the
  target-quantile TPOT are each strictly below their SLO (failed/rejected count as infinite).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED
from pdsim.workload.closed_loop import ClosedLoop, SteadyWindow

PERCENTILES = (50, 90, 99)
TPOT_DEFINITIONS = ("standard", "distserve", "tbt_mooncake")
TTFT_DEFINITIONS = ("standard", "prefill_end")
CRITERIA = ("joint", "percentiles")

DEFINITIONS = {
    "ttft": "first_token_s - arrival_s",
    "ttft_prefill_end": "prefill_end_s - arrival_s",
    "tpot": "(last_token_s - first_token_s) / (output_tokens - 1)",
    "tpot_distserve": "(finish_s - prefill_end_s) / output_tokens",
    "itl": "gaps between consecutive output tokens",
    "tbt_mooncake": "mean of the longest 10% of a request's token gaps",
    "e2e": "finish_s - arrival_s (finished requests)",
    "tokens_per_s_per_user": "1 / TPOT per request (output_tokens >= 2)",
    "output_tokens_per_s_per_gpu": "output tokens per second / GPUs of the deployment",
    "steady_window": ("closed loop: requests sent after the first warmup_requests, finished before the first "
                      "client ran out of requests; throughputs = completions inside the window / its length"),
    "attainment": "share of all requests (failed/rejected = miss) meeting the SLO",
    "criterion_joint": "attainment(TTFT and TPOT) >= target",
    "criterion_percentiles": "target-quantile TTFT < TTFT SLO and target-quantile TPOT < TPOT SLO",
}


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float
    tpot_s: float
    attainment_target: float = 0.9
    ttft_definition: str = "standard"
    criterion: str = "joint"


def ttft_s(df: pd.DataFrame, definition: str = "standard") -> pd.Series:
    if definition == "standard":
        return df["first_token_s"] - df["arrival_s"]
    if definition == "prefill_end":
        return df["prefill_end_s"] - df["arrival_s"]
    raise ValueError(f"ttft definition {definition!r} not in {TTFT_DEFINITIONS}")


def tpot_s(df: pd.DataFrame, definition: str = "standard") -> pd.Series:
    if definition == "standard":
        steps = (df["output_tokens"] - 1).where(df["output_tokens"] > 1)
        return (df["last_token_s"] - df["first_token_s"]) / steps
    if definition == "distserve":
        out = df["output_tokens"].where(df["output_tokens"] > 0)
        return (df["finish_s"] - df["prefill_end_s"]) / out
    if definition == "tbt_mooncake":
        return tbt_mooncake_series(df)
    raise ValueError(f"tpot definition {definition!r} not in {TPOT_DEFINITIONS}")


def e2e_s(df: pd.DataFrame) -> pd.Series:
    return (df["finish_s"] - df["arrival_s"]).where(df["status"] == STATUS_FINISHED)


def itl_s(df: pd.DataFrame) -> np.ndarray:
    """All inter-token gaps over requests that recorded token times."""
    gaps = [np.diff(np.asarray(t)) for t in df["token_times_s"] if t is not None and len(t) > 1]
    return np.concatenate(gaps) if gaps else np.array([], dtype=float)


def tbt_mooncake_s(token_times_s: Any) -> float:
    gaps = np.sort(np.diff(np.asarray(token_times_s, dtype=float)))
    if gaps.size == 0:
        return float("nan")
    k = max(1, int(np.ceil(0.1 * gaps.size)))
    return float(gaps[-k:].mean())


def tbt_mooncake_series(df: pd.DataFrame) -> pd.Series:
    """Per-request Mooncake TBT (NaN for one-token requests); needs recorded token times."""
    if "token_times_s" not in df.columns or (len(df) and df["token_times_s"].isna().all()):
        raise ValueError("slo: tpot_definition 'tbt_mooncake' needs token times (record_token_times=true)")
    values = [tbt_mooncake_s(t) if t is not None and len(t) > 1 else float("nan") for t in df["token_times_s"]]
    return pd.Series(values, index=df.index, dtype=float)


def slo_masks(df: pd.DataFrame, slo: Slo, tpot_definition: str = "standard") -> dict[str, pd.Series]:
    finished = df["status"] == STATUS_FINISHED
    ttft_ok = finished & (ttft_s(df, slo.ttft_definition) <= slo.ttft_s)
    tpot = tpot_s(df, tpot_definition)
    tpot_ok = finished & (tpot.isna() | (tpot <= slo.tpot_s))
    return {"ttft": ttft_ok, "tpot": tpot_ok, "both": ttft_ok & tpot_ok}


def attainment(df: pd.DataFrame, slo: Slo, tpot_definition: str = "standard") -> dict[str, float]:
    if len(df) == 0:
        return {"ttft": float("nan"), "tpot": float("nan"), "both": float("nan")}
    return {k: float(v.mean()) for k, v in slo_masks(df, slo, tpot_definition).items()}


def meets_target(df: pd.DataFrame, slo: Slo, tpot_definition: str = "standard") -> bool:
    """Whether the run meets the SLO target under `slo.criterion` (module docstring)."""
    if len(df) == 0:
        return False
    if slo.criterion == "joint":
        return attainment(df, slo, tpot_definition)["both"] >= slo.attainment_target
    if slo.criterion != "percentiles":
        raise ValueError(f"slo: field 'criterion' has unknown value {slo.criterion!r} (choose from {CRITERIA})")
    finished = df["status"] == STATUS_FINISHED
    q = slo.attainment_target
    ttft = ttft_s(df, slo.ttft_definition).where(finished, np.inf)
    tpot = tpot_s(df, tpot_definition).fillna(0.0).where(finished, np.inf)
    return bool(np.quantile(ttft, q) < slo.ttft_s and np.quantile(tpot, q) < slo.tpot_s)


def percentiles(values: pd.Series | np.ndarray) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    out = {"mean": float(arr.mean()) if arr.size else float("nan")}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(arr, p)) if arr.size else float("nan")
    return out


def summarize(
    df: pd.DataFrame, slo: Slo, tpot_definition: str = "standard", loop: ClosedLoop | None = None, gpus: int = 0
) -> dict[str, Any]:
    """The run summary: counts, latency percentiles, throughput, SLO attainment. Under a closed
    `loop` over its steady-state window; `gpus` > 0 adds per-GPU throughput."""
    window = _steady(df, loop) if loop is not None else None
    counted = df[window.counted] if window is not None and window.reached else df
    finished = counted[counted["status"] == STATUS_FINISHED]
    counts = {s: int((counted["status"] == s).sum()) for s in (STATUS_FINISHED, STATUS_FAILED, STATUS_REJECTED)}
    span_s, done = _throughput_base(df, window)
    att = attainment(counted, slo, tpot_definition)
    rate_rps = _arrival_rate(counted) if window is None else _sent_rate(df, window)
    itl = itl_s(finished)
    meets = meets_target(counted, slo, tpot_definition)
    tbt = tbt_mooncake_series(finished) if _has_token_times(finished) else None
    tpot = tpot_s(finished, tpot_definition)
    tokens_per_s = float(done["output_tokens"].sum() / span_s) if span_s > 0 else float("nan")
    per_user = 1.0 / tpot[tpot > 0]
    return {
        "requests": int(len(counted)),
        **counts,
        "duration_s": span_s,
        "offered_rate_rps": rate_rps,
        "throughput_rps": len(done) / span_s if span_s > 0 else float("nan"),
        "output_tokens_per_s": tokens_per_s,
        "gpus": gpus,
        "output_tokens_per_s_per_gpu": tokens_per_s / gpus if gpus > 0 else float("nan"),
        "tokens_per_s_per_user": {"mean": float(per_user.mean()) if len(per_user) else float("nan"),
                                  "p50": float(per_user.median()) if len(per_user) else float("nan")},
        "ttft_s": percentiles(ttft_s(finished, slo.ttft_definition)),
        "tpot_s": percentiles(tpot),
        "e2e_s": percentiles(e2e_s(finished)),
        "itl_s": percentiles(itl) if itl.size else None,
        "tbt_mooncake_s": percentiles(tbt) if tbt is not None and tbt.notna().any() else None,
        "cached_prefix_fraction": _cached_fraction(counted),
        "closed_loop": _loop_summary(df, loop, window),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "target": slo.attainment_target},
        "attainment": att,
        "meets_slo_target": meets,
        "goodput_at_rate_rps": rate_rps if meets else 0.0,
        "tpot_definition": tpot_definition,
        "ttft_definition": slo.ttft_definition,
        "criterion": slo.criterion,
        "definitions": DEFINITIONS,
    }


def _steady(df: pd.DataFrame, loop: ClosedLoop) -> SteadyWindow:
    return loop.window(df["arrival_s"].to_numpy(dtype=float), df["finish_s"].to_numpy(dtype=float))


def _throughput_base(df: pd.DataFrame, window: SteadyWindow | None) -> tuple[float, pd.DataFrame]:
    """The span throughputs divide by and the finished requests they count: the whole run
    (first arrival to last finish), or a closed loop's completions inside its window."""
    finished = df[df["status"] == STATUS_FINISHED]
    if window is None or not window.reached:
        return _span_s(df), finished
    end = finished["finish_s"]
    return window.length_s, finished[(end > window.start_s) & (end <= window.end_s)]


def _sent_rate(df: pd.DataFrame, window: SteadyWindow) -> float:
    """A closed loop's send rate inside its window (what it offered, given its latencies)."""
    if not window.reached:
        return _arrival_rate(df)
    sent = df["arrival_s"]
    return float(((sent >= window.start_s) & (sent < window.end_s)).sum()) / window.length_s


def _loop_summary(df: pd.DataFrame, loop: ClosedLoop | None, window: SteadyWindow | None) -> dict[str, Any] | None:
    if loop is None or window is None:
        return None
    return {
        "concurrency": loop.concurrency, "think_s": loop.think_s, "duration_s": loop.duration_s,
        "warmup_requests": loop.warmup_requests, "sent": int(len(df)),
        "steady_state_reached": window.reached, "counted_requests": int(window.counted.sum()),
        "window_start_s": window.start_s, "window_end_s": window.end_s,
    }


def _has_token_times(df: pd.DataFrame) -> bool:
    return "token_times_s" in df.columns and bool(df["token_times_s"].notna().any())


def _span_s(df: pd.DataFrame) -> float:
    if len(df) == 0:
        return 0.0
    end = np.nanmax(df["finish_s"].to_numpy(dtype=float)) if df["finish_s"].notna().any() else np.nan
    start = float(df["arrival_s"].min())
    return float(end - start) if np.isfinite(end) else 0.0


def _arrival_rate(df: pd.DataFrame) -> float:
    if len(df) < 2:
        return float("nan")
    window = float(df["arrival_s"].max() - df["arrival_s"].min())
    return (len(df) - 1) / window if window > 0 else float("nan")


def _cached_fraction(df: pd.DataFrame) -> float:
    total = float(df["input_tokens"].sum())
    return float(df["cached_prefix_tokens"].sum()) / total if total > 0 else 0.0
