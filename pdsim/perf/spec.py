"""Quantities derived from a model shape and a GPU: parameters, weights, KV bytes, KV capacity.

Parameter counts cover the matrices that dominate memory and FLOPs (attention projections,
FFN/experts, MoE router, embeddings, OPT's learned positions, a linear-attention layer's short
convolution); norms, biases and per-head vectors (attention sinks, DeltaNet decay rates) are left
out (well under 0.1% for every catalog model). "Per rank" means one GPU of a TP group.

Layer kinds: full attention (every layer unless said otherwise), sliding-window attention
(`num_sliding_layers`: per-token KV, of which a sequence keeps only the window) and linear
attention (`num_linear_attention_layers`, Gated DeltaNet: no per-token KV, a fixed state per
request). `kv_bytes_per_token` counts every layer with a per-token KV, sliding ones included
(a token's cost while it is inside the window, and the cost the page pools charge);
`kv_bytes_for_tokens` caps the sliding layers at their window; `state_bytes_per_request` is
the linear-attention state.
"""

from __future__ import annotations

import math

from pdsim.config import HardwareConfig, ModelConfig

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
# bytes per linear-layer weight under each GEMM quant mode, scales included: fp8 per-tensor (one
# scale per matrix), fp8_block (an fp32 scale per 128x128 block), nvfp4 (4-bit values, an fp8
# scale per 16), int4 weight-only (a bf16 scale per group of 128). Embeddings, the LM head and
# norms stay in the checkpoint dtype (the quantized checkpoints of the catalog models do so).
QUANT_WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4 / (128 * 128),
                      "nvfp4": 0.5 + 1 / 16, "int4_wo": 0.5 + 2 / 128}
# routed experts (moe_quant) also come as MXFP4: 4-bit values, an 8-bit power-of-two scale per 32
MXFP4_WEIGHT_BYTES = 0.5 + 1 / 32
MOE_QUANT_WEIGHT_BYTES = {**QUANT_WEIGHT_BYTES, "w4a16_mxfp4": MXFP4_WEIGHT_BYTES,
                          "w4a8_mxfp4_mxfp8": MXFP4_WEIGHT_BYTES}
# a linear-attention layer's convolution state holds activations (bf16 in every engine)
CONV_STATE_BYTES = 2
GIB = 1024**3


def _dtype_size(model: ModelConfig, field_name: str, value: str) -> int:
    try:
        return DTYPE_BYTES[value]
    except KeyError:
        raise ValueError(
            f"model {model.name}: field {field_name!r} has unknown value {value!r} "
            f"(choose from {sorted(DTYPE_BYTES)})"
        ) from None


def dtype_bytes(model: ModelConfig) -> int:
    """Bytes per weight element."""
    return _dtype_size(model, "dtype", model.dtype)


def gemm_weight_bytes(model: ModelConfig) -> float:
    """Bytes per linear-layer weight: the GEMM quant mode's, else the checkpoint dtype's."""
    if not model.gemm_quant:
        return dtype_bytes(model)
    try:
        return QUANT_WEIGHT_BYTES[model.gemm_quant]
    except KeyError:
        raise ValueError(f"model {model.name}: field 'gemm_quant' has unknown value {model.gemm_quant!r} "
                         f"(choose from {sorted(QUANT_WEIGHT_BYTES)})") from None


def expert_weight_bytes(model: ModelConfig) -> float:
    """Bytes per routed-expert weight: the MoE quant mode's, else as the other linear layers."""
    if not model.moe_quant:
        return gemm_weight_bytes(model)
    try:
        return MOE_QUANT_WEIGHT_BYTES[model.moe_quant]
    except KeyError:
        raise ValueError(f"model {model.name}: field 'moe_quant' has unknown value {model.moe_quant!r} "
                         f"(choose from {sorted(MOE_QUANT_WEIGHT_BYTES)})") from None


def kv_dtype_bytes(model: ModelConfig) -> int:
    """Bytes per KV-cache element (kv_dtype, else dtype)."""
    return _dtype_size(model, "kv_dtype", model.kv_dtype or model.dtype)


def is_mla(model: ModelConfig) -> bool:
    return model.kv_lora_rank > 0


