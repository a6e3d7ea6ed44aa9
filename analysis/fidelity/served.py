"""The engine's step latencies as served, next to the offline profile.

Each pdreal instance keeps its recent forwards (`GET /steps`: kind, batch size, new and cached
tokens, latency). Over the replay they show what the steps really cost while the prefill and
decode processes, the router and the client share the machine (and whatever else runs on it),
which an offline profile of one process cannot know. `slowdown` is, per kind, the served forward
time over the profiled time at the same batch shapes, summed over the run's forwards: pdsim's
perf.*_step_scale (pdsim/perf/overhead.py). A ratio of sums, not a median of ratios, keeps the
simulated busy time equal to the served one (step times are right-skewed: a median under-counts
them, which showed as TPOT ~5% low); the forwards with the most extreme ratios (TRIM_FRACTION at
each end) are left out, so a burst of outside load on a shared machine does not swing it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from pdsim.perf.base import LatencyModel

STEP_COLUMNS = ("kind", "num_seqs", "new_tokens", "context_tokens", "latency_s", "decode_seqs",
                "decode_context_tokens")
# a colocated mixed step (prefill chunks + decodes) is scaled by perf.prefill_step_scale in pdsim
SCALED_AS = {"prefill": ("prefill", "mixed"), "decode": ("decode",)}
TRIM_FRACTION = 0.05


def slowdown(steps: pd.DataFrame, model: LatencyModel) -> dict[str, float]:
    """Served forward time / modelled forward time per kind, over the forwards whose ratio is not
    among the TRIM_FRACTION lowest or highest (1 = the model's speed; NaN without forwards)."""
    return {kind: _ratio(steps[steps["kind"].isin(SCALED_AS[kind])], model) for kind in ("prefill", "decode")}


def _ratio(rows: pd.DataFrame, model: LatencyModel) -> float:
    predicted = np.array([_predict(model, r) for r in rows.itertuples(index=False)], dtype=float)
    served = rows["latency_s"].to_numpy(dtype=float)
    keep = np.isfinite(predicted) & (predicted > 0)
    predicted, served = predicted[keep], served[keep]
    order = np.argsort(served / predicted, kind="stable")
    cut = int(len(order) * TRIM_FRACTION)
    kept = order[cut:len(order) - cut]
    return float(served[kept].sum() / predicted[kept].sum()) if len(kept) else math.nan


def _predict(model: LatencyModel, r: Any) -> float:  # r: a served_steps.csv row (itertuples)
    if r.kind == "decode":
        return model.decode_time_s(int(r.num_seqs), int(r.context_tokens))
    if r.kind == "mixed":  # the totals minus the decode part are the prefill chunks
        seqs, ctx = int(r.decode_seqs), int(r.decode_context_tokens)
        n = max(1, int(r.num_seqs) - seqs)
        per_new, per_ctx = (int(r.new_tokens) - seqs) // n, (int(r.context_tokens) - ctx) // n
        return model.mixed_time_s([(per_new, per_ctx)] * n, seqs, ctx)
    n = max(1, int(r.num_seqs))
    per_new, per_ctx = int(r.new_tokens) // n, int(r.context_tokens) // n
    return model.prefill_time_s([(per_new, per_ctx)] * n)


def steps_frame(records: Sequence[dict], since_s: float = -math.inf) -> pd.DataFrame:
    """Served step records (from /steps) that ended after `since_s`, as a profile-format frame."""
    frame = pd.DataFrame(list(records), columns=["end_s", *STEP_COLUMNS])
    frame[["decode_seqs", "decode_context_tokens"]] = frame[["decode_seqs", "decode_context_tokens"]].fillna(0)
    return frame[frame["end_s"] > since_s].reset_index(drop=True)
