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


def summarize(df: pd.DataFrame, slo: Slo, tpot_definition: str = "standard") -> dict[str, Any]:
    """The run summary: counts, latency percentiles, throughput, SLO attainment."""
    finished = df[df["status"] == STATUS_FINISHED]
    counts = {s: int((df["status"] == s).sum()) for s in (STATUS_FINISHED, STATUS_FAILED, STATUS_REJECTED)}
    span_s = _span_s(df)
    att = attainment(df, slo, tpot_definition)
    rate_rps = _arrival_rate(df)
    itl = itl_s(finished)
    meets = meets_target(df, slo, tpot_definition)
    tbt = tbt_mooncake_series(finished) if _has_token_times(finished) else None
    return {
        "requests": int(len(df)),
        **counts,
        "duration_s": span_s,
        "offered_rate_rps": rate_rps,
        "throughput_rps": counts[STATUS_FINISHED] / span_s if span_s > 0 else float("nan"),
        "output_tokens_per_s": float(finished["output_tokens"].sum() / span_s) if span_s > 0 else float("nan"),
        "ttft_s": percentiles(ttft_s(finished, slo.ttft_definition)),
        "tpot_s": percentiles(tpot_s(finished, tpot_definition)),
        "e2e_s": percentiles(e2e_s(finished)),
        "itl_s": percentiles(itl) if itl.size else None,
        "tbt_mooncake_s": percentiles(tbt) if tbt is not None and tbt.notna().any() else None,
        "cached_prefix_fraction": _cached_fraction(df),
        "slo": {"ttft_s": slo.ttft_s, "tpot_s": slo.tpot_s, "target": slo.attainment_target},
        "attainment": att,
        "meets_slo_target": meets,
        "goodput_at_rate_rps": rate_rps if meets else 0.0,
        "tpot_definition": tpot_definition,
        "ttft_definition": slo.ttft_definition,
        "criterion": slo.criterion,
        "definitions": DEFINITIONS,
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
