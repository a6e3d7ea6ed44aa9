"""The step times and boundaries of one decode span, read by index (span.py).

A span of k iterations has step times `step_0 .. step_{k-1}` and boundaries `b_0 = start` ..
`b_k`, `b_{i+1} = b_i + step_i` added one at a time, as simpy adds a timeout's delay to its
clock. The instance sleeps until the span's end `b_k`, so every step is computed when the span
is planned; `SpanTimes` keeps both series as unboxed float arrays (librt.vecs, mypyc's native
arrays) and everything after reads them by index: a truncation or a router's view bisects the
boundaries, a settle sums the steps it ran. (Walking the steps again on each read, as spans did
before, computed every step of a span about three times.)

A `StepModel` is a latency model's decode_time_s for one batch size n as a compiled function of
the context, operation for operation (`LinearStep`, `RooflineStep`, `TableStep` for the measured
model, `OverheadStep` around any of them; steptime.StepSeries builds them); `model_times` fills
a span from one in one call (`StepModel.fill`, the linear and roofline steps inline in its loop).
Models without one give their steps as an array (`span_times`).
"""

from __future__ import annotations

import math
from bisect import bisect_right

from librt.vecs import vec
from mypy_extensions import i64


class SpanTimes:
    """One span's k step times and k + 1 boundaries, read by index."""

    def __init__(self, steps: vec[float], bounds: vec[float]) -> None:
        self.k = int(len(steps))
        self.steps = steps
        self.bound_values = bounds

    def step(self, i: int) -> float:
        """step_i (0 <= i < k)."""
        return self.steps[i]

    def bound(self, j: int) -> float:
        """b_j (0 <= j <= k)."""
        return self.bound_values[j]

    def bounds(self, first: int, last: int) -> list[float]:
        """[b_first .. b_last] as Python floats."""
        values = self.bound_values
        return [values[j] for j in range(first, last + 1)]

    def first_at_or_after(self, now_s: float) -> int:
        """The first j with b_j >= now_s (k + 1 if none): bisect_left over the boundaries."""
        return int(self._bisect(now_s, 0, self.k + 1))

    def last_before(self, now_s: float, j: int, last: int) -> int:
        """The last boundary before now_s, at most `last`, given that b_j (j < last) is."""
        if self.bound_values[j + 1] >= now_s:  # (the common case: none passed since)
            return j
        return int(self._bisect(now_s, j + 2, last + 1)) - 1

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

    def add_steps(self, total_s: float, first: int, stop: int) -> float:
        """total_s + step_first + ... + step_{stop-1}, one addition at a time."""
        steps = self.steps
        i: i64 = first
        end: i64 = stop
        while i < end:
            total_s += steps[i]
            i += 1
        return total_s


def model_times(model: StepModel, ctx0_tokens: int, k: int, start_s: float, first_extra_s: float) -> SpanTimes:
    """A span of k steps of `model` from ctx0_tokens (`span_times` of what the model fills)."""
    steps = vec[float]([0.0] * k)
    model.fill(ctx0_tokens, k, steps)
    return span_times(steps, start_s, first_extra_s)


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
    return SpanTimes(steps, bounds)


