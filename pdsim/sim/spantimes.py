"""The step times and boundaries of one decode span, read by index (span.py).

A span of k iterations has step times `step_0 .. step_{k-1}` and boundaries `b_0 = start` ..
`b_k`, `b_{i+1} = b_i + step_i` added one at a time, as simpy adds a timeout's delay to its
clock. Spans are planned long (up to 1,024 iterations) and most are cut short, so what a span
reads is a few boundaries near the current time, its end, and sums over the iterations it ran.

- `ArrayTimes` holds both series as float64 arrays (steptime.StepSeries): any model.
- `WalkedTimes` computes a step when it is read and a boundary by walking forward from the last
  one read (time only moves forward), with the very float operations of the array path: the
  same bits, no array, no allocation per iteration. Compiled (mypyc), a walk is a loop over
  unboxed floats. `ModelTimes` is the one kind: its steps come from a `StepModel`, a latency
  model's decode_time_s for one batch size as a compiled function of the context (`LinearStep`,
  `RooflineStep`, `TableStep` for the measured model, `OverheadStep` around any of them). A
  walk over many steps is one call into the model (`StepModel.walk`, `walk_until`; the linear
  one a loop of float multiply-adds). (Keeping the costlier models' steps per span, each computed
  once, cost more than it saved: a list of floats boxes each one.)
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from functools import reduce
from operator import add

import numpy as np


def add_steps(total_s: float, steps: np.ndarray) -> float:
    """total_s + steps[0] + steps[1] + ... one addition at a time (as the step path sums)."""
    if steps.shape[0] > 64:  # long runs: numpy's cumsum adds in the same order
        out = np.empty(steps.shape[0] + 1, dtype=np.float64)
        out[0] = total_s
        out[1:] = steps
        return float(out.cumsum(out=out)[-1])
    return reduce(add, steps.tolist(), total_s)


class SpanTimes:
    """Read access to one span's step times and boundaries (k iterations)."""

    def __init__(self, k: int) -> None:
        self.k = k

    def step(self, i: int) -> float:
        """step_i (0 <= i < k)."""
        raise NotImplementedError

    def bound(self, j: int) -> float:
        """b_j (0 <= j <= k)."""
        raise NotImplementedError

    def bounds(self, first: int, last: int) -> list[float]:
        """[b_first .. b_last] as Python floats."""
        raise NotImplementedError

    def first_at_or_after(self, now_s: float) -> int:
        """The first j with b_j >= now_s (k + 1 if none): bisect_left over the boundaries."""
        raise NotImplementedError

    def last_before(self, now_s: float, j: int, last: int) -> int:
        """The last boundary before now_s, at most `last`, given that b_j (j < last) is."""
        raise NotImplementedError

    def add_steps(self, total_s: float, first: int, stop: int) -> float:
        """total_s + step_first + ... + step_{stop-1}, one addition at a time."""
        raise NotImplementedError


class ArrayTimes(SpanTimes):
    """Both series materialised as float64 arrays (steptime.StepSeries)."""

    def __init__(self, steps: np.ndarray, bounds: np.ndarray) -> None:
        super().__init__(int(steps.shape[0]))
        self.steps = steps
        self.bound_values = bounds

    def step(self, i: int) -> float:
        return float(self.steps[i])

    def bound(self, j: int) -> float:
        return float(self.bound_values[j])

    def bounds(self, first: int, last: int) -> list[float]:
        return self.bound_values[first:last + 1].tolist()  # type: ignore[no-any-return]

    def first_at_or_after(self, now_s: float) -> int:
        return bisect_left(self.bound_values, now_s)

    def last_before(self, now_s: float, j: int, last: int) -> int:
        bounds = self.bound_values
        if bounds[j + 1] < now_s:
            if j + 1 < last and bounds[j + 2] < now_s:  # several passed: bisect
                return min(bisect_left(bounds, now_s) - 1, last)
            return j + 1
        return j

    def add_steps(self, total_s: float, first: int, stop: int) -> float:
        return add_steps(total_s, self.steps[first:stop])


