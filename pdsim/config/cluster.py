"""The deployment: `cluster` (instances, parallelism per side, memory, batching, transfer) and
`kv_tiers` (KV-cache tiers behind the prefill instances)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pdsim.parallel import Parallel

if TYPE_CHECKING:
    from pdsim.config.engine import PerfConfig


@dataclass
class ClusterConfig:
    """Instances, parallelism, memory and batching limits."""

    mode: str = "disaggregated"  # disaggregated | colocated
    prefill: int = 1  # prefill instances
    decode: int = 1  # decode instances
    total_instances: int = 0  # >0: decode = total_instances - prefill (P:D sweeps at fixed size)
    colocated: int = 2  # instances in colocated mode
    prefill_tp: int = 1
    decode_tp: int = 1
    colocated_tp: int = 1
    # attention data parallelism (SGLang --dp-size with --enable-dp-attention, TRT-LLM
    # enable_attention_dp): DP ranks per instance, each of *_tp GPUs with its own batch and KV;
    # an instance has tp x dp GPUs (pdsim/parallel.py)
    prefill_dp: int = 1
    decode_dp: int = 1
    colocated_dp: int = 1
    # expert parallelism of the MoE layers over the instance's GPUs (MoE TP = GPUs / EP)
    prefill_moe_ep: int = 1
    decode_moe_ep: int = 1
    colocated_moe_ep: int = 1
    # per side, how attention-DP ranks reach their experts (allgather | deepep; "" = perf.moe_a2a):
    # a deployment may all-gather on prefill and run DeepEP on decode
    prefill_moe_a2a: str = ""
    decode_moe_a2a: str = ""
    colocated_moe_a2a: str = ""
    # per side, the table set (same GPU) whose fused-MoE rows price the side's routed experts ("" =
    # perf.moe_table_set): engines choose the MoE kernel per instance (TRT-LLM moe_config.backend),
    # and a set measured the kernel another engine's set did not (docs/MOE.md)
    prefill_moe_table_set: str = ""
    decode_moe_table_set: str = ""
    colocated_moe_table_set: str = ""
    page_size_tokens: int = 16
    gpu_memory_utilization: float = 0.9
    kv_capacity_tokens: int = 0  # >0 overrides the perf model's capacity (per instance)
    max_running_requests: int = 256
    max_prefill_tokens: int = 8192  # PrefillAdder token budget per forward
    chunk_size_tokens: int = 8192  # chunked prefill; 0 = no chunking
    prefix_cache: bool = True
    prefix_cache_tokens: int = 0  # 0 = whatever the KV pool holds
    transfer_backend: str = "rdma"  # rdma | tcp | nvlink | none (KV moves instantly, no bytes)
    link_latency_s: float = 5e-6
    tcp_gbps: float = 25.0
    layerwise_transfer: bool = False
    control_plane_latency_s: float = 0.0005  # one bootstrap/ZMQ round trip
    # client -> router -> instance for a dispatched request (HTTP, parsing, routing);
    # < 0 = control_plane_latency_s. `pdsim fidelity` sets it from a probe of the real cluster
    dispatch_latency_s: float = -1.0
    # instance emits a token -> the client has it (streaming, detokenization, HTTP); added to every
    # token time of the trace so TTFT/TPOT/E2E are measured at the client. `pdsim fidelity` probes it
    token_delivery_s: float = 0.0
    # the frontend tokenizes every text prompt before routing: this many seconds a prompt token,
    # on the path to the first token; 0 = prompts arrive as token ids (pdreal's replay).
    # benchmarks/tokenize_cost.py measures it. It runs on tokenize_threads threads, prompts in
    # arrival order: 1 for an engine's own server (vLLM's API server tokenizes on a one-worker
    # executor, SGLang's TokenizerManager on its event loop); 0 = no queue, every prompt on a
    # thread of its own (Dynamo's Rust frontend tokenizes in its async runtime's worker threads)
    tokenize_s_per_token: float = 0.0
    tokenize_threads: int = 1
    prealloc_slots: int = 0  # decode pre-allocation slots beyond max_running_requests (0 = same)
    transfer_aux_bytes: int = 4096  # aux metadata sent with the last KV chunk
    colocated_schedule: str = "mixed"  # mixed (chunked-prefill mixed batches) | prefill_priority
    # TensorRT-LLM's batch waiting (its batch_wait_timeout_iters / batch_wait_max_tokens_ratio; 0 =
    # off): while decodes run, a colocated engine holds new prompts back until they and the decodes
    # fill this share of max_prefill_tokens or it has held them this many iterations
    batch_wait_iters: int = 0
    batch_wait_tokens_ratio: float = 0.0
    # TensorRT-LLM's attention-DP balance (attention_dp_config: enable_balance, timeout_iters,
    # batching_wait_iters; its defaults 50 and 10) on a colocated engine of 2 or more DP ranks: new
    # prompts wait until every rank has one, or for the timeout's turn (pdsim.policy.adp_balance)
    adp_balance: bool = False
    adp_timeout_iters: int = 50
    adp_batching_wait_iters: int = 10
    # how a prefill instance's attention-DP ranks get their prompts (pdsim.policy.dp_dispatch):
    # balanced (one batch spread over the ranks, largest chunk first) | bootstrap_room (SGLang's
    # prefill server under PD: rank = bootstrap_room % dp, each rank its own queue and budget)
    prefill_dp_dispatch: str = "balanced"
    # SGLang's --scheduler-recv-interval on a colocated engine: during decodes new requests are
    # taken in every this many decode steps (pdsim.policy.receive; 1 = every iteration)
    recv_interval_steps: int = 1
    # prefill makes the first output token (SGLang, vLLM); false: it makes none and decode runs
    # output_tokens iterations (DistServe's simulator)
    prefill_emits_token: bool = True
    # when decode takes a request: prealloc (SGLang: decode handshakes and pre-allocates its pages
    # before the prefill forward; the prefill waits in its bootstrap queue) | prefill_end (the
    # request is handed to decode when its prefill ends, pages are allocated then; DistServe)
    kv_handoff: str = "prealloc"

    def parallel(self, side: str) -> Parallel:
        """The layout of one side's instances (side: prefill | decode | colocated)."""
        _checked_side(side)
        return Parallel(getattr(self, f"{side}_tp"), getattr(self, f"{side}_dp"), getattr(self, f"{side}_moe_ep"),
                        getattr(self, f"{side}_moe_a2a"))

    def perf_for(self, side: str, perf: PerfConfig) -> PerfConfig:
        """`perf` as one side's instances run it: the side's MoE table set where it names one."""
        own = getattr(self, f"{_checked_side(side)}_moe_table_set")
        return dataclasses.replace(perf, moe_table_set=own) if own else perf

    @property
    def dispatch_delay_s(self) -> float:
        """Router -> instance delay of a dispatched request (dispatch_latency_s, else one
        control-plane hop)."""
        return self.dispatch_latency_s if self.dispatch_latency_s >= 0 else self.control_plane_latency_s


