"""Fit latency-model parameters to measured profile points, and score any model against them.

- `fit_fitted`: DistServe's coefficients by least squares on relative error (rows weighted by
  1 / measured), prefill and both decode regimes separately. Profile rows carry batch totals, so
  prompts in one row are taken as equal length (Σlen² = total² / num_seqs).
- `fit_roofline`: mfu, mbu, overhead_s and overhead_per_seq_s. The roofline is piecewise linear
  in (1/mfu, 1/mbu, overhead, per-seq overhead): with each operator's bound side (compute or
  memory) fixed it is a linear least squares; alternate between solving and re-choosing sides,
  from a few starts, within bounds 0 < mfu, mbu <= 1 and overheads >= 0, reweighting so the
  result minimises the mean absolute relative error.
- `mape_by_regime`: mean absolute percentage error per regime (prefill, decode below/above the
  batch threshold) and overall.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.perf import cost
from pdsim.perf.base import LatencyModel
from pdsim.perf.fitted import Coefficients, FittedModel
from pdsim.perf.profile import ProfilePoint
from pdsim.perf.roofline import RooflineModel, RooflineTerms

MIN_POINTS_PER_REGIME = 3
ROOFLINE_STARTS = ((1.0, 1.0), (2.0, 1.4), (4.0, 2.0), (1.5, 4.0), (8.0, 8.0))  # (1/mfu, 1/mbu)
ROOFLINE_ITERATIONS = 100
IRLS_FLOOR = 1e-6  # relative error below which a point's IRLS weight stops growing


def regime(point: ProfilePoint, batch_threshold: int) -> str:
    if point.kind == "prefill":
        return "prefill"
    return "decode_small_batch" if point.num_seqs < batch_threshold else "decode_large_batch"


def predict(model: LatencyModel, point: ProfilePoint) -> float:
    """The model's latency for a profiled step (equal-length prompts within a prefill row)."""
    if point.kind == "decode":
        return model.decode_time_s(point.num_seqs, point.context_tokens)
    n, c = point.new_tokens / point.num_seqs, point.context_tokens / point.num_seqs
    return model.prefill_time_s([(round(n), round(c))] * point.num_seqs)


def mape_by_regime(
    model: LatencyModel, points: Sequence[ProfilePoint], batch_threshold: int = 95
) -> dict[str, float]:
    """MAPE (%) per regime present in `points`, plus 'all'."""
    errors: dict[str, list[float]] = {}
    for p in points:
        err = abs(predict(model, p) - p.latency_s) / p.latency_s * 100
        errors.setdefault(regime(p, batch_threshold), []).append(err)
        errors.setdefault("all", []).append(err)
    return {name: float(np.mean(errs)) for name, errs in errors.items()}


def _weighted_lstsq(features: np.ndarray, target: np.ndarray, weights: np.ndarray) -> np.ndarray:
    solution, *_ = np.linalg.lstsq(features * weights[:, None], target * weights, rcond=None)
    return solution


def _fit_triple(features: list[list[float]], latencies_ms: list[float]) -> Coefficients:
    target = np.array(latencies_ms)
    a, b, c = _weighted_lstsq(np.array(features, dtype=float), target, 1.0 / target)
    return float(a), float(b), float(c)


def fit_fitted(points: Sequence[ProfilePoint], batch_threshold: int = 95) -> FittedModel:
    """DistServe-form coefficients (ms) fitted to the points."""
    prefill = [p for p in points if p.kind == "prefill"]
    small = [p for p in points if regime(p, batch_threshold) == "decode_small_batch"]
    large = [p for p in points if regime(p, batch_threshold) == "decode_large_batch"]
    if len(prefill) < MIN_POINTS_PER_REGIME or len(small) + len(large) < MIN_POINTS_PER_REGIME:
        raise ValueError(
            f"need >= {MIN_POINTS_PER_REGIME} prefill and decode points, got {len(prefill)} and {len(small) + len(large)}"
        )
    prefill_ms = _fit_triple(
        [
            [
                1.0,
                p.new_tokens,
                (p.new_tokens**2 + 2 * p.new_tokens * p.context_tokens) / p.num_seqs,
            ]
            for p in prefill
        ],
        [p.latency_s * 1e3 for p in prefill],
    )

    def decode(group: Sequence[ProfilePoint]) -> Coefficients:
        return _fit_triple(
            [[1.0, p.context_tokens, p.num_seqs] for p in group], [p.latency_s * 1e3 for p in group]
        )

    enough_small, enough_large = (
        len(small) >= MIN_POINTS_PER_REGIME,
        len(large) >= MIN_POINTS_PER_REGIME,
    )
    both = decode(small + large)
    small_ms = decode(small) if enough_small else both
    large_ms = decode(large) if enough_large else both
    return FittedModel(prefill_ms, small_ms, large_ms, batch_threshold)


