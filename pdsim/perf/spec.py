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
