"""Structured config schema for the `scenarios/` hydra tree.

Each hydra group has one dataclass here, registered in hydra's ConfigStore as
`base_<group>`; every YAML in `scenarios/<group>/` lists that schema first in its defaults, so
a misspelt key or a wrong type fails at compose time. Schema dataclasses are *not* frozen
(hydra merges into them); `load_config` converts the composed DictConfig once into these
objects and the domain code never sees a DictConfig.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pdsim.parallel import Parallel
from pdsim.policy.dp_dispatch import check_dispatch

if TYPE_CHECKING:
    from omegaconf import DictConfig

# omegaconf.MISSING's value: the schema is read without importing omegaconf or hydra (they load
# when a config is composed or converted; `import pdsim.run` stays light)
MISSING: Any = "???"


@dataclass
class LengthDist:
    """A token-length distribution. kind: fixed | random | uniform | lognormal | empirical.

    `random` is sglang bench_serving's random dataset: integers drawn uniformly from
    [max(int(value * range_ratio), 1), value] (docs/CLOSED_LOOP.md)."""

    kind: str = "fixed"
    value: int = 512  # fixed; random: the upper bound
    range_ratio: float = 1.0  # random: lower bound = int(value * range_ratio) (1.0 = fixed)
    low: int = 1  # uniform (inclusive), also the clip floor for lognormal/empirical
    high: int = 4096  # uniform (inclusive), also the clip ceiling
    mean: float = 512.0  # lognormal: mean of the distribution in tokens
    sigma: float = 0.5  # lognormal: sigma of the underlying normal
    path: str = ""  # empirical: CSV file (relative paths resolve against data_dir)
    column: str = ""  # empirical: column holding lengths


@dataclass
class PrefixConfig:
    """Prefix sharing for synthetic workloads (block hashes in units of block_tokens)."""

    block_tokens: int = 512
    num_system_prompts: int = 0  # distinct shared system prompts (0 = none)
    system_prompt_tokens: int = 0
    session_turns: int = 1  # >1: multi-turn sessions; each turn extends the previous context
    think_time_s: float = 0.0  # mean gap between turns of one session (exponential)
    # >0: requests draw their whole prompt from this many distinct prompts, in shuffled passes
    # (each pass a new permutation), as AIPerf's synthetic dataset does (100 entries by default,
    # --num-dataset-entries, sampling "shuffle"): a repeat is a prefix-cache hit of all but its
    # last token. 0: every prompt is new.
    prompt_pool: int = 0


@dataclass
class ScenarioConfig:
    """A workload. source: synthetic | mooncake | azure | lengths_csv | csv."""

    name: str = MISSING
    description: str = ""
    source: str = "synthetic"
    path: str = ""  # trace file for non-synthetic sources (relative -> data_dir)
    num_requests: int = 1000  # synthetic count; for traces, a limit (0 = all)
    rate_rps: float = 4.0  # synthetic arrival rate; for lengths_csv the Poisson rate
    arrival: str = "poisson"  # poisson | gamma (burstiness = arrival_cv)
    arrival_cv: float = 1.0
    input: LengthDist = field(default_factory=LengthDist)
    output: LengthDist = field(default_factory=lambda: LengthDist(value=128))
    prefix: PrefixConfig = field(default_factory=PrefixConfig)
    start_s: float = 0.0  # trace time window start (trace clock, seconds)
    end_s: float = 0.0  # window end; 0 = to the end
    speedup: float = 1.0  # divide inter-arrival gaps by this
    target_rate_rps: float = 0.0  # >0: rescale arrivals to this mean rate (overrides speedup)
    # closed loop (benchmark clients, docs/CLOSED_LOOP.md): >0 = this many clients, each sending
    # its next request when its previous one ends; arrival times then come from the loop, the
    # workload's order and lengths are kept
    concurrency: int = 0
    client_think_s: float = 0.0  # closed loop: a client's pause between a response and its next request
    duration_s: float = 0.0  # closed loop: no request is sent after this (0 = all num_requests)
    warmup_requests: int = -1  # closed loop: the first N sent are warm-up (-1 = concurrency)
    client_ramp_s: float = 0.0  # closed loop: client i sends its first request at i * ramp / C (0 = all at t=0)
    # closed loop: AIPerf's phases: the warm-up requests are sent, every one of them ends, then the
    # profiling phase starts with all C clients at once and every request of it is counted
    warmup_barrier: bool = False


@dataclass
class ModelConfig:
    """Transformer shape; see pdsim.perf for derived FLOPs, bytes and KV sizes."""

    name: str = MISSING
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    ffn_size: int = MISSING  # dense FFN intermediate size (per expert for MoE)
    vocab_size: int = MISSING
    num_experts: int = 0  # 0 = dense
    num_active_experts: int = 0
    num_shared_experts: int = 0
    moe_ffn_size: int = 0
    num_dense_layers: int = 0  # leading dense layers in an MoE model
    kv_lora_rank: int = 0  # MLA latent (0 = not MLA)
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0
    v_head_dim: int = 0
    tied_embeddings: bool = False
    gated_ffn: bool = True  # SwiGLU (3 matrices) vs GELU MLP (2 matrices, OPT)
    dtype: str = "bf16"  # weights and KV: fp32 | bf16 | fp16 | fp8
    hf_name: str = ""
    kv_dtype: str = ""  # KV cache dtype; "" = same as dtype
    # GEMM (linear layer) quantization, AIConfigurator's names: bf16 | fp8 (per-tensor) |
    # fp8_block | nvfp4 | int4_wo (weight-only); "" = the checkpoint's dtype (docs/PRECISION.md)
    gemm_quant: str = ""
    # routed-expert quantization (MoE models), AIConfigurator's names: bf16 | fp8 | fp8_block |
    # nvfp4 | int4_wo | w4a16_mxfp4 | w4a8_mxfp4_mxfp8; "" = as gemm_quant
    moe_quant: str = ""
    max_position_embeddings: int = 0  # learned positional table rows (OPT); 0 = RoPE, no table
    # Layer kinds (pdsim/perf/spec.py): num_layers minus the two kinds below are full attention.
    # Sliding-window attention layers (gpt-oss): each query sees the last sliding_window_tokens
    num_sliding_layers: int = 0
    sliding_window_tokens: int = 0
    attention_sinks: bool = False  # a learned sink logit per head (gpt-oss): no KV, ~no weights
    attn_output_gate: bool = False  # sigmoid gate on attention's output (q_proj emits 2x; Qwen3.5)
    # q/k RMSNorm over all of a layer's heads (MiniMax-M2's qk_norm_type per_layer), not per head:
    # under TP the ranks all-reduce its statistics in every attention layer (spec.tp_all_reduces)
    qk_norm_across_heads: bool = False
    # Linear-attention layers (Qwen3.5's Gated DeltaNet): no per-token KV, a fixed state per request
    num_linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    linear_state_dtype: str = ""  # recurrent state (config's mamba_ssm_dtype); "" = dtype
    # sparse attention (DeepSeek Sparse Attention: GLM-5's index_topk): keys each query attends
    # to, 0 = dense; not modelled, so a perf model can refuse it by name
    sparse_attention_topk: int = 0


@dataclass
class HardwareConfig:
    """One GPU kind and its node."""

    name: str = MISSING
    bf16_tflops: float = MISSING  # dense
    fp8_tflops: float = 0.0
    fp4_tflops: float = 0.0  # dense NVFP4 (Blackwell); 0 = none
    hbm_gbps: float = MISSING  # GB/s
    memory_gib: float = MISSING
    nvlink_gbps: float = 0.0  # GB/s per GPU, unidirectional
    gpus_per_node: int = 8
    nics_per_node: int = 8
    nic_gbps: float = 400.0  # Gb/s per NIC
    pcie_gbps: float = 64.0  # GB/s host<->device
    reserved_gib: float = 2.0  # per GPU, unavailable to weights and KV (CUDA context, activations)
    # perf=measured: the operator-table system (pdsim/perf/data/aic/<system>_<engine>_<version>)
    # and, when the tables were measured on another GPU, that GPU's hardware entry (scaled by
    # roofline ratios); "" = no tables (roofline fallback) / measured on this GPU
    op_tables: str = ""
    op_tables_hardware: str = ""
    # GPUs one NVLink domain joins (NVL72: 72 over nodes of 4); 0 = gpus_per_node
    nvlink_domain_gpus: int = 0


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


@dataclass
class PolicyConfig:
    routing: str = "round_robin"
    admission: str = "accept_all"
    max_queued_requests: int = 0  # admission threshold (0 = no limit)
    max_queued_tokens: int = 0
    token_bucket_rps: float = 0.0
    token_bucket_burst: int = 0
    cache_weight: float = 1.0  # cache-aware routing: weight of prefix hit vs load
    length_buckets: list[int] = field(default_factory=list)
    new_token_ratio: float = 0.7
    decode_reserved_tokens: int = 0  # 0 = reserve each request's remaining output
    # early_reject admission: reject when predicted TTFT > slo.ttft_s * margin (TBT: slo.tpot_s)
    admission_ttft_margin: float = 1.0
    admission_tbt_margin: float = 1.0
    # P:D rebalancer (pdsim.policy.scaling): none | rebalance
    scaling: str = "none"
    scaling_interval_s: float = 5.0  # how often views are sampled and a move is considered
    scaling_window_s: float = 60.0  # pressure is averaged over the samples of this window
    scaling_min_samples: int = 3
    scaling_high: float = 1.0  # a side at or above this pressure asks for an instance
    scaling_low: float = 0.5  # the donor side must be at or below this pressure
    scaling_prefill_queue_tokens: int = 16384  # queued prefill tokens per instance = pressure 1
    scaling_decode_kv_fraction: float = 0.9  # decode KV use = pressure 1
    scaling_decode_queue_requests: int = 8  # decode requests waiting per instance = pressure 1
    scaling_warmup_s: float = 30.0  # a moved instance serves in its new role after this delay
    scaling_cooldown_s: float = 60.0  # no new move until this long after the last one is ready
    scaling_min_per_role: int = 1


@dataclass
class SloConfig:
    name: str = "default"
    ttft_s: float = 2.0
    tpot_s: float = 0.1
    attainment_target: float = 0.9
    tpot_definition: str = "standard"  # standard | distserve | tbt_mooncake (see pdsim.metrics)
    ttft_definition: str = "standard"  # standard (first token) | prefill_end (DistServe's simulator)
    # joint: a request counts when it meets both SLOs, goodput needs attainment >= target;
    # percentiles: the target-quantile TTFT and TPOT must each be below their SLO (simdistserve)
    criterion: str = "joint"


@dataclass
class PerfConfig:
    """Step-latency model. kind: linear | roofline | fitted | table | measured (see pdsim.perf)."""

    kind: str = "linear"
    engine: str = "sglang"  # measured: whose operator tables (sglang | vllm | trtllm)
    engine_version: str = ""  # measured: table version ("" = the newest for the GPU and engine)
    # measured: routing skew the fused-MoE tables were measured at: balanced (every expert the
    # same load) | power_law_1.01 (AIConfigurator's skewed routing); docs/MOE.md
    moe_distribution: str = "balanced"
    # measured: the table set (same GPU) whose fused-MoE rows price the routed experts, for a
    # kernel the engine's own set never measured but another engine's did (FlashInfer's MXFP4 x
    # MXFP8 MoE, which vLLM runs under VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1); "" = the engine's
    moe_table_set: str = ""
    # measured: a second fused-MoE table of the set (its file stem: moe_triton) pricing the MoE
    # layers of fewer than moe_fallback_below_tokens tokens, the kernel an engine falls back to
    # for small batches (vLLM before 0.24: block-fp8 experts in Triton below DeepGEMM's 128-token
    # alignment); a dtype or split it never measured keeps the set's own rows; docs/MOE.md
    moe_fallback_table: str = ""
    moe_fallback_below_tokens: int = 0
    # measured, attention DP with EP: how tokens reach their experts: allgather (every GPU gets
    # every rank's tokens, reduce-scatter back) | deepep (SGLang --moe-a2a-backend deepep:
    # dispatch/combine to the experts' GPUs only; pdsim/perf/deepep.py)
    moe_a2a: str = "allgather"
    # multi-token prediction / speculative decoding (pdsim/perf/speculative.py): draft tokens per
    # decode step (0 = off), accepted tokens per step per sequence incl. the bonus token (0 = the
    # default, 1 + 0.85 + 0.85^2 ...: DeepSeek-V3 report), MTP layers run per draft token
    mtp_draft_tokens: int = 0
    mtp_accepted_tokens: float = 0.0
    mtp_draft_layers: int = 1
    mfu: float = 0.5
    mbu: float = 0.7
    overhead_s: float = 0.003
    path: str = ""  # fitted JSON or table CSV (relative -> data_dir)
    overhead_per_seq_s: float = 0.0  # roofline, measured: per-sequence cost of a step (scheduling, sampling)
    comm_latency_s: float = 1.0e-5  # roofline: fixed cost of one TP all-reduce
    table_model: str = ""  # table: model name in the CSV; "" = match model.name
    table_hardware: str = ""  # table: hardware name in the CSV; "" = match hardware.name
    # linear model: t = base + per_token * tokens (+ per_ctx_token * context for decode)
    prefill_base_s: float = 0.02
    prefill_per_token_s: float = 0.00008
    decode_base_s: float = 0.012
    decode_per_seq_s: float = 0.0001
    decode_per_ctx_token_s: float = 2e-8
    # engine loop time per step beyond the forward (scheduling, polling, sampling), any kind;
    # `pdreal profile` measures both (engine.json); 0 = none (overhead.py)
    prefill_step_overhead_s: float = 0.0
    decode_step_overhead_s: float = 0.0
    # host time per MoE layer to issue an eager (no CUDA graph) step that carries prompt tokens:
    # such a step lasts at least (MoE layers) x this (0 = no floor; overhead.py)
    prefill_host_s_per_moe_layer: float = 0.0
    # how that host time meets the forward: floor (the host runs ahead: max of the two) | serial
    # (a host sync in every MoE layer: the two add up; overhead.py)
    prefill_host_mode: str = "floor"
    # a step with prompt tokens of at most this many tokens (prompt + decode) replays the engine's
    # piecewise CUDA graphs (vLLM's max-cudagraph-capture-size) and pays the host time below
    # instead of the eager one; 0 = every such step is eager (overhead.py)
    prefill_graph_max_tokens: int = 0
    prefill_graph_host_s_per_moe_layer: float = 0.0
    # forward-time multipliers: served step latency / profiled latency (CPU shared; overhead.py)
    prefill_step_scale: float = 1.0
    decode_step_scale: float = 1.0
    # per-step cost proportional to the batch's context tokens (prefill: prompt tokens incl.
    # cached; decode: KV tokens read), any kind; DistServe's simulator adds 1e-7 s per token
    step_overhead_per_context_token_s: float = 0.0
    # tokens added to each sequence's context in the decode term (1: the token being generated
    # counts, as DistServe's simulator evaluates its fit over ctx + 1)
    decode_context_offset_tokens: int = 0
    # fitted: a batch at or above the large-batch threshold is never faster than the last
    # small-batch size (true) or uses the large-batch fit as is (false, DistServe's simulator)
    fitted_batch_floor: bool = True


@dataclass
class FaultConfig:
    transfer_failure_prob: float = 0.0
    crash_instance: str = ""  # e.g. "decode:0"
    crash_at_s: float = -1.0
    heartbeat_interval_s: float = 1.0
    heartbeat_misses: int = 3
    bootstrap_timeout_s: float = 30.0
    retry_failed: bool = False
    max_retries: int = 1  # router re-dispatches of one request when retry_failed


@dataclass
class SearchConfig:
    """Goodput search (`pdsim goodput`, `pdsim sweep`)."""

    start_rps: float = 1.0  # first rate probed; the search doubles/halves from here
    rel_tol: float = 0.05  # stop when the pass/fail bracket is this tight (relative)
    max_probes: int = 24
    max_rate_rps: float = 10000.0
    min_rate_rps: float = 0.001  # a downward search stops here (goodput 0)


@dataclass
class PlanConfig:
    """`pdsim plan`: recommend a P:D split and a layout per side for a GPU budget (pdsim.search.planner)."""

    gpus: int = 16  # GPU budget (of hardware.name)
    tp_options: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # attention DP ranks and MoE expert parallelism to combine with each TP (pdsim/parallel.py;
    # DP > 1 or EP > 1 need perf=measured on hardware with op_tables, EP > 1 an MoE model)
    dp_options: list[int] = field(default_factory=lambda: [1])
    ep_options: list[int] = field(default_factory=lambda: [1])
    # how DP x EP layouts reach their experts: "" (perf.moe_a2a), allgather, deepep (each tried)
    a2a_options: list[str] = field(default_factory=lambda: [""])
    # requests per simulated probe; 0 = sized per fleet and rate: arrivals spanning 20 lone-request
    # latencies (pdsim.search.planner.MIN_LIFETIMES), within [min_requests, max_requests]
    num_requests: int = 0
    min_requests: int = 100
    max_requests: int = 8000
    verify_top: int = 3  # candidates per mode re-checked with a full-fleet goodput search
    helper_instances: int = 4  # other-role instances (at the largest TP) when measuring one role
    colocated: bool = True  # also plan the best colocated fleet and report the gain
    min_rate_rps: float = 0.05  # below this a fleet counts as having no goodput (keeps probes short)


@dataclass
class FrontierConfig:
    """`pdsim frontier`: output tokens/s per GPU against tokens/s per user, per deployment
    (pdsim.search.frontier; closed-loop points sized to reach steady state)."""

    gpus: int = 16  # GPU budget (of hardware.name); every deployment uses all of it
    tp_options: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    # attention DP ranks and MoE expert parallelism to combine with each TP (labels tpAdpBepCxN;
    # DP > 1 or EP > 1 need perf=measured on hardware with op_tables, EP > 1 an MoE model)
    dp_options: list[int] = field(default_factory=lambda: [1])
    ep_options: list[int] = field(default_factory=lambda: [1])
    # how DP x EP layouts reach their experts (label suffix deepep / allgather; "" = perf.moe_a2a)
    a2a_options: list[str] = field(default_factory=lambda: [""])
    modes: list[str] = field(default_factory=lambda: ["colocated", "disaggregated"])
    # precisions to compare, "GEMM[.kvKV]" each (e.g. bf16, fp8.kvfp8, nvfp4.kvfp8); [] = the model's own
    precisions: list[str] = field(default_factory=list)
    deployments: list[str] = field(default_factory=list)  # labels to draw ([] = every one enumerated)
    deployment: str = ""  # this job's label (set per hydra job by `pdsim frontier`)
    rounds: int = 6  # requests per point = concurrency x (1 warm-up round + rounds); 6: within ~1% of 12
    min_counted_requests: int = 32  # at low concurrency, at least this many beyond the warm-up
    max_concurrency: int = 4096  # ladder: 1 client per batch instance, doubled up to this
    min_gain: float = 0.03  # stop doubling when tokens/s/GPU grows less than this (saturated)
    min_tokens_per_s_per_user: float = 5.0  # stop doubling below this per-user speed
    target_tokens_per_s_per_user: float = 50.0  # the interactivity target marked on the chart


@dataclass
class Config:
    scenario: ScenarioConfig = MISSING
    model: ModelConfig = MISSING
    hardware: HardwareConfig = MISSING
    cluster: ClusterConfig = MISSING
    policy: PolicyConfig = MISSING
    slo: SloConfig = MISSING
    perf: PerfConfig = MISSING
    kv_tiers: KVTiersConfig = field(default_factory=KVTiersConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    seed: int = 0
    data_dir: str = ""  # where relative trace/calibration paths resolve; "" = auto (../shared/data)
    progress: bool = True
    record_token_times: bool = False
    # advance a decode batch several iterations per event while its membership cannot change
    # (identical results; false = one event per iteration, the reference path)
    skip_ahead: bool = True
    timeseries_interval_s: float = 1.0
    max_sim_time_s: float = 0.0  # 0 = run until every request is done
    report: bool = False  # also write an HTML/markdown run report into the output dir


GROUPS: dict[str, type] = {
    "scenario": ScenarioConfig,
    "model": ModelConfig,
    "hardware": HardwareConfig,
    "cluster": ClusterConfig,
    "policy": PolicyConfig,
    "slo": SloConfig,
    "perf": PerfConfig,
    "kv_tiers": KVTiersConfig,
}


def register_configs() -> None:
    """Register the schemas with hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)


