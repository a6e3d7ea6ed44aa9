"""The engine's step latencies as served, next to the offline profile.

Each pdreal instance keeps its recent forwards (`GET /steps`: kind, batch size, new and cached
tokens, latency). Over the replay they show what the steps really cost while the prefill and
decode processes, the router and the client share the machine (and whatever else runs on it),
which an offline profile of one process cannot know. `slowdown` is the median ratio of served to
profiled forward latency at the same batch shapes, per kind: pdsim's perf.*_step_scale
(pdsim/perf/overhead.py). A median over every forward of the run is robust to the bursts of
outside load a shared machine has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from pdsim.perf.base import LatencyModel

STEP_COLUMNS = ("kind", "num_seqs", "new_tokens", "context_tokens", "latency_s")


def slowdown(steps: pd.DataFrame, model: LatencyModel) -> dict[str, float]:
    """Median of served latency / modelled latency per kind (1 = the model's speed)."""
    out: dict[str, float] = {}
    for kind in ("prefill", "decode"):
        rows = steps[steps["kind"] == kind]
        ratios = [r.latency_s / _predict(model, r) for r in rows.itertuples(index=False)]
        ratios = [x for x in ratios if math.isfinite(x)]
        out[kind] = float(np.median(ratios)) if ratios else math.nan
    return out


def _predict(model: LatencyModel, r: object) -> float:
    if r.kind == "decode":
        return model.decode_time_s(int(r.num_seqs), int(r.context_tokens))
    n = max(1, int(r.num_seqs))
    per_new, per_ctx = int(r.new_tokens) // n, int(r.context_tokens) // n
    return model.prefill_time_s([(per_new, per_ctx)] * n)


def steps_frame(records: Sequence[dict], since_s: float = -math.inf) -> pd.DataFrame:
    """Served step records (from /steps) that ended after `since_s`, as a profile-format frame."""
    frame = pd.DataFrame(list(records), columns=["end_s", *STEP_COLUMNS])
    return frame[frame["end_s"] > since_s].reset_index(drop=True)
