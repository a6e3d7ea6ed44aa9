"""Decode step times for a run of iterations whose batch does not change.

While the same `n` requests decode, iteration i reads `ctx0 + n * i` context tokens.
`StepSeries.steps(n, ctx0, k)` returns the k step times and `StepSeries.span` a span of them with
the iteration boundaries `b_{i+1} = b_i + step_i`, accumulated one addition at a time exactly as
simpy adds a timeout's delay to its clock (spantimes.span_times), so k iterations advanced at
once end at the very float time k single steps would.

Linear and roofline models (also wrapped in a StepOverheadModel) are evaluated vectorised with the
same floating-point operations, in the same order, as their `decode_time_s` (so each step is bit-identical to the scalar call on
CPython 3.11; `sum` of floats is compensated from 3.12 on, which can move roofline's last bit).
MeasuredModel's and FittedModel's own decode_series_s are their vector paths (bit-identical).
Other models are called once per iteration. Spans (`StepSeries.span`) of the linear, roofline and
measured models, also wrapped, compute their steps with a compiled `StepModel` (stepmodels.py).
For every model in pdsim.perf a decode-only mixed
step (`mixed_time_s((), n, ctx)`) is `decode_time_s(n, ctx)`, so colocated decode-only
iterations use the same series. Both simulator paths (step by step and skip-ahead) take every
decode-only step from here, so they agree bit for bit whatever the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from librt.vecs import vec

from pdsim.perf import (
    FittedModel,
    LatencyModel,
    LinearModel,
    MeasuredModel,
    RooflineModel,
    StepOverheadModel,
)
from pdsim.perf import cost as roofline_cost
from pdsim.sim.spantimes import SpanTimes, model_times, span_times
from pdsim.sim.stepmodels import LinearStep, OverheadStep, RooflineStep, StepModel, TableStep

VectorFn = Callable[[int, np.ndarray], np.ndarray]

class StepSeries:
    """Step times of decode iterations for one instance's latency model."""

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency
        self._roofline = _roofline_of(latency)  # (one per series: the span and array paths share its terms)
        self._vector = _vector_for(latency, self._roofline)
        self._step_models: dict[int, StepModel | None] = {}

    def steps(self, n: int, ctx0: int, k: int) -> np.ndarray:
        """Step times (s) of k iterations of `n` sequences starting with `ctx0` context tokens."""
        ctx = np.arange(ctx0, ctx0 + n * k, n, dtype=np.int64) if n > 0 else np.full(k, ctx0, dtype=np.int64)
        if self._vector is not None:
            return self._vector(n, ctx)
        decode = self.latency.decode_time_s
        return np.array([decode(n, c) for c in ctx.tolist()], dtype=np.float64)

    def span(self, n: int, ctx0: int, k: int, start_s: float, first_extra_s: float = 0.0) -> SpanTimes:
        """The k step times of a span (the first first_extra_s longer: a KV reload before it) and
        its boundaries b_0 = start_s .. b_k (spantimes.py). Where the model has a compiled step
        (`step_model`) it computes them in one call; otherwise they come from `steps`. The values
        are bit-identical to the model's decode_time_s and to simpy's clock either way."""
        model = self.step_model(n) if n > 0 else None
        if model is not None:
            if model.recompute:  # (the end now, the rest when read: spantimes.py)
                return model_times(model, ctx0, k, start_s, first_extra_s)
            return span_times(model.steps(ctx0, k), start_s, first_extra_s)
        return span_times(vec[float](self.steps(n, ctx0, k).tolist()), start_s, first_extra_s)

    def step_model(self, n: int) -> StepModel | None:
        """decode_time_s(n, ctx) as a compiled function of ctx, or None for a model without one
        (table and fitted models, measured tables scaled from another GPU)."""
        if n in self._step_models:
            return self._step_models[n]
        model = _step_model_for(self.latency, n, self._roofline)
        self._step_models[n] = model
        return model


def _roofline_of(latency: LatencyModel) -> RooflineDecode | None:
    """The roofline model's per-batch-size terms, also under a StepOverheadModel."""
    inner = latency.inner if isinstance(latency, StepOverheadModel) else latency
    return RooflineDecode(inner) if isinstance(inner, RooflineModel) else None


def _step_model_for(latency: LatencyModel, n: int, roofline: RooflineDecode | None) -> StepModel | None:
    if isinstance(latency, LinearModel):  # decode_time_s's association: (base + per_seq * n) + per_ctx * ctx
        return LinearStep(n, float(latency.decode_base_s + latency.decode_per_seq_s * n), latency.decode_per_ctx_token_s)
    if isinstance(latency, RooflineModel) and roofline is not None:
        return roofline.step_model(n)
    if isinstance(latency, MeasuredModel):
        terms = latency.decode_terms(n)
        return None if terms is None else TableStep(n, terms[0], terms[1], *terms[2])
    if isinstance(latency, StepOverheadModel):
        inner = _step_model_for(latency.inner, n, roofline)
        if inner is None:
            return None
        return OverheadStep(inner, latency.decode_scale, latency.decode_overhead_s, latency.per_context_token_s,
                            latency.decode_context_offset_tokens)
    return None


