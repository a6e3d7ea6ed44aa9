"""Compiled decode steps: a latency model's decode_time_s(n, ctx) for one batch size n as a
function of the context, operation for operation (the same floats).

A span (pdsim/sim/span.py, spantimes.py) of k iterations of n requests reads `ctx0 + n * i`
context tokens at iteration i. Each perf model builds its own step (`decode_step(n)`, written
next to its decode_time_s): `LinearStep`, `RooflineStep`, `FittedStep`, `TableStep` (the measured
model), `OverheadStep` (around any of them) and `CallStep` (any other model, called once a step).
Each gives a span's steps two ways, with its step inline in the loop where that matters (a call
per step costs more than a linear or roofline step): `accumulate` adds them, one at a time, to a
running total (a span's end, computed when it is planned, and a settle's busy time: no array);
`add_up` writes the boundaries they lead to (b_{i+1} = b_i + step_i) into an array. Compiled with
the simulator core (setup.py): this module imports nothing of pdsim, the models hand it numbers.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from librt.vecs import vec
from mypy_extensions import i64

_NO_BOUNDS: Final = vec[float]()  # (RooflineStep._walk: sums only; never written)


class DecodeStep:
    """decode_time_s(n, ctx) for one batch size n (subclasses inline it in their loops)."""

    def __init__(self, n: int) -> None:
        self.n = n
        # a step cheap enough to compute again where a span is read (linear, roofline), rather
        # than all of a span's steps kept when it is planned (the measured table's log and exp)
        self.recompute = False

    def steps(self, ctx_tokens: int, count: i64) -> vec[float]:
        """The times of `count` steps from ctx_tokens, in an array."""
        out = vec[float]([0.0] * count)
        n, i = self.n, i64(0)
        while i < count:
            out[i] = self.time_s(ctx_tokens)
            ctx_tokens += n
            i += 1
        return out

    def time_s(self, ctx_tokens: int) -> float:
        raise NotImplementedError

    def accumulate(self, total_s: float, ctx_tokens: int, count: i64) -> float:
        """total_s plus the times of `count` steps from ctx_tokens, added one at a time."""
        n, i = self.n, i64(0)
        while i < count:
            total_s += self.time_s(ctx_tokens)
            ctx_tokens += n
            i += 1
        return total_s

    def add_up(self, bounds: vec[float], ctx_tokens: int, start: i64, stop: i64) -> None:
        """bounds[i + 1] = bounds[i] + step_i for i in start .. stop-1, in order; ctx_tokens is
        the context of step `start` (it grows by n a step)."""
        n, i, b_s = self.n, start, bounds[start]
        while i < stop:
            b_s += self.time_s(ctx_tokens)
            ctx_tokens += n
            i += 1
            bounds[i] = b_s


class LinearStep(DecodeStep):
    """LinearModel: fixed_s + per_ctx_s * ctx (fixed_s = decode_base_s + decode_per_seq_s * n)."""

    def __init__(self, n: int, fixed_s: float, per_ctx_s: float) -> None:
        super().__init__(n)
        self.recompute = True
        self.fixed_s = fixed_s
        self.per_ctx_s = per_ctx_s

    def time_s(self, ctx_tokens: int) -> float:
        return self.fixed_s + self.per_ctx_s * ctx_tokens

    # the loops over floats: contexts stay integers below 2**53, where float arithmetic is exact
    def accumulate(self, total_s: float, ctx_tokens: int, count: i64) -> float:
        fixed_s, per_ctx_s, ctx, dn = self.fixed_s, self.per_ctx_s, float(ctx_tokens), float(self.n)
        i = i64(0)
        while i < count:
            total_s += fixed_s + per_ctx_s * ctx
            ctx += dn
            i += 1
        return total_s

    def add_up(self, bounds: vec[float], ctx_tokens: int, start: i64, stop: i64) -> None:
        fixed_s, per_ctx_s, ctx, dn = self.fixed_s, self.per_ctx_s, float(ctx_tokens), float(self.n)
        i, b_s = start, bounds[start]
        while i < stop:
            b_s += fixed_s + per_ctx_s * ctx
            ctx += dn
            i += 1
            bounds[i] = b_s


@dataclass(frozen=True)
class RooflineRates:
    """A roofline model's rates and per-step costs, as plain numbers (RooflineModel.rates)."""

    gemm_flops_per_s: float  # the GEMMs' peak (their quant mode's)
    bf16_flops_per_s: float  # attention's peak
    hbm_bytes_per_s: float
    mfu: float
    mbu: float
    overhead_s: float
    overhead_per_seq_s: float
    comm_latency_s: float
    link_bytes_per_s: float  # (0.0 at tp 1: no all-reduce)