@dataclass(frozen=True, slots=True)
class RooflineFit:
    mfu: float
    mbu: float
    overhead_s: float
    overhead_per_seq_s: float


def _design(terms: Sequence[RooflineTerms], inv_mfu: float, inv_mbu: float) -> np.ndarray:
    """Rows [Σ compute-bound c, Σ memory-bound m, 1, seqs] with sides chosen at the given efficiencies."""
    rows = []
    for t in terms:
        compute = sum(c for c, m in t.ops if c * inv_mfu >= m * inv_mbu)
        memory = sum(m for c, m in t.ops if c * inv_mfu < m * inv_mbu)
        rows.append([compute, memory, 1.0, float(t.num_seqs)])
    return np.array(rows)


def _bounded_solve(design: np.ndarray, target: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Least squares for (1/mfu, 1/mbu, overhead, per-seq overhead), 1/mfu, 1/mbu >= 1, rest >= 0."""
    lower = np.array([1.0, 1.0, 0.0, 0.0])
    fixed = np.zeros(len(lower), dtype=bool)
    x = lower.copy()
    for _ in range(len(lower)):
        free = ~fixed
        residual = target - design[:, fixed] @ x[fixed]
        if free.any():
            x[free] = _weighted_lstsq(design[:, free], residual, weights)
        low = (x < lower) & free
        if not low.any():
            break
        x[low] = lower[low]
        fixed |= low
    return np.maximum(x, lower)


def _terms(point: ProfilePoint, probe: RooflineModel) -> RooflineTerms:
    seqs, tp, model = point.num_seqs, probe.tp, probe.model
    if point.kind == "decode":
        return probe.terms(cost.decode_cost(model, seqs, point.context_tokens, tp))
    item = (round(point.new_tokens / seqs), round(point.context_tokens / seqs))
    return probe.terms(cost.prefill_cost(model, [item] * seqs, tp))


def fit_roofline(
    points_by_tp: Mapping[int, Sequence[ProfilePoint]],
    model: ModelConfig,
    hardware: HardwareConfig,
    comm_latency_s: float = 1.0e-5,
) -> RooflineFit:
    """Efficiencies and overhead that best reproduce the points (relative least squares).

    Points from several TP sizes fit one set of efficiencies; mixing TPs separates the fixed
    overhead from the bandwidth term, which a single TP's decode rows cannot.
    """
    points = [p for tp in sorted(points_by_tp) for p in points_by_tp[tp]]
    probes = {
        tp: RooflineModel(model, hardware, tp, comm_latency_s=comm_latency_s) for tp in points_by_tp
    }
    terms = [_terms(p, probes[tp]) for tp in sorted(points_by_tp) for p in points_by_tp[tp]]
    if len(points) < 3:
        raise ValueError(f"need >= 3 profile points to fit a roofline, got {len(points)}")
    measured = np.array([p.latency_s for p in points])
    target = measured - np.array([t.comm_s for t in terms])
    candidates = [_fit_from(terms, measured, target, start) for start in ROOFLINE_STARTS]
    best = min(candidates, key=lambda x: _mape(terms, measured, x))
    return RooflineFit(float(1 / best[0]), float(1 / best[1]), float(best[2]), float(best[3]))


def _predict(terms: Sequence[RooflineTerms], x: np.ndarray) -> np.ndarray:
    return np.array([t.time_s(1 / x[0], 1 / x[1], x[2], x[3]) for t in terms])


def _mape(terms: Sequence[RooflineTerms], measured: np.ndarray, x: np.ndarray) -> float:
    return float(np.mean(np.abs(_predict(terms, x) - measured) / measured))


def _fit_from(
    terms: Sequence[RooflineTerms],
    measured: np.ndarray,
    target: np.ndarray,
    start: tuple[float, float],
) -> np.ndarray:
    """Alternate bound sides and weighted solves; the weights make it minimise Σ|relative error|
    (iteratively reweighted least squares), so a few outlying measurements cannot dominate."""
    x = np.array([*start, 0.0, 0.0])
    weights = 1.0 / measured
    for _ in range(ROOFLINE_ITERATIONS):
        new = _bounded_solve(_design(terms, x[0], x[1]), target, weights)
        relative = np.abs(_predict(terms, new) - measured) / measured
        weights = 1.0 / (measured * np.sqrt(np.maximum(relative, IRLS_FLOOR)))
        if np.allclose(new, x, rtol=1e-10, atol=1e-14):
            break
        x = new
    return x


def calibrated_roofline(
    model: ModelConfig, hardware: HardwareConfig, tp: int, fit: RooflineFit
) -> RooflineModel:
    return RooflineModel(
        model,
        hardware,
        tp,
        mfu=fit.mfu,
        mbu=fit.mbu,
        overhead_s=fit.overhead_s,
        overhead_per_seq_s=fit.overhead_per_seq_s,
    )
