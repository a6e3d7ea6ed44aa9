"""Length-bucket routing: prompt-length boundaries map requests to instance groups."""

from __future__ import annotations

import numpy as np
import pytest

from pdsim.policy import InstanceView, RequestView, RouterState, RoutingParams, route
from pdsim.policy.request_aware import bucket_group, bucket_of


def req(tokens: int) -> RequestView:
    return RequestView(request_id=0, input_tokens=tokens, output_tokens=8)


def views(role: str, n: int, loads: dict[int, int] | None = None, down: tuple[int, ...] = ()) -> list[InstanceView]:
    loads = loads or {}
    return [InstanceView(instance_id=i, role=role, queued_tokens=loads.get(i, 0), healthy=i not in down)
            for i in range(n)]


def pick(tokens: int, bounds: tuple[int, ...], p: list[InstanceView], d: list[InstanceView]) -> tuple[int, int]:
    state = RouterState(params=RoutingParams(length_buckets=bounds))
    decision = route("length_buckets", req(tokens), p, d, state, np.random.default_rng(0))
    return decision.prefill_id, decision.decode_id


def test_bucket_index_counts_boundaries_at_or_below() -> None:
    assert [bucket_of(t, (1024, 8192)) for t in (1, 1023, 1024, 8191, 8192, 50000)] == [0, 0, 1, 1, 2, 2]


def test_groups_are_contiguous_and_never_empty() -> None:
    six = views("prefill", 6)
    assert [[v.instance_id for v in bucket_group(six, g, 3)] for g in range(3)] == [[0, 1], [2, 3], [4, 5]]
    two = views("prefill", 2)
    assert [[v.instance_id for v in bucket_group(two, g, 3)] for g in range(3)] == [[0], [0], [1]]


def test_short_and_long_prompts_go_to_their_groups() -> None:
    p, d = views("prefill", 4), views("decode", 4)
    assert pick(100, (2048,), p, d) == (0, 0)
    assert pick(5000, (2048,), p, d) == (2, 2)


def test_least_loaded_within_group_ties_by_id() -> None:
    p = views("prefill", 4, loads={2: 900, 3: 100})
    d = views("decode", 4, loads={2: 5, 3: 5})
    assert pick(5000, (2048,), p, d) == (3, 2)


def test_group_without_healthy_instance_falls_back_to_whole_side() -> None:
    p = views("prefill", 4, loads={0: 50, 1: 70}, down=(2, 3))
    d = views("decode", 2)
    assert pick(5000, (2048,), p, d) == (0, 1)


def test_no_boundaries_is_least_loaded() -> None:
    p = views("prefill", 3, loads={0: 9, 1: 3, 2: 3})
    assert pick(10, (), p, []) == (1, -1)


def test_bad_boundaries_name_the_value() -> None:
    with pytest.raises(ValueError, match=r"\[4096, 1024\]"):
        RoutingParams(length_buckets=(4096, 1024))