class RooflineStep(DecodeStep):
    """RooflineModel.decode_time_s for one batch size n as a function of the context, term by
    term in the model's order: only decode attention depends on the context; the operators
    before it (`head_s`, summed from 0 in order), after it (`tail_s`, added one at a time) and
    the all-reduces (`comm_s`) come from the model's own terms (RooflineModel.decode_step), the
    attention factors from pdsim.perf.cost.attention_factors."""

    def __init__(
        self, n: int, rates: RooflineRates, head_s: float, tail_s: tuple[float, ...], comm_s: float,
        flops_per_pair: float, kv_bytes_per_token: float, num_layers: int, tp: int,
    ) -> None:
        super().__init__(n)
        self.recompute = True
        self.fixed_s = rates.overhead_s + rates.overhead_per_seq_s * n
        self.head_s = head_s
        # those after it (decode: the LM head alone); the first apart, as a float (0.0 when there
        # is none: adding it to a positive time changes nothing)
        self.tail0_s = tail_s[0] if tail_s else 0.0
        self.tail_rest = tail_s[1:]
        self.comm_s = comm_s
        self.flops_per_pair = flops_per_pair
        self.num_layers = float(num_layers)
        self.tp = float(tp)
        self.kv_bytes_per_token = kv_bytes_per_token
        self.flops_per_s = rates.bf16_flops_per_s
        self.hbm_bytes_per_s = rates.hbm_bytes_per_s
        self.mfu = rates.mfu
        self.mbu = rates.mbu
        # tp and mfu exact powers of two (tp 1, 2, 4, 8, the default mfu 0.5): the compute term's
        # three divisions are one, and one multiplication (see _walk)
        self.folded = _power_of_two(self.tp) and _power_of_two(self.mfu)
        self.compute_scale = (1.0 / self.tp) * (1.0 / self.mfu)  # (exact when folded)

    def time_s(self, ctx_tokens: int) -> float:
        return self._walk(ctx_tokens, 0, 1, _NO_BOUNDS, 0.0)  # (0.0 + step is the step)

    def accumulate(self, total_s: float, ctx_tokens: int, count: i64) -> float:
        return self._walk(ctx_tokens, 0, count, _NO_BOUNDS, total_s)

    def add_up(self, bounds: vec[float], ctx_tokens: int, start: i64, stop: i64) -> None:
        self._walk(ctx_tokens, start, stop, bounds, bounds[start])

    def _walk(self, ctx_tokens: int, start: i64, stop: i64, bounds: vec[float], total_s: float) -> float:
        """total_s plus steps start .. stop-1, added one at a time; each sum so far is also
        written to bounds[i + 1] unless `bounds` is empty (_NO_BOUNDS).

        With tp and mfu powers of two (`folded`) the attention term divides once, not three
        times: dividing by 2**e is multiplying by 2**-e, and scaling by a power of two commutes
        with a rounded division, so `x / tp / fps / mfu` is `x / fps * (1 / tp) * (1 / mfu)` bit
        for bit while no value leaves the normal range (1e-308 .. 1e308: never, for a step's
        flops and seconds). Divisions bound this loop: a folded step takes ~40% less time."""
        # the terms in locals, the step inline: ~4x fewer instructions than a time_s call a step
        fpp, layers, tp, kvb = self.flops_per_pair, self.num_layers, self.tp, self.kv_bytes_per_token
        fps, hbm, mfu, mbu = self.flops_per_s, self.hbm_bytes_per_s, self.mfu, self.mbu
        folded, scale = self.folded, self.compute_scale
        head_s, tail0_s, tail_rest, fixed_s, comm_s = self.head_s, self.tail0_s, self.tail_rest, self.fixed_s, self.comm_s
        ctx, dn = float(ctx_tokens), float(self.n)  # (a float count stays exact below 2**53)
        i, store = start, len(bounds) > 0
        while i < stop:
            if folded:
                compute_s = fpp * ctx * layers / fps * scale
            else:
                compute_s = fpp * ctx * layers / tp / fps / mfu  # pdsim.perf.cost's order
            memory_s = kvb * (ctx + dn) / hbm / mbu
            busy = head_s + (compute_s if compute_s >= memory_s else memory_s) + tail0_s
            for t_s in tail_rest:
                busy = busy + t_s
            total_s += fixed_s + busy + comm_s
            ctx += dn
            i += 1
            if store:
                bounds[i] = total_s
        return total_s