class WalkedTimes(SpanTimes):
    """A span whose step times are computed when read (`step`), its boundaries by walking forward
    from the last one read: b_{i+1} = b_i + step_i, the very additions of the array path."""

    def __init__(self, k: int, start_s: float, extra_s: float) -> None:
        super().__init__(k)
        self.start_s = start_s
        self.extra_s = extra_s  # step_0 is this much longer (a KV reload before it)
        self._j = 0  # the walk's position: b_j = _b (only ever moved to a boundary before a read time)
        self._b = start_s

    def step(self, i: int) -> float:
        step_s = self.model_step(i)
        if i == 0 and self.extra_s > 0.0:
            step_s += self.extra_s
        return step_s

    def model_step(self, i: int) -> float:
        """The model's time of iteration i."""
        raise NotImplementedError

    def model_walk(self, b_s: float, i: int, j: int) -> float:
        """b_s + the model's times of iterations i .. j-1 (1 <= i < j), one addition at a time."""
        raise NotImplementedError

    def model_walk_until(self, b_s: float, i: int, now_s: float) -> tuple[int, float]:
        """From b_s = b_i (i >= 1), the iterations i.. while each next boundary is before now_s
        (at most to k): how many were walked and the boundary reached."""
        raise NotImplementedError

    def _from(self, j: int) -> tuple[int, float]:
        """A boundary at or before j to walk from: the walk's position, or the start."""
        if j >= self._j:
            return self._j, self._b
        return 0, self.start_s

    def _walk(self, b_s: float, i: int, j: int) -> float:
        """b_s + step_i + ... + step_{j-1}, one addition at a time (step_0 carries extra_s)."""
        if i == 0 and j > 0:
            b_s += self.step(0)
            i = 1
        return self.model_walk(b_s, i, j) if i < j else b_s

    def bound(self, j: int) -> float:
        i, b = self._from(j)
        return self._walk(b, i, j)

    def bounds(self, first: int, last: int) -> list[float]:
        b = self.bound(first)
        out = [b]
        for i in range(first, last):
            b += self.step(i)
            out.append(b)
        return out

    def first_at_or_after(self, now_s: float) -> int:
        if self._b >= now_s:  # (a read time earlier than the walk's: from the start)
            self._j, self._b = 0, self.start_s
            if self.start_s >= now_s:
                return 0
        i, b = self._j, self._b
        if i == 0 and self.k > 0:
            nxt = b + self.step(0)
            if nxt >= now_s:
                return 1
            i, b = 1, nxt
        walked, b = self.model_walk_until(b, i, now_s)
        i += walked
        self._j, self._b = i, b  # b_i: the last boundary before now_s (or b_k)
        return i + 1

    def last_before(self, now_s: float, j: int, last: int) -> int:
        return max(j, min(self.first_at_or_after(now_s) - 1, last))

    def add_steps(self, total_s: float, first: int, stop: int) -> float:
        return self._walk(total_s, first, stop)


