"""A prefill step's time under the roofline and linear models, compiled: their prefill_time_s
operation for operation (the same floats); roofline's without building the step's operator
objects, linear's without the interpreted frames of a pure-Python model.

The roofline model prices a prefill batch as three operator groups on one rank (cost.py): the
GEMMs of `tokens` new tokens, attention over the batch's (query, key) pairs, and the LM head of
one token per prompt, plus the all-reduces when tp > 1 (roofline.py). Everything but a few sums
over the batch is fixed per model; `RooflinePrefill` keeps those parts and adds the sums in the
model's own order. Dense models only: a mixture-of-experts model's GEMM bytes depend on the
tokens through the experts they touch, and `prefill_timer` leaves such models (and any other
latency model) to their own `prefill_time_s`. tests/sim/test_prefill_time.py holds it to the
model bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pdsim.perf import LatencyModel, LinearModel, RooflineModel, spec
from pdsim.perf import cost as roofline_cost

PrefillTimer = Callable[[Sequence[tuple[int, int]]], float]


class RooflinePrefill:
    """RooflineModel.prefill_time_s of a dense model: the per-model terms, once."""

    def __init__(self, model: RooflineModel) -> None:
        m, tp = model.model, model.tp
        gemm, lm_head = roofline_cost._gemm_ops(m, 1.0, tp)[0], roofline_cost._lm_head_op(m, 1, tp)
        self.tp = tp
        self.gemm_flops_factor = 2 * (spec.attention_params_per_layer(m) + spec.dense_ffn_params(m)) * m.num_layers
        self.gemm_bytes = gemm.bytes  # (independent of the tokens for a dense model)
        self.lm_flops_factor = 2 * m.vocab_size * m.hidden_size
        self.lm_bytes = lm_head.bytes
        self.flops_per_pair, self.kv_bytes_per_token = roofline_cost.attention_factors(m, tp, False)
        self.num_layers = m.num_layers
        self.hidden_size = m.hidden_size
        self.gemm_flops_per_s = model._gemm_flops_per_s()
        self.bf16_flops_per_s = model.hardware.bf16_tflops * 1e12
        self.hbm_bytes_per_s = model.hardware.hbm_gbps * 1e9
        self.mfu, self.mbu = model.mfu, model.mbu
        self.overhead_s, self.overhead_per_seq_s = model.overhead_s, model.overhead_per_seq_s
        self.num_allreduces = 2 * m.num_layers if tp > 1 else 0
        self.comm_latency_s = model.comm_latency_s
        self.link_bytes_per_s = model._link_bytes_per_s() if self.num_allreduces else 0.0

    def _busy_s(self, flops: float, flops_per_s: float, nbytes: float) -> float:
        """One operator group: max(compute, memory) at the model's efficiencies (its order)."""
        compute_s = flops / flops_per_s / self.mfu
        memory_s = nbytes / self.hbm_bytes_per_s / self.mbu
        return memory_s if memory_s > compute_s else compute_s

    def time_s(self, items: Sequence[tuple[int, int]]) -> float:
        """The step's time for prefill items (new_tokens, context_tokens)."""
        new_tokens, cached_tokens, pairs = 0, 0, 0.0
        for n, c in items:  # cost.step_cost / attention_pairs: integer sums, pairs as floats
            new_tokens += n
            cached_tokens += c
            pairs = pairs + (n * c + n * (n + 1) / 2)
        tokens = float(new_tokens)
        if tokens <= 0:
            return 0.0
        tp, seqs = self.tp, len(items)
        busy = self._busy_s(self.gemm_flops_factor * tokens / tp, self.gemm_flops_per_s, self.gemm_bytes)
        attention_flops = self.flops_per_pair * pairs * self.num_layers / tp
        attention_bytes = self.kv_bytes_per_token * (float(cached_tokens) + tokens)
        busy = busy + self._busy_s(attention_flops, self.bf16_flops_per_s, attention_bytes)
        busy = busy + self._busy_s(self.lm_flops_factor * seqs / tp, self.gemm_flops_per_s, self.lm_bytes)
        comm_s = 0.0
        if self.num_allreduces:
            payload = tokens * self.hidden_size * roofline_cost.ACTIVATION_BYTES
            ring_bytes = 2 * (tp - 1) / tp * payload
            comm_s = self.num_allreduces * (self.comm_latency_s + ring_bytes / self.link_bytes_per_s)
        return self.overhead_s + self.overhead_per_seq_s * seqs + busy + comm_s


class LinearPrefill:
    """LinearModel.prefill_time_s: base + per_token * the batch's new tokens."""

    def __init__(self, model: LinearModel) -> None:
        self.base_s = model.prefill_base_s
        self.per_token_s = model.prefill_per_token_s

    def time_s(self, items: Sequence[tuple[int, int]]) -> float:
        new_tokens = 0
        for n, _ in items:
            new_tokens += n
        return self.base_s + self.per_token_s * new_tokens


def prefill_timer(latency: LatencyModel) -> PrefillTimer:
    """The compiled prefill time of a dense RooflineModel or a LinearModel, else the model's own."""
    if type(latency) is RooflineModel and spec.num_moe_layers(latency.model) == 0:
        return RooflinePrefill(latency).time_s
    if type(latency) is LinearModel:
        return LinearPrefill(latency).time_s
    return latency.prefill_time_s
