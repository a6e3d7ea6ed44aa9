"""FLOPs and bytes of one forward step, per TP rank, grouped into roofline operators.

A step is a batch of prefill items `(new_tokens, context_tokens)` plus `num_seqs` decoding
sequences whose KV lengths sum to `context_tokens`. Each operator group aggregates identical
layers, so `max(compute, memory)` per group equals the per-layer roofline summed over layers:

- `gemm_*`: projections and FFN/experts. FLOPs 2 * active params * tokens; bytes = the weights
  read (MoE: the experts a batch of T tokens touches, E * (1 - (1 - k/E)^T) in expectation).
- `attention`: score and value products over every (query, key) pair, causal within a prompt:
  a chunk of n tokens after c cached ones has n*c + n(n+1)/2 pairs. Bytes = KV read + written.
  MLA decodes in the latent space (absorbed projections); MLA prefill uses the per-head form.
- `lm_head`: logits for one token per sequence (prefill needs only the last position).

TP: weights and heads split evenly over ranks; KV per rank follows spec.kv_bytes_per_token_per_rank.
Activation traffic other than KV is ignored. `allreduce_bytes` is one all-reduce's payload; a
step does `num_allreduces` of them (two per layer: after attention and after the FFN), and
`num_stat_allreduces` of `stat_allreduce_bytes` where a model's q/k norm spans all heads
(spec.tp_all_reduces).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdsim.config import ModelConfig
from pdsim.perf import spec
from pdsim.perf.base import PrefillItem

ACTIVATION_BYTES = 2  # bf16 activations on the all-reduce


@dataclass(frozen=True, slots=True)
class OpCost:
    """One operator group on one rank: FLOPs, HBM bytes, and whether it runs on weight-dtype GEMMs."""

    name: str
    flops: float
    bytes: float
    gemm: bool


@dataclass(frozen=True, slots=True)
class StepCost:
    """Everything one forward step costs on one rank."""

    ops: tuple[OpCost, ...]
    allreduce_bytes: float
    num_allreduces: int
    num_seqs: int  # prefill items plus decoding sequences
    stat_allreduce_bytes: float = 0.0  # one q/k-norm statistics all-reduce's payload
    num_stat_allreduces: int = 0

    @property
    def flops(self) -> float:
        return sum(op.flops for op in self.ops)

    @property
    def bytes(self) -> float:
        return sum(op.bytes for op in self.ops)


def attention_pairs(items: Sequence[PrefillItem]) -> float:
    """(query, key) pairs a prefill batch computes, causal within each chunk."""
    return float(sum(n * c + n * (n + 1) / 2 for n, c in items))


def experts_touched(model: ModelConfig, tokens: float) -> float:
    """Expected distinct routed experts a layer loads for `tokens` tokens (uniform routing)."""
    if tokens <= 0:
        return 0.0
    e, k = model.num_experts, model.num_active_experts
    return e * (1.0 - (1.0 - k / e) ** tokens)


def _gemm_ops(model: ModelConfig, tokens: float, tp: int) -> list[OpCost]:
    """Projections and FFNs for `tokens` tokens: dense layers and (if MoE) expert layers."""
    wbytes = spec.gemm_weight_bytes(model)
    attn = spec.attention_params_per_layer(model)
    moe_layers = spec.num_moe_layers(model)
    dense_layers = model.num_layers - moe_layers
    dense_params = (attn + spec.dense_ffn_params(model)) * dense_layers
    ops = [OpCost("gemm_dense", 2 * dense_params * tokens / tp, dense_params * wbytes / tp, True)]
    if moe_layers:
        expert = spec.expert_params(model)
        router = model.hidden_size * model.num_experts
        shared = attn + router + expert * model.num_shared_experts
        active = shared + expert * model.num_active_experts
        loaded = shared + expert * experts_touched(model, tokens)
        flops = 2 * active * tokens * moe_layers / tp
        ops.append(OpCost("gemm_moe", flops, loaded * moe_layers * wbytes / tp, True))
    return ops


def _attention_dims(model: ModelConfig, decode: bool) -> tuple[int, int]:
    """(query-key dim, value dim) per head in the attention products."""
    if not spec.is_mla(model):
        return model.head_dim, model.head_dim
    if decode:  # absorbed: scores against the latent + rope key, values in the latent
        return model.kv_lora_rank + model.qk_rope_head_dim, model.kv_lora_rank
    return model.head_dim + model.qk_rope_head_dim, model.v_head_dim


def _attention_op(
    model: ModelConfig,
    pairs: float,
    kv_read_tokens: float,
    kv_write_tokens: float,
    tp: int,
    decode: bool,
) -> OpCost:
    flops_per_pair, kv_bytes_per_token = attention_factors(model, tp, decode)
    flops = flops_per_pair * pairs * model.num_layers / tp
    kv_bytes = kv_bytes_per_token * (kv_read_tokens + kv_write_tokens)
    return OpCost("attention", flops, kv_bytes, False)


def attention_factors(model: ModelConfig, tp: int, decode: bool) -> tuple[int, float]:
    """The attention operator's factors: flops per (query, key) pair per layer over all heads,
    and the KV bytes per token one rank reads or writes (over all layers). Its flops are
    flops_per_pair * pairs * num_layers / tp, in that order (the compiled roofline steps,
    pdsim/perf/steps, compute a decode step per context length and a dense prefill from these,
    bit for bit)."""
    qk_dim, v_dim = _attention_dims(model, decode)
    return 2 * model.num_heads * (qk_dim + v_dim), spec.kv_bytes_per_token_per_rank(model, tp)


def _lm_head_op(model: ModelConfig, seqs: float, tp: int) -> OpCost:
    params = model.vocab_size * model.hidden_size
    return OpCost("lm_head", 2 * params * seqs / tp, params * spec.dtype_bytes(model) / tp, True)


def step_cost(
    model: ModelConfig, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int, tp: int
) -> StepCost:
    """One forward over prefill `items` plus `num_seqs` decodes with Σcontext `context_tokens`."""
    if tp < 1:
        raise ValueError(f"tensor parallel size must be >= 1, got {tp}")
    new_tokens = float(sum(n for n, _ in items))
    tokens = new_tokens + num_seqs
    if tokens <= 0:
        return StepCost((), 0.0, 0, 0)
    ops = _gemm_ops(model, tokens, tp)
    if items:
        cached = float(sum(c for _, c in items))
        ops.append(
            _attention_op(model, attention_pairs(items), cached, new_tokens, tp, decode=False)
        )
    if num_seqs:
        decode = _attention_op(
            model, float(context_tokens), float(context_tokens), float(num_seqs), tp, True
        )
        ops.append(OpCost("attention_decode", decode.flops, decode.bytes, False))
    ops.append(_lm_head_op(model, len(items) + num_seqs, tp))
    payload = tokens * model.hidden_size * ACTIVATION_BYTES
    activations, stats = spec.tp_all_reduces(model, tp)
    return StepCost(tuple(ops), payload, activations, len(items) + num_seqs,
                    tokens * spec.QK_NORM_STAT_BYTES_PER_TOKEN, stats)


def prefill_cost(model: ModelConfig, items: Sequence[PrefillItem], tp: int) -> StepCost:
    return step_cost(model, items, 0, 0, tp)


def decode_cost(model: ModelConfig, num_seqs: int, context_tokens: int, tp: int) -> StepCost:
    return step_cost(model, (), num_seqs, context_tokens, tp)
