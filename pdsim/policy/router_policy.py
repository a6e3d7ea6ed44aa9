"""The router's decision for one request: admission, then the (prefill, decode) pair, then the
bootstrap room - in that order, from one object both routers own.

pdsim's Router (pdsim/sim/router.py) and pdreal's (pdreal/serving/router.py) each build one
`RouterPolicy` from the same config groups (`policy`, `slo`) and call `decide` with the views of
their instances; they only execute the answer (dispatch in simulated time, or HTTP to both
halves). The admission and routing state (token bucket, round-robin cursors) and the two seeded
RNG streams (`router.route`, `router.bootstrap_room`) live here, so both draw the same numbers
for the same sequence of requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import numpy as np

from pdsim.policy.admission import (
    ACCEPT_ALL,
    ADMISSION_POLICIES,
    TOKEN_BUCKET,
    AdmissionParams,
    AdmissionState,
    SloPredictor,
    admit,
)
from pdsim.policy.route_choice import route, routing_policy_names
from pdsim.policy.routing_state import RouterState, RoutingParams
from pdsim.policy.views import InstanceView, RequestView

ROUTED: Final = "routed"
REJECTED: Final = "rejected"
NO_INSTANCE: Final = "no_instance"
# policies that read nothing of an InstanceView but instance_id and healthy
HEALTH_ONLY_ROUTING = ("random", "round_robin")
HEALTH_ONLY_ADMISSION = (ACCEPT_ALL, TOKEN_BUCKET)
NO_HEALTHY_INSTANCE = "no healthy instance to route to"
ROOM_BITS: Final = 63
ROOMS_AHEAD: Final = 256  # bootstrap rooms drawn per numpy call (RouterPolicy.next_room)


class RouterPolicyConfig(Protocol):
    """The fields of pdsim's PolicyConfig the router reads."""

    routing: str
    admission: str
    max_queued_requests: int
    max_queued_tokens: int
    token_bucket_rps: float
    token_bucket_burst: int
    cache_weight: float
    @property
    def length_buckets(self) -> Sequence[int]: ...
    admission_ttft_margin: float
    admission_tbt_margin: float


class SloLike(Protocol):
    ttft_s: float
    tpot_s: float


def admission_params(policy: RouterPolicyConfig, slo: SloLike) -> AdmissionParams:
    """policy.* limits and slo.* targets as the admission policies' parameters."""
    p = policy
    return AdmissionParams(
        max_queued_requests=p.max_queued_requests, max_queued_tokens=p.max_queued_tokens,
        token_bucket_rps=p.token_bucket_rps, token_bucket_burst=p.token_bucket_burst,
        ttft_slo_s=slo.ttft_s, tbt_slo_s=slo.tpot_s,
        ttft_margin=p.admission_ttft_margin, tbt_margin=p.admission_tbt_margin,
    )


def routing_params(policy: RouterPolicyConfig, block_tokens: int) -> RoutingParams:
    """Request-aware routing parameters; block_tokens: the prefix cache's block size on the
    instances whose summaries the router reads (pdsim: its prefix cache's blocks, the
    workload's hash_ids granularity; pdreal: one KV page, the unit of its KV events)."""
    if block_tokens < 1:
        raise ValueError(f"routing: block_tokens must be >= 1, got {block_tokens}")
    return RoutingParams(policy.cache_weight, tuple(policy.length_buckets), block_tokens)


@dataclass(init=False, slots=True, unsafe_hash=True)
class RouterDecision:
    """outcome: routed (prefill_id, decode_id, bootstrap_room set; decode_id -1 when colocated),
    rejected (admission said no; reason), or no_instance (no healthy instance; reason)."""

    outcome: Final[str]
    prefill_id: Final[int]
    decode_id: Final[int]
    bootstrap_room: Final[int]
    reason: Final[str]

    def __init__(self, outcome: str, prefill_id: int = -1, decode_id: int = -1, bootstrap_room: int = 0,
        reason: str = "") -> None:
        self.outcome = outcome
        self.prefill_id = prefill_id
        self.decode_id = decode_id
        self.bootstrap_room = bootstrap_room
        self.reason = reason

    @property
    def routed(self) -> bool:
        return self.outcome == ROUTED


@dataclass
class RouterPolicy:
    """One router's decisions. Build it with `RouterPolicy.create`."""

    routing: str
    admission: str
    admission_params: AdmissionParams
    route_rng: np.random.Generator
    room_rng: np.random.Generator
    predictor: SloPredictor | None = None
    state: RouterState = field(default_factory=RouterState)
    admission_state: AdmissionState = field(default_factory=AdmissionState)
    rooms: list[int] = field(default_factory=list, repr=False)  # drawn ahead, taken from the end

    @classmethod
    def create(
        cls, policy: RouterPolicyConfig, slo: SloLike, block_tokens: int, route_rng: np.random.Generator,
        room_rng: np.random.Generator, predictor: SloPredictor | None = None,
    ) -> RouterPolicy:
        if policy.admission not in ADMISSION_POLICIES:
            raise ValueError(f"policy: field 'admission' has unknown value {policy.admission!r} "
                             f"(choose from {ADMISSION_POLICIES})")
        if policy.routing not in routing_policy_names():
            raise ValueError(f"policy: field 'routing' has unknown value {policy.routing!r} "
                             f"(choose from {routing_policy_names()})")
        return cls(policy.routing, policy.admission, admission_params(policy, slo), route_rng, room_rng,
                   predictor, RouterState(params=routing_params(policy, block_tokens)))

    @property
    def reads_load(self) -> bool:
        """False when neither the routing nor the admission policy reads anything of an
        instance view but instance_id and healthy: a caller may then pass views with only those
        set (the decision is the same) and skip measuring load per request."""
        return self.routing not in HEALTH_ONLY_ROUTING or self.admission not in HEALTH_ONLY_ADMISSION

    def decide(
        self, request: RequestView, prefill: Sequence[InstanceView], decode: Sequence[InstanceView],
        now_s: float, first_attempt: bool = True,
    ) -> RouterDecision:
        """Admission (first attempt only), pair choice, then a random 63-bit bootstrap room.

        `decode` empty means colocated mode. A retried request (first_attempt False) is not
        re-admitted. No room is drawn for a request that is not routed.
        """
        if self.admission != ACCEPT_ALL and first_attempt:
            verdict = admit(self.admission, request, prefill, decode, self.admission_params,
                            self.admission_state, now_s, self.predictor)
            if not verdict.admitted:
                return RouterDecision(REJECTED, reason=verdict.reason)
        pair = route(self.routing, request, prefill, decode, self.state, self.route_rng)
        if pair is None:
            return RouterDecision(NO_INSTANCE, reason=NO_HEALTHY_INSTANCE)
        return RouterDecision(ROUTED, pair.prefill_id, pair.decode_id, self.next_room())

    def next_room(self) -> int:
        """The room_rng's next uniform 63-bit room. Drawn ahead, ROOMS_AHEAD at a time: a
        range wider than 32 bits takes each value from its own 64-bit draws (numpy's bounded
        Lemire method), so a block of them is the very values drawn one by one (tests/policy/
        test_routing.py) at a fraction of the calls."""
        if not self.rooms:
            block = self.room_rng.integers(0, 2**ROOM_BITS, size=ROOMS_AHEAD, dtype=np.int64)
            self.rooms = block[::-1].tolist()
        return self.rooms.pop()