def _power_of_two(x: float) -> bool:
    """x is 2**e for an integer e (its mantissa, in [0.5, 1), is 0.5)."""
    return math.isfinite(x) and x > 0.0 and math.frexp(x)[0] == 0.5


class TableStep(DecodeStep):
    """MeasuredModel.decode_time_s for one batch size n (its `decode_step`): the context-free
    part plus layers x the generation table at the mean KV length, interpolated in log space
    along the row kept for n, as pdsim.perf.loggrid.LogGrid.at_second does it. The segment of
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


class FittedStep(DecodeStep):
    """FittedModel.decode_time_s for one batch size n, in its order: (a + b * ctx) + c * n ms,
    raised to the small-batch fit at `floor_seqs` sequences when `floor` is given, then / 1e3."""

    def __init__(self, n: int, fit_ms: tuple[float, float, float], floor_ms: tuple[float, float, float] | None,
                 floor_seqs: int) -> None:
        super().__init__(n)
        self.recompute = True
        self.a, self.b, c = fit_ms
        self.seqs_ms = c * n
        self.floored = floor_ms is not None
        self.floor_a, self.floor_b, floor_c = floor_ms if floor_ms is not None else (0.0, 0.0, 0.0)
        self.floor_seqs_ms = floor_c * floor_seqs

    def time_s(self, ctx_tokens: int) -> float:
        time_ms = self.a + self.b * ctx_tokens + self.seqs_ms
        if self.floored:
            floor_ms = self.floor_a + self.floor_b * ctx_tokens + self.floor_seqs_ms
            if floor_ms > time_ms:  # (max(time_ms, floor_ms))
                time_ms = floor_ms
        return time_ms / 1e3


class CallStep(DecodeStep):
    """Any model's own decode_time_s(n, ctx), called once a step (the table model, measured
    tables scaled from another GPU: no formula worth compiling)."""

    def __init__(self, n: int, decode_time_s: Callable[[int, int], float]) -> None:
        super().__init__(n)
        self.decode_time_s = decode_time_s

    def time_s(self, ctx_tokens: int) -> float:
        return self.decode_time_s(self.n, ctx_tokens)


class OverheadStep(DecodeStep):
    """StepOverheadModel over another step model: scale * inner(ctx + offset * n) + overhead_s
    + per_token_s * ctx (its decode_time_s's order)."""

    def __init__(self, inner: DecodeStep, scale: float, overhead_s: float, per_token_s: float, offset: int) -> None:
        super().__init__(inner.n)
        self.inner = inner
        self.scale = scale
        self.overhead_s = overhead_s
        self.per_token_s = per_token_s
        self.offset_tokens = offset * inner.n

    def time_s(self, ctx_tokens: int) -> float:
        return (self.scale * self.inner.time_s(ctx_tokens + self.offset_tokens) + self.overhead_s
                + self.per_token_s * ctx_tokens)