def is_moe(model: ModelConfig) -> bool:
    return model.num_experts > 0


def kv_elements_per_token_layer(model: ModelConfig) -> int:
    """KV elements one token stores in one layer (whole model, no TP replication)."""
    if is_mla(model):  # one compressed latent plus the decoupled RoPE key, shared by all heads
        return model.kv_lora_rank + model.qk_rope_head_dim
    return 2 * model.num_kv_heads * model.head_dim


def num_kv_layers(model: ModelConfig) -> int:
    """Layers that store KV per token: full and sliding-window attention (not linear attention)."""
    return model.num_layers - model.num_linear_attention_layers


def num_full_attention_layers(model: ModelConfig) -> int:
    return num_kv_layers(model) - model.num_sliding_layers


def kv_bytes_per_token(model: ModelConfig) -> int:
    """KV bytes per token over the layers that keep per-token KV, sliding-window layers included
    (all TP ranks together, no replication)."""
    return kv_elements_per_token_layer(model) * num_kv_layers(model) * kv_dtype_bytes(model)


def sliding_kv_bytes_per_token(model: ModelConfig) -> int:
    """The sliding-window layers' share of kv_bytes_per_token."""
    return kv_elements_per_token_layer(model) * model.num_sliding_layers * kv_dtype_bytes(model)


def kv_bytes_for_tokens(model: ModelConfig, tokens: int) -> int:
    """KV bytes of one sequence of `tokens` tokens (all ranks): full-attention layers keep every
    token, sliding-window layers only the last sliding_window_tokens (token-exact: an engine's
    pages round it up). The linear-attention state is apart: state_bytes_per_request."""
    beyond_window = max(0, tokens - model.sliding_window_tokens) if model.num_sliding_layers else 0
    return kv_bytes_per_token(model) * tokens - sliding_kv_bytes_per_token(model) * beyond_window


def kv_bytes_per_token_per_rank(model: ModelConfig, tp: int) -> float:
    """KV bytes per token one TP rank stores over its per-token-KV layers (kv_bytes_per_token).

    GQA heads split over ranks, replicated when tp exceeds num_kv_heads; MLA's latent cannot be
    split by head, so every rank keeps all of it.
    """
    _check_tp(tp)
    if is_mla(model):
        return float(kv_bytes_per_token(model))
    heads_per_rank = math.ceil(model.num_kv_heads / tp)
    return kv_bytes_per_token(model) * heads_per_rank / model.num_kv_heads


# A layer's TP all-reduces: the activations after attention and after the FFN (hidden_size
# values a token), and where the q/k norm spans all heads (qk_norm_across_heads) its statistics:
# q's and k's mean square in fp32, reduced in one call (vLLM's MiniMaxText01RMSNormTP.forward_qk
# concatenates the two), 8 bytes a token.
ACTIVATION_ALL_REDUCES_PER_LAYER = 2
QK_NORM_STAT_BYTES_PER_TOKEN = 8


def tp_all_reduces(model: ModelConfig, tp: int) -> tuple[int, int]:
    """(activation all-reduces, q/k-norm statistic all-reduces) of one forward at TP `tp`, all
    layers: none at tp 1; else two per layer, plus one per attention layer whose q/k norm spans
    all heads (its per-head weights are split over the ranks, the mean square is not)."""
    if tp <= 1:
        return 0, 0
    stats = model.num_layers - model.num_linear_attention_layers if model.qk_norm_across_heads else 0
    return ACTIVATION_ALL_REDUCES_PER_LAYER * model.num_layers, stats


def is_hybrid_linear(model: ModelConfig) -> bool:
    return model.num_linear_attention_layers > 0


