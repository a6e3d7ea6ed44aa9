"""KV-centric (Conductor-style) routing over per-tier cached-prefix lengths."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pdsim.policy import InstanceView, RequestView, RouterState, RoutingParams, route
from pdsim.policy.kv_centric import TIER_LOAD_COST, effective_hit_tokens

REQ = RequestView(request_id=0, input_tokens=4000, output_tokens=10, hash_ids=(1, 2, 3, 4, 5, 6, 7))


def prefill(i: int, queued: int, tiers: tuple[int, ...] = (), healthy: bool = True) -> InstanceView:
    return InstanceView(instance_id=i, role="prefill", queued_tokens=queued, tier_hit_tokens=tiers, healthy=healthy)


def choose(p: list[InstanceView], d: list[InstanceView] | None = None, weight: float = 1.0) -> tuple[int, int]:
    state = RouterState(params=RoutingParams(cache_weight=weight, block_tokens=512))
    decision = route("kv_centric", REQ, p, d or [], state, np.random.default_rng(0))
    return decision.prefill_id, decision.decode_id


def test_effective_hit_discounts_slower_tiers() -> None:
    view = prefill(0, 0, (1024, 512, 0, 512))
    expected = 1024 + 512 * (1 - TIER_LOAD_COST[1]) + 512 * (1 - TIER_LOAD_COST[3])
    assert effective_hit_tokens(REQ, view, 512) == pytest.approx(expected)
    # no tier summary: the GPU summary (cached_blocks) is the only tier
    gpu_only = InstanceView(instance_id=0, role="prefill", cached_blocks=frozenset({1, 2}))
    assert effective_hit_tokens(REQ, gpu_only, 512) == 1024


def test_prefers_the_instance_holding_the_prefix() -> None:
    p = [prefill(0, 500), prefill(1, 500, (2048, 0, 0, 0)), prefill(2, 500, (0, 1024, 0, 0))]
    assert choose(p) == (1, -1)


def test_gpu_prefix_beats_the_same_prefix_in_host() -> None:
    p = [prefill(0, 500, (0, 2048, 0, 0)), prefill(1, 500, (2048, 0, 0, 0))]
    assert choose(p) == (1, -1)


def test_overloaded_holder_loses_to_an_idle_instance() -> None:
    hit = 2048
    p = [prefill(0, hit + 100, (hit, 0, 0, 0)), prefill(1, 0)]  # queue longer than the saving
    assert choose(p) == (1, -1)
    p = [prefill(0, hit - 100, (hit, 0, 0, 0)), prefill(1, 0)]  # saving outweighs the queue
    assert choose(p) == (0, -1)


def test_store_hit_is_seen_everywhere_so_load_decides() -> None:
    p = [prefill(0, 800, (0, 0, 0, 2048)), prefill(1, 300, (0, 0, 0, 2048))]
    assert choose(p) == (1, -1)


def test_unhealthy_holder_is_skipped_and_decode_is_least_loaded() -> None:
    p = [prefill(0, 0, (4096, 0, 0, 0), healthy=False), prefill(1, 10)]
    d = [InstanceView(instance_id=0, role="decode", queued_tokens=50),
         InstanceView(instance_id=1, role="decode", queued_tokens=5)]
    assert choose(p, d) == (1, 1)


def test_weight_zero_is_least_loaded_with_id_tie_break() -> None:
    p = [prefill(1, 100, (4096, 0, 0, 0)), prefill(0, 100)]
    assert choose(p, weight=0.0) == (0, -1)
    assert choose([replace(v, queued_tokens=0) for v in p], weight=0.0) == (0, -1)
