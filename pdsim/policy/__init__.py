"""The shared policy seam: decisions that pdsim and pdreal make with the same code.

Pure Python over immutable "views" (views.py): no simpy, no clock (time is an argument), no I/O,
deterministic given a seeded numpy Generator argument. Modules:

- route_choice.py: pair selection (round_robin, least_loaded, random, power_of_two) by name.
- batching.py: PrefillAdder (token budget, chunked prefill, prefix reuse, mixed-batch budget).
- memory.py: decode pre-allocation (allocatable-tokens rule), retraction victims.
- request_aware.py: cache-aware and length-bucket routing (registered in route_choice.py).
- routing_state.py: RouterState (the caller-owned routing state) and RoutingParams.
- admission.py: accept_all, threshold, token_bucket, early_reject (predicted TTFT/TBT vs SLO).
- scaling.py: P:D rebalancer proposing role moves (hysteresis, warm-up delay).
- receive.py: when a colocated scheduler takes in arrivals (SGLang's scheduler receive interval).
- dp_dispatch.py: which attention-DP rank of a prefill instance takes a prompt (balanced, or
  SGLang's bootstrap_room % dp with a queue and budget per rank).

The step planners (what pdsim's simulated instances and pdreal's engines both call, then only
execute), each reading its executor through one protocol of executors.py: limits.py (StepLimits, the colocated schedule names), router_policy.py (RouterPolicy:
admission + pair + bootstrap room), prefill_step.py (the one prefill budget, the prefill step,
the colocated step under both schedules), decode_step.py (resume / admit / join / grow-or-retract
of one decode iteration).
"""

from pdsim.policy.admission import (
    ADMISSION_POLICIES,
    AdmissionDecision,
    AdmissionParams,
    AdmissionState,
    SloPredictor,
    admit,
)
from pdsim.policy.adp_balance import ADP_START, AdpCounters, DpRanks, adp_gate, assign_dp_rank
from pdsim.policy.batching import (
    PrefillAdder,
    PrefillBatch,
    PrefillBudget,
    PrefillChunk,
    decode_reservation_tokens,
    form_prefill_batch,
    prefill_token_budget,
)
from pdsim.policy.decode_step import (
    DecodeStepPlan,
    first_admission_boundary,
    plan_decode_step,
    prealloc_free_slots,
)
from pdsim.policy.dp_dispatch import (
    BALANCED,
    BOOTSTRAP_ROOM,
    DISPATCHES,
    check_dispatch,
    form_ranked_prefill_batch,
    prefill_dp_rank,
)
from pdsim.policy.executors import (
    ColocatedExecutor,
    DecodeExecutor,
    PrefillExecutor,
    RankedPrefillExecutor,
    RunningBatch,
)
from pdsim.policy.limits import MIXED, PREFILL_PRIORITY, SCHEDULES, StepLimits, check_schedule
from pdsim.policy.memory import (
    DecodeMemoryView,
    GrowthPlan,
    PreallocPlan,
    allocatable_tokens,
    choose_retraction_victims,
    need_now_tokens,
    next_new_token_ratio,
    plan_page_growth,
    plan_preallocation,
    reserve_tokens,
)
from pdsim.policy.prefill_step import (
    ColocatedStepPlan,
    plan_colocated_decodes,
    plan_colocated_step,
    plan_prefill_step,
    plan_ranked_prefill_step,
    prefill_budget,
)
from pdsim.policy.route_choice import RouteDecision, route, routing_policy_names
from pdsim.policy.router_policy import RouterDecision, RouterPolicy
from pdsim.policy.routing_state import RouterState, RoutingParams
from pdsim.policy.scaling import (
    ScalingDecision,
    ScalingParams,
    ScalingSample,
    ScalingState,
    propose_move,
)
from pdsim.policy.views import (
    ROLE_COLOCATED,
    ROLE_DECODE,
    ROLE_PREFILL,
    InstanceView,
    RequestView,
    pages_for,
)

__all__ = [
    "ADP_START",
    "AdpCounters",
    "DpRanks",
    "adp_gate",
    "assign_dp_rank",
    "MIXED",
    "PREFILL_PRIORITY",
    "SCHEDULES",
    "ColocatedExecutor",
    "ColocatedStepPlan",
    "DecodeExecutor",
    "DecodeStepPlan",
    "PrefillExecutor",
    "RankedPrefillExecutor",
    "BALANCED",
    "BOOTSTRAP_ROOM",
    "DISPATCHES",
    "RunningBatch",
    "GrowthPlan",
    "RouterDecision",
    "RouterPolicy",
    "StepLimits",
    "check_schedule",
    "first_admission_boundary",
    "plan_colocated_decodes",
    "plan_colocated_step",
    "plan_decode_step",
    "plan_page_growth",
    "plan_prefill_step",
    "plan_ranked_prefill_step",
    "check_dispatch",
    "form_ranked_prefill_batch",
    "prefill_dp_rank",
    "prealloc_free_slots",
    "prefill_budget",
    "ADMISSION_POLICIES",
    "AdmissionDecision",
    "AdmissionParams",
    "AdmissionState",
    "RoutingParams",
    "ScalingDecision",
    "ScalingParams",
    "ScalingSample",
    "ScalingState",
    "SloPredictor",
    "admit",
    "propose_move",
    "ROLE_COLOCATED",
    "ROLE_DECODE",
    "ROLE_PREFILL",
    "DecodeMemoryView",
    "InstanceView",
    "PreallocPlan",
    "PrefillAdder",
    "PrefillBatch",
    "PrefillBudget",
    "PrefillChunk",
    "RequestView",
    "RouteDecision",
    "RouterState",
    "allocatable_tokens",
    "choose_retraction_victims",
    "decode_reservation_tokens",
    "form_prefill_batch",
    "prefill_token_budget",
    "need_now_tokens",
    "next_new_token_ratio",
    "pages_for",
    "plan_preallocation",
    "reserve_tokens",
    "route",
    "routing_policy_names",
]