def linear_state_elements_per_layer(model: ModelConfig, tp: int = 1) -> tuple[int, int]:
    """(convolution, recurrent) state elements one request holds in one linear-attention layer on
    one of tp ranks (heads split over ranks, replicated beyond their count).

    Gated DeltaNet: the short causal convolution over the q, k and v channels keeps its last
    kernel - 1 inputs; the recurrent state is one key_dim x value_dim matrix per value head.
    """
    _check_tp(tp)
    if not is_hybrid_linear(model):
        return 0, 0
    key_heads = math.ceil(model.linear_num_key_heads / tp)
    value_heads = math.ceil(model.linear_num_value_heads / tp)
    channels = 2 * key_heads * model.linear_key_head_dim + value_heads * model.linear_value_head_dim
    conv = (model.linear_conv_kernel_dim - 1) * channels
    return conv, value_heads * model.linear_key_head_dim * model.linear_value_head_dim


def state_bytes_per_request_per_rank(model: ModelConfig, tp: int) -> int:
    """Fixed linear-attention state one request holds on one TP rank (0 without such layers):
    convolution state in bf16, recurrent state in linear_state_dtype (else the model's dtype)."""
    conv, recurrent = linear_state_elements_per_layer(model, tp)
    if not recurrent:
        return 0
    state_bytes = _dtype_size(model, "linear_state_dtype", model.linear_state_dtype or model.dtype)
    per_layer = conv * CONV_STATE_BYTES + recurrent * state_bytes
    return per_layer * model.num_linear_attention_layers


def state_bytes_per_request(model: ModelConfig) -> int:
    """Fixed linear-attention state one request holds, whole model (all ranks together)."""
    return state_bytes_per_request_per_rank(model, 1)


def attention_params_per_layer(model: ModelConfig) -> int:
    """Q, K, V and output projection weights of one softmax-attention layer (MLA: down/up
    projections; an output gate doubles the query projection)."""
    h, heads = model.hidden_size, model.num_heads
    if is_mla(model):
        qk_dim = model.head_dim + model.qk_rope_head_dim  # head_dim = the no-RoPE part
        if model.q_lora_rank > 0:
            q = h * model.q_lora_rank + model.q_lora_rank * heads * qk_dim
        else:
            q = h * heads * qk_dim
        kv_down = h * (model.kv_lora_rank + model.qk_rope_head_dim)
        kv_up = model.kv_lora_rank * heads * (model.head_dim + model.v_head_dim)
        return q + kv_down + kv_up + heads * model.v_head_dim * h
    q = heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    q_out = 2 * q if model.attn_output_gate else q
    return h * q_out + 2 * h * kv + q * h


def replicated_weight_bytes(model: ModelConfig) -> float:
    """Weights every TP rank holds whole: MLA's fused down-projection (hidden -> q_lora + kv_lora +
    RoPE key), which SGLang, vLLM and TRT-LLM run replicated (pdsim/perf/mla.py prices it so)."""
    if not is_mla(model):
        return 0.0
    down = model.hidden_size * (max(0, model.q_lora_rank) + model.kv_lora_rank + model.qk_rope_head_dim)
    return float(model.num_layers * down * gemm_weight_bytes(model))


def linear_attention_params_per_layer(model: ModelConfig) -> int:
    """One Gated DeltaNet layer: the q, k, v, output-gate (z), beta and decay (a) projections,
    the depthwise short convolution over q, k and v, and the output projection."""
    if not is_hybrid_linear(model):
        return 0
    key = model.linear_num_key_heads * model.linear_key_head_dim
    value = model.linear_num_value_heads * model.linear_value_head_dim
    in_proj = model.hidden_size * (2 * key + 2 * value + 2 * model.linear_num_value_heads)
    conv = (2 * key + value) * model.linear_conv_kernel_dim
    return in_proj + conv + value * model.hidden_size


def attention_params(model: ModelConfig) -> int:
    """Attention weights over all layers: softmax attention (full and sliding) plus linear."""
    return (attention_params_per_layer(model) * num_kv_layers(model)
            + linear_attention_params_per_layer(model) * model.num_linear_attention_layers)


def _ffn_matrices(model: ModelConfig) -> int:
    return 3 if model.gated_ffn else 2


def dense_ffn_params(model: ModelConfig) -> int:
    """One dense FFN layer."""
    return _ffn_matrices(model) * model.hidden_size * model.ffn_size


def expert_params(model: ModelConfig) -> int:
    """One routed or shared expert."""
    return _ffn_matrices(model) * model.hidden_size * (model.moe_ffn_size or model.ffn_size)


