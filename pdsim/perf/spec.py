"""Quantities derived from a model shape and a GPU: parameters, weights, KV bytes, KV capacity.

Parameter counts cover the matrices that dominate memory and FLOPs (attention projections,
FFN/experts, MoE router, embeddings, OPT's learned positions); norms and biases are left out
(well under 0.1% for every catalog model). "Per rank" means one GPU of a TP group.
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


def kv_bytes_per_token(model: ModelConfig) -> int:
    """KV bytes per token over all layers (all TP ranks together, no replication)."""
    return kv_elements_per_token_layer(model) * model.num_layers * kv_dtype_bytes(model)


def kv_bytes_per_token_per_rank(model: ModelConfig, tp: int) -> float:
    """KV bytes per token one TP rank stores over all layers.

    GQA heads split over ranks, replicated when tp exceeds num_kv_heads; MLA's latent cannot be
    split by head, so every rank keeps all of it.
    """
    _check_tp(tp)
    if is_mla(model):
        return float(kv_bytes_per_token(model))
    heads_per_rank = math.ceil(model.num_kv_heads / tp)
    return kv_bytes_per_token(model) * heads_per_rank / model.num_kv_heads


def attention_params_per_layer(model: ModelConfig) -> int:
    """Q, K, V and output projection weights of one layer (MLA: down/up projections)."""
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
    return h * q + 2 * h * kv + q * h


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
        attention_params_per_layer(model) * model.num_layers
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
        attention_params_per_layer(model) * model.num_layers
        + dense_ffn_params(model) * (model.num_layers - moe_layers)
        + active * moe_layers
        + embedding_params(model)
    )


def weight_bytes(model: ModelConfig) -> int:
    """Weight bytes, all ranks together (linear layers at the GEMM quant mode's size)."""
    if not model.gemm_quant:
        return param_count(model) * dtype_bytes(model)
    embeddings = embedding_params(model)
    linear = param_count(model) - embeddings
    return int(linear * gemm_weight_bytes(model)) + embeddings * dtype_bytes(model)


def _check_tp(tp: int) -> None:
    if tp < 1:
        raise ValueError(f"tensor parallel size must be >= 1, got {tp}")


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
    minus its even share of the weights; divided by the KV bytes per token that GPU stores
    (its share of heads, 1/pp of the layers).
    """
    _check_tp(tp)
    if pp < 1:
        raise ValueError(f"pipeline parallel size must be >= 1, got {pp}")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    per_gpu = hardware.memory_gib * GIB * gpu_memory_utilization - hardware.reserved_gib * GIB
    free = per_gpu - weight_bytes(model) / (tp * pp)
    if free <= 0:
        raise ValueError(
            f"model {model.name} ({weight_bytes(model) / GIB:.1f} GiB of weights) does not fit on "
            f"{tp}x{pp} (tp x pp) {hardware.name} at gpu_memory_utilization={gpu_memory_utilization}"
        )
    return int(free // (kv_bytes_per_token_per_rank(model, tp) / pp))
