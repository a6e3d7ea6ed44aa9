"""The shared policy seam: decisions that pdsim and pdreal make with the same code.

Pure Python over frozen "views" (views.py): no simpy, no clock (time is an argument), no I/O,
deterministic given a seeded numpy Generator argument. Modules:

- routing.py: pair selection (round_robin, least_loaded, random, power_of_two) by name.
- batching.py: PrefillAdder (token budget, chunked prefill, prefix reuse, mixed-batch budget).
- memory.py: decode pre-allocation (allocatable-tokens rule), retraction victims.
- request_aware.py: cache-aware and length-bucket routing (registered in routing.py).
- admission.py: accept_all, threshold, token_bucket, early_reject (predicted TTFT/TBT vs SLO).
- scaling.py: P:D rebalancer proposing role moves (hysteresis, warm-up delay).
"""

from pdsim.policy.admission import (
    ADMISSION_POLICIES,
    AdmissionDecision,
    AdmissionParams,
    AdmissionState,
    SloPredictor,
    admit,
)
from pdsim.policy.batching import (
    PrefillAdder,
    PrefillBatch,
    PrefillBudget,
    PrefillChunk,
    decode_reservation_tokens,
    form_prefill_batch,
    mixed_prefill_budget,
)
from pdsim.policy.memory import (
    DecodeMemoryView,
    PreallocPlan,
    allocatable_tokens,
    choose_retraction_victims,
    need_now_tokens,
    next_new_token_ratio,
    plan_preallocation,
    reserve_tokens,
)
from pdsim.policy.request_aware import RoutingParams
from pdsim.policy.routing import RouteDecision, RouterState, route, routing_policy_names
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
    "mixed_prefill_budget",
    "need_now_tokens",
    "next_new_token_ratio",
    "pages_for",
    "plan_preallocation",
    "reserve_tokens",
    "route",
    "routing_policy_names",
]
