"""Fit an engine generation's step costs on top of the measured operator tables.

Operator tables time kernels; a serving engine's step adds what no table measures: its CPU
work (scheduling, sampling, Python) and, for older engines, slower kernels than the tables'.
Given whole-step measurements (profile.py points, e.g. Splitwise's vLLM-2023 profile), fit

    decode step  = decode_scale  * (ops + per_seq_s * sequences) + decode_overhead_s
    prefill step = prefill_scale * (ops + per_seq_s * sequences) + prefill_overhead_s

by least squares on relative error (rows weighted by 1 / measured), decode first (it pins
per_seq_s), then prefill with per_seq_s fixed. `ops` is the measured model with no overhead.
The result maps onto existing perf fields: overhead_per_seq_s, {prefill,decode}_step_scale and
{prefill,decode}_step_overhead_s (overhead.py), so a preset YAML can carry it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from pdsim.perf.base import LatencyModel
from pdsim.perf.measured import MeasuredModel
from pdsim.perf.overhead import StepOverheadModel
from pdsim.perf.profile import ProfilePoint


@dataclass(frozen=True, slots=True)
class EngineFit:
    prefill_scale: float
    prefill_overhead_s: float
    decode_scale: float
    decode_overhead_s: float
    per_seq_s: float

    def apply(self, ops: MeasuredModel) -> LatencyModel:
        inner = replace(ops, overhead_s=0.0, overhead_per_seq_s=self.per_seq_s, _memo={})
        return StepOverheadModel(inner, self.prefill_overhead_s, self.decode_overhead_s,
                                 self.prefill_scale, self.decode_scale)

    def perf_fields(self) -> dict[str, float]:
        """The perf YAML fields that reproduce this fit."""
        return {"overhead_s": 0.0, "overhead_per_seq_s": self.per_seq_s,
                "prefill_step_scale": self.prefill_scale, "decode_step_scale": self.decode_scale,
                "prefill_step_overhead_s": self.prefill_overhead_s,
                "decode_step_overhead_s": self.decode_overhead_s}


def predict_s(model: LatencyModel, point: ProfilePoint) -> float:
    """The model's time for a profile row (prompts in a prefill row taken as equal length)."""
    if point.kind == "prefill":
        per = point.new_tokens // point.num_seqs
        cached = point.context_tokens // point.num_seqs
        return model.prefill_time_s([(per, cached)] * point.num_seqs)
    return model.decode_time_s(point.num_seqs, point.context_tokens)


def _nonnegative_lstsq(columns: list[np.ndarray], y: np.ndarray) -> np.ndarray:
    """min sum((A c / y - 1)^2) with c >= 0: the best feasible solution over column subsets
    (the first column, the operator scale, always kept; at most three columns)."""
    a = np.stack(columns, axis=1) / y[:, None]
    best, best_cost = np.zeros(len(columns)), np.inf
    for mask in range(1 << (len(columns) - 1)):
        keep = [0] + [i for i in range(1, len(columns)) if (mask >> (i - 1)) & 1]
        coef, *_ = np.linalg.lstsq(a[:, keep], np.ones_like(y), rcond=None)
        cost = float(np.sum((a[:, keep] @ coef - 1) ** 2))
        if np.all(coef >= 0) and cost < best_cost:
            best = np.zeros(len(columns))
            best[keep] = coef
            best_cost = cost
    return best


def fit_engine(rows: Sequence[tuple[MeasuredModel, ProfilePoint]]) -> EngineFit:
    """Fit the five engine terms to whole-step measurements, each row with the measured model
    of its own setup (TP, model); needs >= 3 decode and >= 2 prefill rows."""
    decode = [(_bare(m), p) for m, p in rows if p.kind == "decode"]
    prefill = [(_bare(m), p) for m, p in rows if p.kind == "prefill"]
    if len(decode) < 3 or len(prefill) < 2:
        raise ValueError(f"engine fit needs >= 3 decode and >= 2 prefill rows, got "
                         f"{len(decode)} and {len(prefill)}")
    y = np.array([p.latency_s for _, p in decode])
    t = np.array([predict_s(m, p) for m, p in decode])
    seqs = np.array([float(p.num_seqs) for _, p in decode])
    scale_d, per_seq_scaled, overhead_d = _nonnegative_lstsq([t, seqs, np.ones_like(y)], y)
    per_seq = per_seq_scaled / scale_d if scale_d > 0 else 0.0
    y = np.array([p.latency_s for _, p in prefill])
    t = np.array([predict_s(m, p) + per_seq * p.num_seqs for m, p in prefill])
    scale_p, overhead_p = _nonnegative_lstsq([t, np.ones_like(y)], y)
    return EngineFit(float(scale_p), float(overhead_p), float(scale_d), float(overhead_d),
                     float(per_seq))


def _bare(model: MeasuredModel) -> MeasuredModel:
    return replace(model, overhead_s=0.0, overhead_per_seq_s=0.0, _memo={})