def to_config(cfg: DictConfig | dict[str, Any]) -> Config:
    """Convert a composed config into the dataclass tree (done once, at the boundary)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigKeyError

    # a key the schema does not have (`+unknown.key=1`) is an error, not ignored
    if isinstance(cfg, DictConfig):  # composed against the schema: only `+` keys can be unknown
        unknown = _unknown_key(cfg, Config, "")
        if unknown:
            raise ValueError(f"unknown config key {unknown!r} (not in the schema, pdsim/config.py)")
        obj = OmegaConf.to_object(cfg)
    else:
        try:
            obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), cfg))
        except ConfigKeyError as exc:
            raise ValueError(f"unknown config key {exc.full_key!r} (not in the schema, pdsim/config.py)") from None
    if not isinstance(obj, Config):
        raise TypeError(f"composed config is {type(obj).__name__}, expected Config")
    _apply_total_instances(obj.cluster)
    if not obj.cluster.token_delivery_s >= 0:
        raise ValueError(f"cluster.token_delivery_s must be >= 0, got {obj.cluster.token_delivery_s}")
    validate_values(obj)
    if obj.slo.tpot_definition == "tbt_mooncake":
        obj.record_token_times = True  # Mooncake's TBT is computed from the token times
    return obj


def _unknown_key(node: DictConfig, schema: type, prefix: str) -> str:
    """The first key of `node` (dotted, from the root) that dataclass `schema` has no field for;
    "" when none. A walk over the keys: a structured merge would cost ~25 ms per run."""
    from omegaconf import DictConfig

    hints = typing.get_type_hints(schema)
    for key in node:
        name = f"{prefix}{key}"
        if key not in hints:
            return name
        child = node._get_node(key)
        if dataclasses.is_dataclass(hints[key]) and isinstance(child, DictConfig) and not child._is_none():
            unknown = _unknown_key(child, hints[key], f"{name}.")
            if unknown:
                return unknown
    return ""


def validate_values(cfg: Config) -> None:
    """Range checks a schema type cannot express (one-line errors naming group, field, value)."""
    for name in ("tokenize_s_per_token", "tokenize_threads"):
        if not getattr(cfg.cluster, name) >= 0:
            raise ValueError(f"cluster: field {name!r} must be >= 0, got {getattr(cfg.cluster, name)}")
    s = cfg.slo
    for name in ("ttft_s", "tpot_s"):
        if not getattr(s, name) > 0:
            raise ValueError(f"slo: field {name!r} must be > 0, got {getattr(s, name)}")
    if not 0 < s.attainment_target <= 1:
        raise ValueError(f"slo: field 'attainment_target' must be in (0, 1], got {s.attainment_target}")
    choices = {"ttft_definition": ("standard", "prefill_end"), "criterion": ("joint", "percentiles"),
               "tpot_definition": ("standard", "distserve", "tbt_mooncake")}
    for name, allowed in choices.items():
        if getattr(s, name) not in allowed:
            raise ValueError(f"slo: field {name!r} has unknown value {getattr(s, name)!r} (choose from {allowed})")
    c = cfg.cluster
    _validate_moe_table_set(cfg, "perf", "moe_table_set", cfg.perf.moe_table_set)
    for side in ("colocated",) if c.mode == "colocated" else ("prefill", "decode"):
        c.parallel(side).validate(cfg.model.num_heads, cfg.model.num_experts, cfg.model.name, f"{side}_")
        _validate_moe_table_set(cfg, "cluster", f"{side}_moe_table_set", getattr(c, f"{side}_moe_table_set"))
    if c.prefix_cache_tokens < 0:
        raise ValueError(f"cluster: field 'prefix_cache_tokens' must be >= 0, got {c.prefix_cache_tokens}")
    check_dispatch(c.prefill_dp_dispatch)
    _validate_precision(cfg.model)
    _validate_layer_kinds(cfg.model)
    if cfg.search.max_probes < 2:
        raise ValueError(f"search: field 'max_probes' must be >= 2, got {cfg.search.max_probes}")


def _validate_moe_table_set(cfg: Config, group: str, field_name: str, name: str) -> None:
    """An MoE table set (perf.moe_table_set, or a side's own) is a measured set of the hardware's
    GPU (its op_tables)."""
    if not name:
        return
    from pdsim.perf.optables import sets_of_system  # the tables' index: no config import, no cycle

    have = sets_of_system(cfg.hardware.op_tables)
    if name not in have:
        raise ValueError(f"{group}: field '{field_name}' has unknown value {name!r} for hardware "
                         f"{cfg.hardware.name} (its table sets: {have})")


GEMM_QUANTS = ("", "bf16", "fp8", "fp8_block", "nvfp4", "int4_wo")
MOE_QUANTS = (*GEMM_QUANTS, "w4a16_mxfp4", "w4a8_mxfp4_mxfp8")
KV_DTYPES = ("", "bf16", "fp16", "fp8")


def _validate_precision(model: ModelConfig) -> None:
    for name, allowed in (("gemm_quant", GEMM_QUANTS), ("moe_quant", MOE_QUANTS), ("kv_dtype", KV_DTYPES)):
        if getattr(model, name) not in allowed:
            raise ValueError(f"model: field {name!r} has unknown value {getattr(model, name)!r} "
                             f"(choose from {allowed})")


def _validate_layer_kinds(model: ModelConfig) -> None:
    """Sliding and linear-attention layers fit in num_layers and carry the shape they need."""
    m = model
    if not 0 <= m.num_sliding_layers + m.num_linear_attention_layers <= m.num_layers:
        raise ValueError(f"model: num_sliding_layers ({m.num_sliding_layers}) + num_linear_attention_layers "
                         f"({m.num_linear_attention_layers}) must be in [0, num_layers={m.num_layers}]")
    if m.num_sliding_layers and m.sliding_window_tokens < 1:
        raise ValueError(f"model: num_sliding_layers={m.num_sliding_layers} needs sliding_window_tokens >= 1, "
                         f"got {m.sliding_window_tokens}")
    shape = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
             "linear_conv_kernel_dim")
    bad = [name for name in shape if getattr(m, name) < 1]
    if m.num_linear_attention_layers and bad:
        raise ValueError(f"model: num_linear_attention_layers={m.num_linear_attention_layers} needs {bad} >= 1")
    if m.linear_state_dtype not in KV_DTYPES + ("fp32",):
        raise ValueError(f"model: field 'linear_state_dtype' has unknown value {m.linear_state_dtype!r} "
                         f"(choose from {KV_DTYPES + ('fp32',)})")
    if m.sparse_attention_topk < 0:
        raise ValueError(f"model: field 'sparse_attention_topk' must be >= 0, got {m.sparse_attention_topk}")


def _apply_total_instances(cluster: ClusterConfig) -> None:
    if cluster.total_instances <= 0:
        return
    decode = cluster.total_instances - cluster.prefill
    if decode < 1:
        raise ValueError(
            f"cluster.total_instances={cluster.total_instances} leaves no decode instance "
            f"for cluster.prefill={cluster.prefill}"
        )
    cluster.decode = decode
