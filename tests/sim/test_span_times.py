"""A span's times are computed when read (spantimes.py): its end when it is planned, its steps and
boundaries up to where a read reaches. Whatever the order of the reads, every one must give the
bits a span computed whole gives: the model's decode_time_s, summed one at a time (simpy's clock)."""

from __future__ import annotations

import bisect

import numpy as np
import pytest
from simkit import TINY_HW, TINY_MODEL

from pdsim.perf import LinearModel, RooflineModel, StepOverheadModel
from pdsim.sim.spantimes import FIRST_STEPS, SpanTimes
from pdsim.sim.steptime import StepSeries

LINEAR = LinearModel(prefill_base_s=0.02, prefill_per_token_s=1e-4, decode_base_s=0.01, decode_per_seq_s=1.3e-4,
                     decode_per_ctx_token_s=2.1e-7)
ROOFLINE = RooflineModel(TINY_MODEL, TINY_HW, tp=1, overhead_per_seq_s=1e-5)
MODELS = {
    "linear": LINEAR,
    "roofline": ROOFLINE,
    "overhead_roofline": StepOverheadModel(ROOFLINE, 0.001, 0.0023, decode_scale=1.37, per_context_token_s=1e-7,
                                           decode_context_offset_tokens=3),
}
SIZES = (1, 2, FIRST_STEPS - 1, FIRST_STEPS, FIRST_STEPS + 1, 2 * FIRST_STEPS + 1, 300, 1024, 1025, 1500)  # (> 1024: no slice of zeros)


def _reference(model: object, n: int, ctx0: int, k: int, start_s: float, extra_s: float) -> tuple[list[float], list[float]]:
    steps = [model.decode_time_s(n, ctx0 + n * i) for i in range(k)]  # type: ignore[attr-defined]
    if extra_s > 0:
        steps[0] += extra_s
    bounds = [start_s]
    for s in steps:
        bounds.append(bounds[-1] + s)
    return steps, bounds


def _read(times: SpanTimes, rng: np.random.Generator, steps: list[float], bounds: list[float]) -> None:
    """One random read of `times`, checked against the whole span's steps and bounds."""
    k, op = len(steps), int(rng.integers(6))
    if op == 0:
        i = int(rng.integers(k))
        assert times.step(i) == steps[i]
    elif op == 1:
        j = int(rng.integers(k + 1))
        assert times.bound(j) == bounds[j]
    elif op == 2:
        first = int(rng.integers(k + 1))
        last = int(rng.integers(first, k + 1))
        assert times.bounds(first, last) == bounds[first:last + 1]
    elif op == 3:
        now_s = float(rng.uniform(bounds[0] - 0.01, bounds[k] + 0.01))
        assert times.first_at_or_after(now_s) == bisect.bisect_left(bounds, now_s)
    elif op == 4 and k >= 2:  # from a boundary j before now, at most `last` (< k)
        last = int(rng.integers(1, k))
        j = int(rng.integers(last))
        now_s = bounds[j] + float(rng.random()) * (bounds[k] + 0.01 - bounds[j])
        if now_s > bounds[j]:
            assert times.last_before(now_s, j, last) == min(last, bisect.bisect_left(bounds, now_s) - 1)
    elif op == 5:
        first = int(rng.integers(k + 1))
        stop = int(rng.integers(first, k + 1))
        total = 0.25
        for s in steps[first:stop]:
            total += s
        assert times.add_steps(0.25, first, stop) == total


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("seed", range(4))
def test_span_times_read_in_any_order_are_the_whole_spans_bits(name: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    series = StepSeries(MODELS[name])
    for k in SIZES:
        for n, ctx0, extra_s in ((1, 17, 0.0), (7, 12345, 0.0123), (64, 64 * 3000 + 5, 0.0)):
            steps, bounds = _reference(MODELS[name], n, ctx0, k, 3.21, extra_s)
            times = series.span(n, ctx0, k, 3.21, extra_s)
            model = series.step_model(n)
            assert model is not None and model.recompute == (name != "overhead_roofline")
            stored = 0 if model.recompute else k  # (a step too dear to compute twice: all kept)
            assert times.filled == stored and times.bound(k) == bounds[k]  # the end: nothing stored
            assert times.step(0) == steps[0] and times.filled == stored  # (every span reads its first step)
            for _ in range(12):
                _read(times, rng, steps, bounds)
            assert times.add_steps(0.5, 0, k) == sum_in_order(steps, 0.5) and times.bounds(0, k) == bounds


def test_a_truncated_span_computes_about_what_it_reads() -> None:
    series = StepSeries(LINEAR)
    steps, bounds = _reference(LINEAR, 3, 900, 1024, 0.0, 0.004)
    times = series.span(3, 900, 1024, 0.0, 0.004)
    assert times.first_at_or_after(bounds[40] - 1e-12) == 40  # a truncation near boundary 40
    assert times.filled == 64  # the first read computes FIRST_STEPS, the next doubles that
    assert times.bounds(1, 40) == bounds[1:41] and times.add_steps(0.0, 0, 40) == sum_in_order(steps[:40])
    assert times.filled == 64
    assert times.bound(1024) == bounds[1024] and times.filled == 64  # (the end was computed when planned)
    assert times.add_steps(1.0, 0, 1024) == sum_in_order(steps, 1.0) and times.filled == 64  # (from the model)
    assert times.bounds(1000, 1024) == bounds[1000:] and times.filled == 1024


def sum_in_order(values: list[float], start: float = 0.0) -> float:
    for v in values:
        start += v
    return start
