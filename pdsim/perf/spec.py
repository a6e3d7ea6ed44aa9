"""Quantities derived from a model shape and a GPU: KV bytes per token, weights, KV capacity."""

from __future__ import annotations

from pdsim.config import HardwareConfig, ModelConfig

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
GIB = 1024**3


def dtype_bytes(model: ModelConfig) -> int:
    try:
        return DTYPE_BYTES[model.dtype]
    except KeyError:
        raise ValueError(f"model {model.name}: field 'dtype' has unknown value {model.dtype!r}") from None


def kv_bytes_per_token(model: ModelConfig) -> int:
    """KV bytes per token over all layers (all TP ranks together)."""
    if model.kv_lora_rank > 0:  # MLA: one latent + rope key per layer, shared by heads
        per_layer = model.kv_lora_rank + model.qk_rope_head_dim
    else:
        per_layer = 2 * model.num_kv_heads * model.head_dim
    return per_layer * model.num_layers * dtype_bytes(model)


def weight_bytes(model: ModelConfig) -> int:
    """Approximate weight bytes (attention + FFN/experts + embeddings), all ranks together."""
    h, layers = model.hidden_size, model.num_layers
    q = model.num_heads * model.head_dim
    kv = model.num_kv_heads * model.head_dim
    attn = h * q + 2 * h * kv + q * h
    mats = 3 if model.gated_ffn else 2
    ffn = mats * h * model.ffn_size
    if model.num_experts > 0:
        moe_ffn = mats * h * (model.moe_ffn_size or model.ffn_size)
        moe = moe_ffn * (model.num_experts + model.num_shared_experts)
        ffn_total = ffn * model.num_dense_layers + moe * (layers - model.num_dense_layers)
    else:
        ffn_total = ffn * layers
    embed = model.vocab_size * h * (1 if model.tied_embeddings else 2)
    return (attn * layers + ffn_total + embed) * dtype_bytes(model)


def kv_capacity_tokens(
    model: ModelConfig, hardware: HardwareConfig, tp: int, gpu_memory_utilization: float
) -> int:
    """KV tokens one instance of `tp` GPUs can hold after weights and a 5% activation reserve."""
    if tp < 1:
        raise ValueError(f"tensor parallel size must be >= 1, got {tp}")
    usable = hardware.memory_gib * GIB * tp * gpu_memory_utilization
    free = usable * 0.95 - weight_bytes(model)
    if free <= 0:
        raise ValueError(
            f"model {model.name} ({weight_bytes(model) / GIB:.1f} GiB of weights) does not fit on "
            f"{tp} x {hardware.name} at gpu_memory_utilization={gpu_memory_utilization}"
        )
    return int(free // kv_bytes_per_token(model))
