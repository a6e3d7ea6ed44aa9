from __future__ import annotations

import numpy as np
import pytest

from pdsim.policy import InstanceView, RequestView, RouterState, route
from pdsim.policy.admission import AdmissionParams
from pdsim.policy.route_choice import routing_policy_names
from pdsim.policy.router_policy import ROOM_BITS, ROOMS_AHEAD, RouterPolicy

REQ = RequestView(request_id=0, input_tokens=100, output_tokens=10)


def views(role: str, loads: list[int], healthy: list[bool] | None = None) -> list[InstanceView]:
    healthy = healthy or [True] * len(loads)
    return [
        InstanceView(instance_id=i, role=role, queued_tokens=q, healthy=h)
        for i, (q, h) in enumerate(zip(loads, healthy, strict=True))
    ]


def test_round_robin_cycles_each_side_independently() -> None:
    state, rng = RouterState(), np.random.default_rng(0)
    p, d = views("prefill", [0, 0]), views("decode", [0, 0, 0])
    pairs = [route("round_robin", REQ, p, d, state, rng) for _ in range(4)]
    assert [(x.prefill_id, x.decode_id) for x in pairs] == [(0, 0), (1, 1), (0, 2), (1, 0)]


def test_round_robin_skips_unhealthy() -> None:
    state, rng = RouterState(), np.random.default_rng(0)
    p = views("prefill", [0, 0, 0], [True, False, True])
    ids = [route("round_robin", REQ, p, (), state, rng).prefill_id for _ in range(3)]
    assert ids == [0, 2, 0]


def test_least_loaded_ties_break_by_instance_id() -> None:
    state, rng = RouterState(), np.random.default_rng(0)
    p = views("prefill", [5, 3, 3])
    d = views("decode", [7, 7])
    decision = route("least_loaded", REQ, p, d, state, rng)
    assert (decision.prefill_id, decision.decode_id) == (1, 0)


def test_least_loaded_counts_kv_use() -> None:
    state, rng = RouterState(), np.random.default_rng(0)
    p = [
        InstanceView(instance_id=0, role="prefill", queued_tokens=10, kv_used_tokens=100, kv_total_tokens=1000),
        InstanceView(instance_id=1, role="prefill", queued_tokens=50, kv_used_tokens=0, kv_total_tokens=1000),
    ]
    assert route("least_loaded", REQ, p, (), state, rng).prefill_id == 1


def test_no_healthy_instance_returns_none() -> None:
    state, rng = RouterState(), np.random.default_rng(0)
    p, d = views("prefill", [0]), views("decode", [0], [False])
    assert route("least_loaded", REQ, p, d, state, rng) is None


@pytest.mark.parametrize("name", ["random", "power_of_two"])
def test_random_policies_are_deterministic_given_rng(name: str) -> None:
    p, d = views("prefill", [1, 2, 3, 4]), views("decode", [4, 3, 2, 1])
    runs = []
    for _ in range(2):
        state, rng = RouterState(), np.random.default_rng(7)
        runs.append([route(name, REQ, p, d, state, rng) for _ in range(20)])
    assert runs[0] == runs[1]


def test_unknown_policy_names_the_value() -> None:
    with pytest.raises(ValueError, match="'nope'"):
        route("nope", REQ, views("prefill", [0]), (), RouterState(), np.random.default_rng(0))
    assert "round_robin" in routing_policy_names()


def test_rooms_drawn_ahead_are_the_rooms_drawn_one_by_one() -> None:
    # numpy's bounded Lemire method over a range wider than 32 bits takes each value from its
    # own 64-bit draws: a block of ROOMS_AHEAD is the sequence of single draws, across blocks
    policy = RouterPolicy("round_robin", "accept_all", AdmissionParams(), np.random.default_rng(1),
                          np.random.default_rng([5, 9]))
    reference = np.random.default_rng([5, 9])
    count = 2 * ROOMS_AHEAD + 7
    rooms = [policy.next_room() for _ in range(count)]
    assert rooms == [int(reference.integers(0, 2**ROOM_BITS, dtype=np.int64)) for _ in range(count)]
    assert len(set(rooms)) == count and 0 <= min(rooms) and max(rooms) < 2**ROOM_BITS
