"""Views: the read-only snapshots that policies decide over.

A view is a slotted dataclass built by the caller (pdsim's simulated instances or pdreal's real
ones) from its own state at decision time. Policies never see simulator or engine objects, never
read a clock (times arrive as arguments) and never mutate a view.

Immutable by type: the views built per request and per step (here and the plans of batching.py,
memory.py, route_choice.py, router_policy.py) declare their fields `Final`, so mypy, and with it the build
of the compiled core, rejects any assignment outside `__init__`; they hash and compare by value
as frozen dataclasses do. They are not `frozen=True` because their `__init__` is written out:
the compiled core builds them with a compiled `__init__`, while a dataclass-generated one runs as
interpreted Python (~0.9 us against ~0.07 us per object; ~28 objects per simulated request).

Queue names are the seeds' names, identical in pdsim, pdreal and the trace schema:

    prefill:   bootstrap -> waiting -> (forward) -> inflight
    decode:    prealloc -> transfer -> waiting -> running
    colocated: waiting -> running
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Final

ROLE_PREFILL = "prefill"
ROLE_DECODE = "decode"
ROLE_COLOCATED = "colocated"
ROLES = (ROLE_PREFILL, ROLE_DECODE, ROLE_COLOCATED)


@dataclass(init=False, slots=True, unsafe_hash=True)
class RequestView:
    """One request as a policy sees it.

    prefilled_tokens: prompt tokens whose KV is already present on the instance (prefix-cache
    hit plus earlier chunks); cached_tokens: the prefix-cache part of it. generated_tokens:
    output tokens produced so far (the prefill's first token counts). kv_tokens: KV tokens the
    request holds on the instance now (0 before allocation).
    """

    request_id: Final[int]
    input_tokens: Final[int]
    output_tokens: Final[int]
    arrival_s: Final[float]
    prefilled_tokens: Final[int]
    cached_tokens: Final[int]
    generated_tokens: Final[int]
    kv_tokens: Final[int]
    hash_ids: Final[tuple[int, ...]]

    def __init__(self, request_id: int, input_tokens: int, output_tokens: int, arrival_s: float = 0.0,
        prefilled_tokens: int = 0, cached_tokens: int = 0, generated_tokens: int = 0, kv_tokens: int = 0,
        hash_ids: tuple[int, ...] = ()) -> None:
        self.request_id = request_id
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.arrival_s = arrival_s
        self.prefilled_tokens = prefilled_tokens
        self.cached_tokens = cached_tokens
        self.generated_tokens = generated_tokens
        self.kv_tokens = kv_tokens
        self.hash_ids = hash_ids

    @property
    def remaining_prompt_tokens(self) -> int:
        return self.input_tokens - self.prefilled_tokens

    @property
    def remaining_output_tokens(self) -> int:
        return max(0, self.output_tokens - self.generated_tokens)

    @property
    def total_tokens(self) -> int:
        """KV tokens the request needs to finish: prompt plus every output token."""
        return self.input_tokens + self.output_tokens


@dataclass(init=False, slots=True, unsafe_hash=True)
class InstanceView:
    """One instance as the router sees it.

    queued_requests / queued_tokens count every request dispatched to the instance that has not
    yet reached its running batch (prefill: bootstrap + waiting, tokens not yet prefilled;
    decode: prealloc + transfer + waiting, prompt tokens). kv_used_tokens excludes evictable
    prefix-cache blocks. Requests dispatched but still on the wire count as queued, so
    back-to-back routing decisions see each other. cached_blocks: the prefix-cache summary, the
    block hashes cached on the instance (a frozenset, or a read-only set-like the caller keeps
    unchanged during the decision); empty on decode instances and when unknown.
    tier_hit_tokens: for the request being routed, its cached prefix tokens per KV tier in
    lookup order (gpu, host, ssd, store; see kv_centric.py); empty when tiers are not modelled.
    """

    instance_id: Final[int]
    role: Final[str]
    queued_requests: Final[int]
    queued_tokens: Final[int]
    running_requests: Final[int]
    inflight_requests: Final[int]
    kv_used_tokens: Final[int]
    kv_total_tokens: Final[int]
    healthy: Final[bool]
    cached_blocks: Final[Set[int]]
    tier_hit_tokens: Final[tuple[int, ...]]

    def __init__(self, instance_id: int, role: str, queued_requests: int = 0, queued_tokens: int = 0,
        running_requests: int = 0, inflight_requests: int = 0, kv_used_tokens: int = 0, kv_total_tokens: int = 0,
        healthy: bool = True, cached_blocks: Set[int] = frozenset(), tier_hit_tokens: tuple[int, ...] = ()) -> None:
        self.instance_id = instance_id
        self.role = role
        self.queued_requests = queued_requests
        self.queued_tokens = queued_tokens
        self.running_requests = running_requests
        self.inflight_requests = inflight_requests
        self.kv_used_tokens = kv_used_tokens
        self.kv_total_tokens = kv_total_tokens
        self.healthy = healthy
        self.cached_blocks = cached_blocks
        self.tier_hit_tokens = tier_hit_tokens

    @property
    def kv_free_tokens(self) -> int:
        return self.kv_total_tokens - self.kv_used_tokens

    @property
    def kv_used_fraction(self) -> float:
        return self.kv_used_tokens / self.kv_total_tokens if self.kv_total_tokens > 0 else 0.0

    @property
    def load_tokens(self) -> int:
        """The least-loaded key: work waiting plus KV in use, in tokens."""
        return self.queued_tokens + self.kv_used_tokens


def pages_for(tokens: int, page_size_tokens: int) -> int:
    """Pages needed to hold `tokens` tokens (ceil division)."""
    if page_size_tokens < 1:
        raise ValueError(f"page_size_tokens must be >= 1, got {page_size_tokens}")
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return -(-tokens // page_size_tokens)
