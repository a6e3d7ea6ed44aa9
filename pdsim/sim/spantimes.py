"""The step times and boundaries of one decode span, read by index (span.py).

A span of k iterations has step times `step_0 .. step_{k-1}` and boundaries `b_0 = start` ..
`b_k`, `b_{i+1} = b_i + step_i` added one at a time, as simpy adds a timeout's delay to its
clock. The instance sleeps until the span's end `b_k`, so the end is computed when the span is
planned: its steps added one at a time, none stored (`DecodeStep.accumulate`,
pdsim/perf/steps/decode.py).
The rest is read later, and only up to where the span got: about half of all spans are
truncated (a request joins), on average half-way, and a settle's busy time is its steps summed
again from the model (`add_steps`), so a span that no one truncates or views stores nothing.
Boundaries a truncation or a router's view bisects (and token times list) are computed when
first read, for a prefix (at least FIRST_STEPS, then at least double), into an unboxed float
array (librt.vecs) made for the whole span at the first read; no step is stored. The prefix's
boundaries are the same float additions in the same order as the end's, so b_k read from a
complete prefix is the end, bit for bit.

This is for the linear, roofline and fitted steps, cheap to compute again (`DecodeStep.recompute`).
The measured table's steps (a log and an exp each) and steps that call a model give a span's steps
as an array when it is planned (`span_times`: all computed, none twice).
"""

from __future__ import annotations

from typing import Final

from librt.vecs import vec
from mypy_extensions import i64

from pdsim.perf.steps.decode import DecodeStep

FIRST_STEPS: Final = 32  # steps computed at a span's first read (then at least doubled)
MAX_SPAN_ITERATIONS: Final = 1024  # longer runs are split into several spans (bounds the work per span)
# a span's boundary array, sliced (a copy) from zeros: half the instructions of one made from a
# list of floats (a longer span, which the simulator never plans but a StepSeries.span caller may,
# still gets a list)
_ZEROS: Final = vec[float]([0.0] * (MAX_SPAN_ITERATIONS + 1))