def _checked_side(side: str) -> str:
    if side not in ("prefill", "decode", "colocated"):
        raise ValueError(f"cluster: side must be prefill, decode or colocated, got {side!r}")
    return side


@dataclass
class KVTiersConfig:
    """KV-cache tiers on prefill instances and a cluster-wide store (pdsim.sim.kv_tiers).

    The GPU tier is the prefix cache (cluster.prefix_cache / prefix_cache_tokens). Capacities
    are tokens per prefill instance (store: for the whole cluster); 0 = tier absent, so the
    defaults keep tiers off. Eviction from the GPU demotes blocks to host, from host to SSD
    (or the store when there is no SSD); demotions and store writes are asynchronous and cost
    no simulated time (their bytes are counted). Loads cost PCIe (hardware.pcie_gbps per GPU),
    SSD (ssd_gbps) or a store read over the instance's NIC (a network flow).
    """

    name: str = "none"
    host_tokens: int = 0  # L2 pinned host DRAM per prefill instance
    ssd_tokens: int = 0  # L3 local SSD per prefill instance
    ssd_gbps: float = 6.0  # GB/s SSD read bandwidth per prefill instance
    store_tokens: int = 0  # global store (Mooncake store / HiCache remote L3), whole cluster
    store_write: str = "through"  # through: every computed block is put | evict: demoted blocks only
    hot_block_hits: int = 0  # >0: replicate a block to the store once it was hit this often on one instance
    eviction: str = "lru"  # lru | fifo (hits do not refresh a block)
    overlap_load: bool = True  # layer-wise: loading overlaps the forward (step = max, else sum)
    decision: str = "cost"  # cost: load only if faster than recompute | always: load every hit

    @property
    def enabled(self) -> bool:
        return self.host_tokens > 0 or self.ssd_tokens > 0 or self.store_tokens > 0
