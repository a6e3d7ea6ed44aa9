"""How the engines behave and are judged: `policy` (routing, admission, P:D rebalancing), `slo`,
`perf` (the step-latency model) and `faults`."""

from __future__ import annotations

from dataclasses import dataclass, field


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
