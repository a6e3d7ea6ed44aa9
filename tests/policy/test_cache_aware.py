"""Cache-aware routing: longest prefix hit on the cache summary, weighed against load."""

from __future__ import annotations

import numpy as np
import pytest

from pdsim.policy import InstanceView, RequestView, RouterState, RoutingParams, route
from pdsim.policy.request_aware import prefix_hit_tokens

REQ = RequestView(request_id=0, input_tokens=2000, output_tokens=10, hash_ids=(11, 12, 13, 14))


def prefill(i: int, queued: int, blocks: tuple[int, ...] = ()) -> InstanceView:
    return InstanceView(instance_id=i, role="prefill", queued_tokens=queued, cached_blocks=frozenset(blocks))


def decode(i: int, queued: int) -> InstanceView:
    return InstanceView(instance_id=i, role="decode", queued_tokens=queued)


def choose(params: RoutingParams, p: list[InstanceView], d: list[InstanceView] | None = None) -> tuple[int, int]:
    decision = route("cache_aware", REQ, p, d or [], RouterState(params=params), np.random.default_rng(0))
    return decision.prefill_id, decision.decode_id


def test_hit_counts_leading_blocks_only_and_caps_at_prompt() -> None:
    assert prefix_hit_tokens(REQ, prefill(0, 0, (11, 12, 14)), 512) == 1024  # stops at the miss on 13
    assert prefix_hit_tokens(REQ, prefill(0, 0, (12, 13, 14)), 512) == 0
    assert prefix_hit_tokens(REQ, prefill(0, 0, (11, 12, 13, 14)), 512) == 2000


def test_longest_prefix_wins_at_equal_load() -> None:
    p = [prefill(0, 100, (11,)), prefill(1, 100, (11, 12, 13)), prefill(2, 100)]
    assert choose(RoutingParams(block_tokens=512), p) == (1, -1)


def test_load_outweighs_a_small_hit() -> None:
    # one 512-token block of hit does not pay for 3000 extra queued tokens at weight 1
    p = [prefill(0, 3100, (11,)), prefill(1, 100)]
    assert choose(RoutingParams(cache_weight=1.0, block_tokens=512), p) == (1, -1)
    # ... but does when hits weigh 10x
    assert choose(RoutingParams(cache_weight=10.0, block_tokens=512), p) == (0, -1)


def test_weight_zero_is_least_loaded_and_ties_break_by_id() -> None:
    p = [prefill(0, 50, (11, 12)), prefill(1, 10), prefill(2, 10)]
    assert choose(RoutingParams(cache_weight=0.0), p) == (1, -1)
    equal = [prefill(2, 10, (11,)), prefill(1, 10, (11,))]
    assert choose(RoutingParams(), equal) == (1, -1)


def test_decode_side_is_least_loaded_and_unhealthy_skipped() -> None:
    p = [InstanceView(instance_id=0, role="prefill", cached_blocks=frozenset({11, 12}), healthy=False),
         prefill(1, 0)]
    d = [decode(0, 500), decode(1, 20), decode(2, 20)]
    assert choose(RoutingParams(), p, d) == (1, 1)


def test_bad_weight_names_the_value() -> None:
    with pytest.raises(ValueError, match="-1"):
        RoutingParams(cache_weight=-1)