class StepModel:
    """A decode iteration's time as a function of the batch's total context tokens, for one
    batch size n: a latency model's decode_time_s(n, ctx) repeated operation for operation
    (steptime.StepSeries builds one per model and n; tests/sim/test_skip_ahead.py holds each kind
    to its model bit for bit)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def time_s(self, ctx_tokens: int) -> float:
        raise NotImplementedError

    def fill(self, ctx_tokens: int, count: i64, steps: vec[float]) -> None:
        """Write the times of `count` steps from ctx_tokens (the context growing by n a step) to
        steps[0 .. count-1]. Subclasses write this loop with their step inline (a call per step
        costs more than the step)."""
        n = self.n
        for i in range(count):
            steps[i] = self.time_s(ctx_tokens)
            ctx_tokens += n


class LinearStep(StepModel):
    """LinearModel: fixed_s + per_ctx_s * ctx (fixed_s = decode_base_s + decode_per_seq_s * n)."""

    def __init__(self, n: int, fixed_s: float, per_ctx_s: float) -> None:
        super().__init__(n)
        self.fixed_s = fixed_s
        self.per_ctx_s = per_ctx_s

    def time_s(self, ctx_tokens: int) -> float:
        return self.fixed_s + self.per_ctx_s * ctx_tokens

    # the loop over floats: contexts stay integers below 2**53, where float arithmetic is exact
    def fill(self, ctx_tokens: int, count: i64, steps: vec[float]) -> None:
        fixed_s, per_ctx_s, ctx, dn = self.fixed_s, self.per_ctx_s, float(ctx_tokens), float(self.n)
        for i in range(count):
            steps[i] = fixed_s + per_ctx_s * ctx
            ctx += dn


class RooflineStep(StepModel):
    """RooflineModel.decode_time_s for one batch size n as a function of the context, term by
    term in the model's order (steptime.RooflineDecode builds it from the model's own terms;
    the attention factors come from pdsim.perf.cost.attention_factors)."""

    def __init__(
        self, n: int, fixed_s: float, head_s: float, tail_s: tuple[float, ...], comm_s: float,
        flops_per_pair: float, num_layers: float, tp: float, kv_bytes_per_token: float,
        flops_per_s: float, hbm_bytes_per_s: float, mfu: float, mbu: float,
    ) -> None:
        super().__init__(n)
        self.fixed_s = fixed_s  # overhead_s + overhead_per_seq_s * n
        self.head_s = head_s  # the operators before attention, summed from 0 in order
        # those after it, added one at a time (decode: the LM head alone); the first apart, as a
        # float (0.0 when there is none: adding it to a positive time changes nothing)
        self.tail0_s = tail_s[0] if tail_s else 0.0
        self.tail_rest = tail_s[1:]
        self.comm_s = comm_s
        self.flops_per_pair = flops_per_pair
        self.num_layers = num_layers
        self.tp = tp
        self.kv_bytes_per_token = kv_bytes_per_token
        self.flops_per_s = flops_per_s
        self.hbm_bytes_per_s = hbm_bytes_per_s
        self.mfu = mfu
        self.mbu = mbu

    def time_s(self, ctx_tokens: int) -> float:
        step = vec[float]([0.0])
        self.fill(ctx_tokens, 1, step)
        return step[0]

    def fill(self, ctx_tokens: int, count: i64, steps: vec[float]) -> None:
        # the terms in locals, the step inline: ~4x fewer instructions than a time_s call a step
        fpp, layers, tp, kvb = self.flops_per_pair, self.num_layers, self.tp, self.kv_bytes_per_token
        fps, hbm, mfu, mbu = self.flops_per_s, self.hbm_bytes_per_s, self.mfu, self.mbu
        head_s, tail0_s, tail_rest, fixed_s, comm_s = self.head_s, self.tail0_s, self.tail_rest, self.fixed_s, self.comm_s
        ctx, dn = float(ctx_tokens), float(self.n)  # (a float count stays exact below 2**53)
        for i in range(count):
            compute_s = fpp * ctx * layers / tp / fps / mfu  # cost._attention_op's order
            memory_s = kvb * (ctx + dn) / hbm / mbu
            busy = head_s + (compute_s if compute_s >= memory_s else memory_s) + tail0_s
            for t_s in tail_rest:
                busy = busy + t_s
            steps[i] = fixed_s + busy + comm_s
            ctx += dn
class TableStep(StepModel):
    """MeasuredModel.decode_time_s for one batch size n (its `decode_terms`): the context-free
    part plus layers x the generation table at the mean KV length, interpolated in log space
    along the row kept for n, as pdsim.perf.optables.LogGrid.at_second does it. The segment of
    the last lookup is kept (a span's contexts grow: most lookups stay in it)."""

    def __init__(
        self, n: int, fixed_s: float, layers: int, row: list[float], drow: list[float],
        axis: list[float], width: list[float],
    ) -> None:
        super().__init__(n)
        self.fixed_s = fixed_s
        self.layers = float(layers)
        self.n_seqs = float(n)
        self.row = row
        self.drow = drow
        self.axis = axis
        self.width = width
        self.last = max(len(axis) - 2, 0)
        # the kept segment j: log contexts in [lo, hi) take it (j = at_second's clamped bisect)
        self.lo = self.hi = self.at = self.seg_width = self.seg_row = self.seg_drow = 0.0
        self.seek(0)

    def seek(self, j: int) -> None:
        """Keep segment j: its bounds (open at the first and last), start, width and row terms."""
        self.lo = -math.inf if j == 0 else self.axis[j]
        self.hi = math.inf if j >= self.last else self.axis[j + 1]
        self.at, self.seg_width = self.axis[j], self.width[j]
        self.seg_row, self.seg_drow = self.row[j], self.drow[j]

    def time_s(self, ctx_tokens: int) -> float:
        per_seq = float(ctx_tokens) / self.n_seqs  # (exact for int / int below 2**53: numpy's too)
        log_y = math.log(per_seq if per_seq >= 1.0 else 1.0)
        if not self.lo <= log_y < self.hi:
            self.seek(min(max(bisect_right(self.axis, log_y) - 1, 0), self.last))
        v = (log_y - self.at) / self.seg_width
        if v < 0.0:
            v = 0.0
        ms = math.exp(self.seg_row + v * self.seg_drow)
        return self.fixed_s + self.layers * (ms / 1e3)


class OverheadStep(StepModel):
    """StepOverheadModel over another step model: scale * inner(ctx + offset * n) + overhead_s
    + per_token_s * ctx (its decode_time_s's order)."""

    def __init__(self, inner: StepModel, scale: float, overhead_s: float, per_token_s: float, offset: int) -> None:
        super().__init__(inner.n)
        self.inner = inner
        self.scale = scale
        self.overhead_s = overhead_s
        self.per_token_s = per_token_s
        self.offset_tokens = offset * inner.n

    def time_s(self, ctx_tokens: int) -> float:
        return (self.scale * self.inner.time_s(ctx_tokens + self.offset_tokens) + self.overhead_s
                + self.per_token_s * ctx_tokens)

    def fill(self, ctx_tokens: int, count: i64, steps: vec[float]) -> None:
        inner = vec[float]([0.0] * count)  # the inner model's steps at the offset contexts
        self.inner.fill(ctx_tokens + self.offset_tokens, count, inner)
        scale, overhead_s, per_token_s, n = self.scale, self.overhead_s, self.per_token_s, self.n
        for i in range(count):
            steps[i] = scale * inner[i] + overhead_s + per_token_s * ctx_tokens
            ctx_tokens += n
