"""Step-latency models and model/GPU derived quantities (see base.py for the interface)."""

from __future__ import annotations

from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.perf.base import LatencyModel, PrefillItem
from pdsim.perf.linear import LinearModel
from pdsim.perf.spec import kv_bytes_per_token, kv_capacity_tokens, weight_bytes

PERF_KINDS = ("linear",)


def build_latency_model(
    perf: PerfConfig, model: ModelConfig, hardware: HardwareConfig, tp: int
) -> LatencyModel:
    """The latency model for one instance of `tp` GPUs."""
    if perf.kind == "linear":
        return LinearModel(
            prefill_base_s=perf.prefill_base_s,
            prefill_per_token_s=perf.prefill_per_token_s,
            decode_base_s=perf.decode_base_s,
            decode_per_seq_s=perf.decode_per_seq_s,
            decode_per_ctx_token_s=perf.decode_per_ctx_token_s,
        )
    raise ValueError(f"perf: field 'kind' has unknown value {perf.kind!r} (choose from {PERF_KINDS})")


__all__ = [
    "LatencyModel",
    "LinearModel",
    "PrefillItem",
    "build_latency_model",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "weight_bytes",
]
