"""Decode step times for a run of iterations whose batch does not change.

While the same `n` requests decode, iteration i reads `ctx0 + n * i` context tokens.
`StepSeries.span` gives a span of k such iterations: its step times and the iteration boundaries
`b_{i+1} = b_i + step_i`, accumulated one addition at a time exactly as simpy adds a timeout's
delay to its clock (spantimes.py), so k iterations advanced at once end at the very float time k
single steps would. The steps come from the latency model's own `decode_step(n)` (pdsim.perf.base:
its decode_time_s as a compiled function of the context, bit for bit), kept per batch size. Both
simulator paths (step by step and skip-ahead) take every decode-only step from here, so they agree
bit for bit whatever the model; for every model in pdsim.perf a decode-only mixed step
(`mixed_time_s((), n, ctx)`) is `decode_time_s(n, ctx)`, so colocated decode-only iterations use
the same series.
"""

from __future__ import annotations

from pdsim.perf import LatencyModel
from pdsim.perf.steps.decode import DecodeStep
from pdsim.sim.spantimes import SpanTimes, model_times, span_times


class StepSeries:
    """Decode spans of one latency model (shared by the instances that run it)."""

    def __init__(self, latency: LatencyModel) -> None:
        self.latency = latency
        self._steps: dict[int, DecodeStep] = {}

    def span(self, n: int, ctx0: int, k: int, start_s: float, first_extra_s: float = 0.0) -> SpanTimes:
        """The k step times of a span of `n` sequences from ctx0 context tokens (the first
        first_extra_s longer: a KV reload before it) and its boundaries b_0 = start_s .. b_k
        (spantimes.py). A step cheap to compute again (`recompute`) gives the end now and the
        rest when read; any other gives all k steps now."""
        step = self.step_model(n)
        if step.recompute:
            return model_times(step, ctx0, k, start_s, first_extra_s)
        return span_times(step.steps(ctx0, k), start_s, first_extra_s)

    def step_model(self, n: int) -> DecodeStep:
        """The model's decode step for batch size n (n >= 1), made once."""
        step = self._steps.get(n)
        if step is None:
            step = self._steps[n] = self.latency.decode_step(n)
        return step
