"""KV tokens one instance holds, for any parallel layout (pdsim/parallel.py).

Per GPU: memory_gib x utilisation, minus hardware.reserved_gib, minus the weights that GPU
holds: the routed experts split over all the instance's GPUs (moe_tp x moe_ep = tp x dp) at the
MoE quant mode's bytes, MLA's down-projection whole on every GPU (spec.replicated_weight_bytes),
everything else (attention, dense layers, shared experts, router, embeddings) split over the tp
GPUs of one DP rank (each DP rank holds a copy). What is left
holds KV at the rank's bytes per token (its share of the KV heads; an MLA latent is whole on
every rank). Each of the dp ranks has its own KV pool: the instance holds dp of them.

A hybrid linear-attention model (Gated DeltaNet layers: spec.state_bytes_per_request_per_rank)
keeps a fixed state per running request beside its per-token KV. The engine reserves a state
slot for every request it may run (SGLang's HybridReqToTokenPool holds one per request slot), so
`running_requests` states per rank come off the memory before KV is counted.

Plain TP without such a state is spec.kv_capacity_tokens, unchanged.
"""

from __future__ import annotations

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.parallel import Parallel
from pdsim.perf import spec


def weight_bytes_per_gpu(model: ModelConfig, parallel: Parallel) -> float:
    """Weight bytes on one GPU of an instance of this layout."""
    experts = spec.routed_expert_params(model) * spec.expert_weight_bytes(model)
    replicated = spec.replicated_weight_bytes(model)
    return (spec.weight_bytes(model) - experts - replicated) / parallel.tp + replicated + experts / parallel.gpus


def instance_kv_capacity_tokens(
    model: ModelConfig, hardware: HardwareConfig, parallel: Parallel, gpu_memory_utilization: float,
    running_requests: int = 0,
) -> int:
    """KV tokens one instance of this layout holds (all its DP ranks together), after the
    linear-attention states of `running_requests` requests per DP rank (hybrid models only)."""
    states = spec.state_bytes_per_request_per_rank(model, parallel.tp) * max(0, running_requests)
    if parallel.plain_tp and not states:
        return spec.kv_capacity_tokens(model, hardware, parallel.tp, gpu_memory_utilization)
    per_gpu = spec.usable_bytes_per_gpu(hardware, gpu_memory_utilization)
    weights = weight_bytes_per_gpu(model, parallel)
    if per_gpu <= weights:
        raise ValueError(f"model {model.name} ({weights / spec.GIB:.1f} GiB of weights per GPU) does not fit on "
                         f"{parallel.text} {hardware.name} at gpu_memory_utilization={gpu_memory_utilization}")
    if per_gpu <= weights + states:
        raise ValueError(f"model {model.name}: the linear-attention states of {running_requests} running requests "
                         f"({states / spec.GIB:.1f} GiB per GPU) leave no KV room on {parallel.text} {hardware.name} "
                         f"(cluster.max_running_requests={running_requests})")
    per_rank = int((per_gpu - weights - states) // spec.kv_bytes_per_token_per_rank(model, parallel.tp))
    return per_rank * parallel.dp
