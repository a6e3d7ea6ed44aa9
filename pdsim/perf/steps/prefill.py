"""Compiled prefill steps: a model's prefill_time_s over a batch of (new_tokens, context_tokens)
items, operation for operation (the same floats); roofline's without building the step's
operator objects, linear's without the interpreted frames of a pure-Python model.

The roofline model prices a prefill batch as three operator groups on one rank (cost.py): the
GEMMs of `tokens` new tokens, attention over the batch's (query, key) pairs, and the LM head of
one token per prompt, plus the all-reduces when tp > 1 (roofline.py). Everything but a few sums
over the batch is fixed per model; `RooflinePrefill` keeps those parts and adds the sums in the
model's own order. Dense models only: a mixture-of-experts model's GEMM bytes depend on the
tokens through the experts they touch (RooflineModel.prefill_step builds this for dense models;
tests/perf/test_steps.py holds it to the general step cost bit for bit).
"""

from __future__ import annotations

from collections.abc import Sequence

from pdsim.perf.steps.decode import RooflineRates

ACTIVATION_BYTES = 2  # bf16 activations on the all-reduce (pdsim.perf.cost.ACTIVATION_BYTES)
QK_NORM_STAT_BYTES_PER_TOKEN = 8  # q/k-norm statistics a token (pdsim.perf.spec, the same number)


class RooflinePrefill:
    """RooflineModel.prefill_time_s of a dense model. Per model: the GEMMs' flops per token
    over all ranks and their bytes on one, the LM head's likewise per prompt, the attention
    factors (cost.attention_factors), the layers and hidden size (integers stay integers: the
    model's own arithmetic), and its all-reduces (spec.tp_all_reduces: activations, q/k-norm
    statistics)."""

    def __init__(
        self, rates: RooflineRates, tp: int, gemm: tuple[int, float], lm_head: tuple[int, float],
        attention: tuple[int, float], num_layers: int, hidden_size: int, all_reduces: tuple[int, int],
    ) -> None:
        self.tp = tp
        self.gemm_flops_factor, self.gemm_bytes = gemm
        self.lm_flops_factor, self.lm_bytes = lm_head
        self.flops_per_pair, self.kv_bytes_per_token = attention
        self.num_layers = num_layers
        self.hidden_size = hidden_size
        self.gemm_flops_per_s = rates.gemm_flops_per_s
        self.bf16_flops_per_s = rates.bf16_flops_per_s
        self.hbm_bytes_per_s = rates.hbm_bytes_per_s
        self.mfu, self.mbu = rates.mfu, rates.mbu
        self.overhead_s, self.overhead_per_seq_s = rates.overhead_s, rates.overhead_per_seq_s
        self.num_allreduces, self.num_stat_allreduces = all_reduces
        self.comm_latency_s = rates.comm_latency_s
        self.link_bytes_per_s = rates.link_bytes_per_s

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
            comm_s = self._allreduces_s(self.num_allreduces, tokens * self.hidden_size * ACTIVATION_BYTES)
        if self.num_stat_allreduces:
            comm_s = comm_s + self._allreduces_s(self.num_stat_allreduces, tokens * QK_NORM_STAT_BYTES_PER_TOKEN)
        return self.overhead_s + self.overhead_per_seq_s * seqs + busy + comm_s

    def _allreduces_s(self, calls: int, payload_bytes: float) -> float:
        return ring_allreduces_s(calls, payload_bytes, self.tp, self.comm_latency_s, self.link_bytes_per_s)


def ring_allreduces_s(calls: int, payload_bytes: float, tp: int, latency_s: float, link_bytes_per_s: float) -> float:
    """`calls` ring all-reduces of `payload_bytes` each over `tp` ranks: a ring moves 2 (tp - 1) / tp
    of the payload through each rank's link, after a fixed latency (RooflineModel and RooflinePrefill)."""
    ring_bytes = 2 * (tp - 1) / tp * payload_bytes
    return calls * (latency_s + ring_bytes / link_bytes_per_s)


class LinearPrefill:
    """LinearModel.prefill_time_s: base + per_token * the batch's new tokens."""

    def __init__(self, base_s: float, per_token_s: float) -> None:
        self.base_s = base_s
        self.per_token_s = per_token_s

    def time_s(self, items: Sequence[tuple[int, int]]) -> float:
        new_tokens = 0
        for n, _ in items:
            new_tokens += n
        return self.base_s + self.per_token_s * new_tokens