class StepModel:
    """A decode iteration's time as a function of the batch's total context tokens, for one
    batch size n: a latency model's decode_time_s(n, ctx) repeated operation for operation
    (steptime.StepSeries builds one per model and n; tests/sim/test_skip_ahead.py holds each kind
    to its model bit for bit)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def time_s(self, ctx_tokens: int) -> float:
        raise NotImplementedError

    def walk(self, b_s: float, ctx_tokens: int, steps: int) -> float:
        """b_s + time_s(ctx) + time_s(ctx + n) + ... (`steps` terms), one addition at a time:
        `walk_until` with no time to stop at (a step time is finite)."""
        return self.walk_until(b_s, ctx_tokens, steps, math.inf)[1]

    def walk_until(self, b_s: float, ctx_tokens: int, steps: int, now_s: float) -> tuple[int, float]:
        """From b_s, add the times of `steps` steps from ctx_tokens (the context growing by n a
        step) one at a time, stopping before the first step whose boundary is at or after now_s:
        the steps taken (at most `steps`) and the boundary reached. Subclasses repeat this loop
        with their step inline (a call per step costs more than the step)."""
        n = self.n
        for taken in range(steps):
            nxt = b_s + self.time_s(ctx_tokens)
            if nxt >= now_s:
                return taken, b_s
            b_s = nxt
            ctx_tokens += n
        return steps, b_s


class LinearStep(StepModel):
    """LinearModel: fixed_s + per_ctx_s * ctx (fixed_s = decode_base_s + decode_per_seq_s * n)."""

    def __init__(self, n: int, fixed_s: float, per_ctx_s: float) -> None:
        super().__init__(n)
        self.fixed_s = fixed_s
        self.per_ctx_s = per_ctx_s

    def time_s(self, ctx_tokens: int) -> float:
        return self.fixed_s + self.per_ctx_s * ctx_tokens

    # the walk over floats: contexts stay integers below 2**53, where float arithmetic is exact
    def walk_until(self, b_s: float, ctx_tokens: int, steps: int, now_s: float) -> tuple[int, float]:
        fixed_s, per_ctx_s, ctx, dn = self.fixed_s, self.per_ctx_s, float(ctx_tokens), float(self.n)
        for taken in range(steps):
            nxt = b_s + (fixed_s + per_ctx_s * ctx)
            if nxt >= now_s:
                return taken, b_s
            b_s = nxt
            ctx += dn
        return steps, b_s


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
        return self.walk(0.0, ctx_tokens, 1)  # (0.0 + t is t: a step time is positive)

    def walk_until(self, b_s: float, ctx_tokens: int, steps: int, now_s: float) -> tuple[int, float]:
        # the terms in locals, the step inline: ~4x fewer instructions than a time_s call a step
        fpp, layers, tp, kvb = self.flops_per_pair, self.num_layers, self.tp, self.kv_bytes_per_token
        fps, hbm, mfu, mbu = self.flops_per_s, self.hbm_bytes_per_s, self.mfu, self.mbu
        head_s, tail0_s, tail_rest, fixed_s, comm_s = self.head_s, self.tail0_s, self.tail_rest, self.fixed_s, self.comm_s
        ctx, dn = float(ctx_tokens), float(self.n)  # (a float count stays exact below 2**53)
        for taken in range(steps):
            compute_s = fpp * ctx * layers / tp / fps / mfu  # cost._attention_op's order
            memory_s = kvb * (ctx + dn) / hbm / mbu
            busy = head_s + (compute_s if compute_s >= memory_s else memory_s) + tail0_s
            for t_s in tail_rest:
                busy = busy + t_s
            nxt = b_s + (fixed_s + busy + comm_s)
            if nxt >= now_s:
                return taken, b_s
            b_s = nxt
            ctx += dn
        return steps, b_s


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


class ModelTimes(WalkedTimes):
    """A span whose step_i = model.time_s(ctx0 + n * i), step_0 plus extra_s."""

    def __init__(self, k: int, start_s: float, model: StepModel, ctx0: int, extra_s: float) -> None:
        super().__init__(k, start_s, extra_s)
        self.model = model
        self.ctx0 = ctx0

    def model_step(self, i: int) -> float:
        return self.model.time_s(self.ctx0 + self.model.n * i)

    def model_walk(self, b_s: float, i: int, j: int) -> float:
        return self.model.walk(b_s, self.ctx0 + self.model.n * i, j - i)

    def model_walk_until(self, b_s: float, i: int, now_s: float) -> tuple[int, float]:
        return self.model.walk_until(b_s, self.ctx0 + self.model.n * i, self.k - i, now_s)
