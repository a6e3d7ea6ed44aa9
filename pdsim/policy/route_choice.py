"""Routing: pick the (prefill, decode) pair for a request (SGLang's PDRouter, dual dispatch).

Contract of a routing policy (`RoutingPolicy`): given the request's view, the prefill-side and
decode-side instance views (in colocated mode the decode side is empty), the caller-owned
`RouterState` and a seeded numpy Generator, return a `RouteDecision` or None when no healthy
instance exists on a needed side. Policies are deterministic for equal inputs and RNG state;
ties break by (load, instance_id). Only healthy views are ever chosen. A policy may update
`state` (round-robin counters); it never keeps module-level state.

Each side is chosen independently by the policies here; pair-aware policies (KV-centric,
cache-aware) plug into the same registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from pdsim.policy.kv_centric import choose_kv_centric
from pdsim.policy.request_aware import choose_cache_aware, choose_length_bucket
from pdsim.policy.request_count import choose_least_requests
from pdsim.policy.routing_state import RouterState
from pdsim.policy.views import InstanceView, RequestView


@dataclass(init=False, slots=True, unsafe_hash=True)
class RouteDecision:
    """prefill_id: the prefill (or colocated) instance; decode_id: -1 in colocated mode."""

    prefill_id: Final[int]
    decode_id: Final[int]

    def __init__(self, prefill_id: int, decode_id: int = -1) -> None:
        self.prefill_id = prefill_id
        self.decode_id = decode_id


SideChooser = Callable[[RequestView, Sequence[InstanceView], str, RouterState, np.random.Generator], int]


def _healthy(views: Sequence[InstanceView]) -> list[InstanceView]:
    return sorted((v for v in views if v.healthy), key=lambda v: v.instance_id)


def _healthy_memo(views: Sequence[InstanceView], side: str, state: RouterState) -> list[InstanceView]:
    """_healthy(views), reused while the caller passes the very same tuple."""
    if type(views) is not tuple:
        return _healthy(views)
    memo = state.healthy_memo.get(side)
    if memo is not None and memo[0] is views:
        return memo[1]
    healthy = _healthy(views)
    state.healthy_memo[side] = (views, healthy)
    return healthy


def choose_round_robin(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Cycle through the healthy instances in instance_id order."""
    healthy = _healthy_memo(views, side, state)
    return healthy[state.advance(side, len(healthy))].instance_id


def choose_least_loaded(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Minimum (load_tokens, queued_requests, instance_id): queued tokens plus KV in use."""
    best = min(_healthy(views), key=lambda v: (v.load_tokens, v.queued_requests, v.instance_id))
    return best.instance_id


def choose_random(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Uniform over healthy instances (one draw from `rng`)."""
    healthy = _healthy_memo(views, side, state)
    return healthy[int(rng.integers(len(healthy)))].instance_id


def choose_power_of_two(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Two distinct random healthy instances; the less loaded wins (ties: lower id)."""
    healthy = _healthy(views)
    if len(healthy) == 1:
        return healthy[0].instance_id
    picks = rng.choice(len(healthy), size=2, replace=False)
    pair = [healthy[int(i)] for i in picks]
    return min(pair, key=lambda v: (v.load_tokens, v.queued_requests, v.instance_id)).instance_id


SIDE_CHOOSERS: dict[str, SideChooser] = {
    "round_robin": choose_round_robin,
    "least_loaded": choose_least_loaded,
    "least_requests": choose_least_requests,
    "random": choose_random,
    "power_of_two": choose_power_of_two,
    "cache_aware": choose_cache_aware,
    "length_buckets": choose_length_bucket,
    "kv_centric": choose_kv_centric,
}


def routing_policy_names() -> tuple[str, ...]:
    return tuple(sorted(SIDE_CHOOSERS))


def route(
    name: str,
    request: RequestView,
    prefill: Sequence[InstanceView],
    decode: Sequence[InstanceView],
    state: RouterState,
    rng: np.random.Generator,
) -> RouteDecision | None:
    """Choose a pair with the policy `name` (each side independently).

    `decode` empty means colocated mode (decode_id = -1). Returns None when a needed side has no
    healthy instance. The prefill side is chosen first, then the decode side, so RNG draws happen
    in a fixed order.
    """
    try:
        chooser = SIDE_CHOOSERS[name]
    except KeyError:
        raise ValueError(
            f"policy: field 'routing' has unknown value {name!r} (choose from {routing_policy_names()})"
        ) from None
    if not any(v.healthy for v in prefill):
        return None
    prefill_id = chooser(request, prefill, "prefill", state, rng)
    if not decode:
        return RouteDecision(prefill_id=prefill_id)
    if not any(v.healthy for v in decode):
        return None
    return RouteDecision(prefill_id=prefill_id, decode_id=chooser(request, decode, "decode", state, rng))
