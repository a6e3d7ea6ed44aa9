"""The search commands' settings: `search` (goodput), `plan` and `frontier`."""

from __future__ import annotations

from dataclasses import dataclass, field


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