def _vector_for(latency: LatencyModel, roofline: RooflineDecode | None) -> VectorFn | None:
    """The vectorised decode_time_s of `latency`, or None (then it is called per iteration).
    `roofline`: the series' RooflineDecode (`_roofline_of`), for a roofline model, also wrapped."""
    if isinstance(latency, LinearModel):
        return _linear_vector(latency)
    if isinstance(latency, RooflineModel):
        return roofline
    if isinstance(latency, MeasuredModel):  # its scalar call is this on a 1-element array
        return latency.decode_series_s
    if isinstance(latency, FittedModel):  # bit-identical to its scalar call (tests/sim/test_distserve_knobs.py)
        return latency.decode_series_s
    if isinstance(latency, StepOverheadModel):
        inner = _vector_for(latency.inner, roofline)
        if inner is not None:
            overhead_s, scale = latency.decode_overhead_s, latency.decode_scale
            per_token_s, offset = latency.per_context_token_s, latency.decode_context_offset_tokens
            # as the scalar call, in the same order
            return lambda n, ctx: scale * inner(n, ctx + offset * n) + overhead_s + per_token_s * ctx
    return None


def _linear_vector(m: LinearModel) -> VectorFn:
    def steps(n: int, ctx: np.ndarray) -> np.ndarray:
        # same association as LinearModel.decode_time_s: (base + per_seq * n) + per_ctx * ctx
        return (m.decode_base_s + m.decode_per_seq_s * n) + m.decode_per_ctx_token_s * ctx

    return steps


class RooflineDecode:
    """RooflineModel.decode_time_s over an array of context lengths (one batch size at a time).

    Only the decode-attention operator depends on the context; the others (GEMMs, LM head,
    all-reduces) are taken from the model's own terms once per batch size.
    """

    def __init__(self, model: RooflineModel) -> None:
        self.model = model
        self._bf16_flops_per_s = model.hardware.bf16_tflops * 1e12
        self._hbm_bytes_per_s = model.hardware.hbm_gbps * 1e9
        self._fixed: dict[int, tuple[float, tuple[float, ...], float]] = {}
        self._steps: dict[int, RooflineStep] = {}

    def _parts(self, n: int) -> tuple[float, tuple[float, ...], float]:
        """Per batch size: the busy time of the operators before attention (summed from 0 in
        order, as decode_time_s does), those after it (added one at a time), and comm_s."""
        parts = self._fixed.get(n)
        if parts is None:
            m = self.model
            step = roofline_cost.decode_cost(m.model, n, 0, m.tp)
            terms = m.terms(step)
            att_index = [op.name for op in step.ops].index("attention_decode")
            busy = [max(c / m.mfu, mem / m.mbu) for c, mem in terms.ops]
            head = 0.0
            for b in busy[:att_index]:
                head = head + b
            parts = (head, tuple(busy[att_index + 1:]), terms.comm_s)
            self._fixed[n] = parts
        return parts

    def step_model(self, n: int) -> RooflineStep:
        """decode_time_s(n, ctx) as a compiled function of ctx (stepmodels.RooflineStep)."""
        step = self._steps.get(n)
        if step is None:
            m = self.model
            head, tail, comm_s = self._parts(n)
            flops_per_pair, kv_bytes_per_token = roofline_cost.attention_factors(m.model, m.tp, True)
            step = RooflineStep(
                n, m.overhead_s + m.overhead_per_seq_s * n, head, tail, comm_s, float(flops_per_pair),
                float(m.model.num_layers), float(m.tp), kv_bytes_per_token, self._bf16_flops_per_s,
                self._hbm_bytes_per_s, m.mfu, m.mbu,
            )
            self._steps[n] = step
        return step

    def __call__(self, n: int, ctx: np.ndarray) -> np.ndarray:
        m = self.model
        head, tail, comm_s = self._parts(n)
        ctx_f = ctx.astype(np.float64)
        # elementwise over the context array: its flops and bytes are arrays (Any: not floats)
        att: Any = roofline_cost._attention_op(m.model, ctx_f, ctx_f, float(n), m.tp, True)  # type: ignore[arg-type]
        compute_s = att.flops / self._bf16_flops_per_s
        memory_s = att.bytes / self._hbm_bytes_per_s
        busy = head + np.maximum(compute_s / m.mfu, memory_s / m.mbu)
        for b in tail:
            busy = busy + b
        return m.overhead_s + m.overhead_per_seq_s * n + busy + comm_s