def num_moe_layers(model: ModelConfig) -> int:
    return model.num_layers - model.num_dense_layers if is_moe(model) else 0


def embedding_params(model: ModelConfig) -> int:
    """Token embedding, LM head (unless tied) and learned positions."""
    tables = 1 if model.tied_embeddings else 2
    return (
        model.vocab_size * model.hidden_size * tables
        + model.max_position_embeddings * model.hidden_size
    )


def param_count(model: ModelConfig) -> int:
    """All parameters (every expert counted)."""
    moe_layers = num_moe_layers(model)
    dense_layers = model.num_layers - moe_layers
    experts = model.num_experts + model.num_shared_experts
    moe_layer = expert_params(model) * experts + model.hidden_size * model.num_experts
    return (
        attention_params(model)
        + dense_ffn_params(model) * dense_layers
        + moe_layer * moe_layers
        + embedding_params(model)
    )


def active_param_count(model: ModelConfig) -> int:
    """Parameters one token uses (routed top-k plus shared experts; embeddings included)."""
    if not is_moe(model):
        return param_count(model)
    moe_layers = num_moe_layers(model)
    active = expert_params(model) * (model.num_active_experts + model.num_shared_experts)
    return (
        attention_params(model)
        + dense_ffn_params(model) * (model.num_layers - moe_layers)
        + active * moe_layers
        + embedding_params(model)
    )


def routed_expert_params(model: ModelConfig) -> int:
    """Every routed expert of every MoE layer (the weights moe_quant applies to)."""
    return expert_params(model) * model.num_experts * num_moe_layers(model)


def weight_bytes(model: ModelConfig) -> int:
    """Weight bytes, all ranks together: linear layers at the GEMM quant mode's size, routed
    experts at the MoE quant mode's (moe_quant, else gemm_quant), embeddings at the dtype's."""
    if not model.gemm_quant and not model.moe_quant:
        return param_count(model) * dtype_bytes(model)
    embeddings = embedding_params(model)
    linear = param_count(model) - embeddings
    if expert_weight_bytes(model) == gemm_weight_bytes(model):
        return int(linear * gemm_weight_bytes(model)) + embeddings * dtype_bytes(model)
    experts = routed_expert_params(model)
    quantized = (linear - experts) * gemm_weight_bytes(model) + experts * expert_weight_bytes(model)
    return int(quantized) + embeddings * dtype_bytes(model)


def _check_tp(tp: int) -> None:
    if tp < 1:
        raise ValueError(f"tensor parallel size must be >= 1, got {tp}")


def usable_bytes_per_gpu(hardware: HardwareConfig, gpu_memory_utilization: float) -> float:
    """Bytes one GPU gives to weights and KV: memory_gib x utilisation - reserved_gib."""
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    return hardware.memory_gib * GIB * gpu_memory_utilization - hardware.reserved_gib * GIB


def kv_capacity_tokens(
    model: ModelConfig,
    hardware: HardwareConfig,
    tp: int,
    gpu_memory_utilization: float,
    *,
    pp: int = 1,
) -> int:
    """KV tokens one instance of tp x pp GPUs holds.

    Per GPU: memory_gib * utilisation, minus hardware.reserved_gib (CUDA context, activations),
    minus its share of the weights (even, but for the replicated ones: replicated_weight_bytes);
    divided by the KV bytes per token that GPU stores (its share of heads, 1/pp of the layers).
    """
    _check_tp(tp)
    if pp < 1:
        raise ValueError(f"pipeline parallel size must be >= 1, got {pp}")
    replicated = replicated_weight_bytes(model)
    free = (usable_bytes_per_gpu(hardware, gpu_memory_utilization) - (weight_bytes(model) - replicated) / (tp * pp)
            - replicated / pp)
    if free <= 0:
        raise ValueError(
            f"model {model.name} ({weight_bytes(model) / GIB:.1f} GiB of weights) does not fit on "
            f"{tp}x{pp} (tp x pp) {hardware.name} at gpu_memory_utilization={gpu_memory_utilization}"
        )
    return int(free // (kv_bytes_per_token_per_rank(model, tp) / pp))