class SpanTimes:
    """One span's k step times and k + 1 boundaries, read by index; `bound_values[:filled + 1]`
    are computed (all of them, and every step, for a span given as an array)."""

    def __init__(self, k: int, step0_s: float, end_s: float, steps: vec[float], bounds: vec[float],
                 model: DecodeStep | None, ctx0_tokens: int) -> None:
        self.k = k
        self.step0_s = step0_s  # step_0 (read by every span: its busy time)
        self.end_s = end_s  # b_k
        self.steps = steps  # (a span given as an array; empty for a model's)
        self.bound_values = bounds
        self.filled: i64 = len(bounds) - 1
        self.model = model  # computes the rest (None: all given)
        self.ctx0_tokens = ctx0_tokens

    def step(self, i: int) -> float:
        """step_i (0 <= i < k)."""
        if i == 0:
            return self.step0_s
        model = self.model
        if model is not None:
            return model.time_s(self.ctx0_tokens + model.n * i)
        return self.steps[i]

    def bound(self, j: int) -> float:
        """b_j (0 <= j <= k)."""
        if j == self.k:
            return self.end_s
        if j > self.filled:
            self._fill(j)
        return self.bound_values[j]

    def bounds(self, first: int, last: int) -> list[float]:
        """[b_first .. b_last] as Python floats."""
        if last > self.filled:
            self._fill(last)
        values = self.bound_values
        return [values[j] for j in range(first, last + 1)]

    def first_at_or_after(self, now_s: float) -> int:
        """The first j with b_j >= now_s (k + 1 if none): bisect_left over the boundaries."""
        if self.end_s < now_s:
            return self.k + 1
        self._reach(now_s, self.k)  # (then b_filled >= now_s)
        return int(self._bisect(now_s, 0, self.filled + 1))

    def last_before(self, now_s: float, j: int, last: int) -> int:
        """The last boundary before now_s, at most `last`, given that b_j (j < last) is."""
        if j + 1 > self.filled:
            self._fill(j + 1)
        if self.bound_values[j + 1] >= now_s:  # (the common case: none passed since)
            return j
        self._reach(now_s, last)
        return int(self._bisect(now_s, j + 2, min(last, self.filled) + 1)) - 1

    def add_steps(self, total_s: float, first: int, stop: int) -> float:
        """total_s + step_first + ... + step_{stop-1}, one addition at a time (a model's steps
        computed again: no span stores them)."""
        if first < stop and first == 0:
            total_s += self.step0_s
            first = 1
        model = self.model
        if model is not None:
            return model.accumulate(total_s, self.ctx0_tokens + model.n * first, stop - first)
        steps = self.steps
        i: i64 = first
        end: i64 = stop
        while i < end:
            total_s += steps[i]
            i += 1
        return total_s

    def _reach(self, now_s: float, upto: int) -> None:
        """Compute boundaries until one is at or after now_s, or b_upto is computed."""
        while self.filled < upto and self.bound_values[self.filled] < now_s:
            self._fill(self.filled + 1)

    def _bisect(self, now_s: float, lo: i64, hi: i64) -> i64:
        """bisect_left of now_s in b_lo .. b_{hi-1} (hi if every one is before now_s)."""
        values = self.bound_values
        while lo < hi:
            mid = (lo + hi) >> 1
            if values[mid] < now_s:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _fill(self, upto: i64) -> None:
        """Compute the boundaries up to b_upto at least (to b_FIRST_STEPS, or double the
        computed prefix, if further): the model's steps added on from the last computed one.
        The first read makes the array for the whole span (zeroing it is cheap; copying a
        prefix each time it grew was not)."""
        done = self.filled
        size = upto  # (comparisons, not max(): compiled, i64 throughout)
        if size < 2 * done:
            size = 2 * done
        if size < FIRST_STEPS:
            size = FIRST_STEPS
        if size > self.k:
            size = self.k
        model = self.model
        assert model is not None, "a span given as an array is computed already"
        if done == 0:  # b_1 = b_0 + step_0 (its reload included), as the end was computed
            bounds = _ZEROS[:self.k + 1] if self.k < len(_ZEROS) else vec[float]([0.0] * (self.k + 1))
            bounds[0] = self.bound_values[0]
            bounds[1] = bounds[0] + self.step0_s
            self.bound_values = bounds
            done = 1
        model.add_up(self.bound_values, self.ctx0_tokens + model.n * done, done, size)
        self.filled = size


def model_times(model: DecodeStep, ctx0_tokens: int, k: int, start_s: float, first_extra_s: float) -> SpanTimes:
    """A span of k steps of `model` from ctx0_tokens, step_0 first_extra_s longer (a KV reload
    before it; ignored unless positive), starting at start_s: its end computed now, its
    boundaries when read."""
    step0_s, end_s = 0.0, start_s
    if k > 0:
        step0_s = model.time_s(ctx0_tokens)
        if first_extra_s > 0.0:
            step0_s += first_extra_s
        end_s = model.accumulate(start_s + step0_s, ctx0_tokens + model.n, k - 1)
    return SpanTimes(k, step0_s, end_s, vec[float](), vec[float]([start_s]), model, ctx0_tokens)


def span_times(steps: vec[float], start_s: float, first_extra_s: float) -> SpanTimes:
    """A span of these step times starting at start_s, step_0 first_extra_s longer (a KV reload
    before it; ignored unless positive): its boundaries b_0 = start_s, b_{i+1} = b_i + step_i,
    added one at a time as simpy adds a timeout's delay to its clock."""
    k: i64 = len(steps)
    if k > 0 and first_extra_s > 0.0:
        steps[0] += first_extra_s
    bounds = vec[float]([start_s] * (k + 1))
    b_s = start_s
    i: i64 = 0
    while i < k:
        b_s += steps[i]
        i += 1
        bounds[i] = b_s
    return SpanTimes(k, steps[0] if k > 0 else 0.0, bounds[k], steps, bounds, None, 0)
