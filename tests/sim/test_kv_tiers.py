"""KV tiers: LRU tiers, demotion, load-or-recompute, store reads, accounting, invariants.

Tiny constant-cost scenario (simkit): 1000 KV bytes/token, PCIe 1 GB/s and NIC 1 GB/s, so a
100-token block loads in 1e-4 s; prefill costs 0.1 s + per_token * new tokens. Break-even:
per_token = 1e-6 s (loading 1 token = 1e-6 s).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from simkit import make_config, make_requests, synthetic

from pdsim.config import KVTiersConfig
from pdsim.perf.linear import LinearModel
from pdsim.policy.kv_centric import TIER_HOST, decide_load, mooncake_min_bandwidth
from pdsim.sim import simulate
from pdsim.sim.kv_tiers import InstanceTiers, TierLRU
from pdsim.sim.kv_tiers_setup import kv_tier_summary

HASHES = [1, 2, 3, 4]


def tiers_config(per_token_s: float = 0.001, prefill: int = 1, routing: str = "round_robin", **tiers) -> object:
    cfg = make_config(
        cluster=dict(prefill=prefill, prefix_cache=True, prefix_cache_tokens=200),
        perf=dict(prefill_per_token_s=per_token_s), policy=dict(routing=routing),
    )
    return replace(cfg, kv_tiers=KVTiersConfig(**tiers))


def two_requests(gap_s: float = 5.0) -> object:
    """A then B with the same 4-block prefix (401 tokens: the last token is always computed)."""
    return make_requests([(0.0, 401, 1), (gap_s, 401, 1)], [HASHES, HASHES], block_tokens=100)


def row(result, request_id: int):
    return result.trace.set_index("request_id").loc[request_id]


def test_tier_lru_evicts_oldest_and_fifo_ignores_hits() -> None:
    lru, fifo = TierLRU("lru", 2), TierLRU("fifo", 2, refresh_on_hit=False)
    for tier in (lru, fifo):
        assert tier.put(1) == [] and tier.put(2) == []
        tier.touch(1)
    assert lru.put(3) == [2] and list(lru.blocks) == [1, 3]
    assert fifo.put(3) == [1] and list(fifo.blocks) == [2, 3]
    assert lru.discard(1) and not lru.discard(1)


def test_gpu_eviction_demotes_to_host_and_host_hit_is_loaded() -> None:
    result = simulate(tiers_config(host_tokens=1000), two_requests())
    a, b = row(result, 0), row(result, 1)
    assert (a.cached_prefix_tokens, a.cached_tokens_host) == (0, 0)
    # GPU keeps 2 blocks (prefix_cache_tokens=200): A's blocks 3, 4 were demoted to host
    assert (b.cached_tokens_gpu, b.cached_tokens_host, b.cached_tokens_store) == (200, 200, 0)
    assert b.cached_prefix_tokens == 400
    assert b.kv_load_s == pytest.approx(200 * 1000 / 1e9)
    stats = result.instance_stats["prefill:0"]
    assert stats["kv_hit_tokens_gpu"] == 200 and stats["kv_hit_tokens_host"] == 200
    assert stats["kv_prompt_tokens"] == 802
    # demoted twice (after A, and after B re-inserted them): 2 x 2 blocks x 100 tokens x 1000 B
    assert stats["kv_demote_bytes_host"] == pytest.approx(4e5)
    assert stats["kv_load_bytes_host"] == pytest.approx(2e5)
    summary = kv_tier_summary(result.trace, result.instance_stats)
    assert summary["hit_ratio_host"] == pytest.approx(200 / 802)
    assert summary["hit_ratio"] == pytest.approx(400 / 802)


def test_host_hit_costs_exactly_the_load_time_without_overlap() -> None:
    base = simulate(tiers_config(host_tokens=1000, overlap_load=True), two_requests())
    serial = simulate(tiers_config(host_tokens=1000, overlap_load=False), two_requests())
    compute_s = 0.1 + 0.001 * 1  # one new token
    for result, extra_s in ((base, 0.0), (serial, 2e-4)):
        b = row(result, 1)
        assert b.prefill_end_s - b.prefill_start_s == pytest.approx(compute_s + extra_s, abs=1e-12)


@pytest.mark.parametrize(("per_token_s", "loads"), [(2e-6, True), (0.5e-6, False)])
def test_load_or_recompute_at_both_sides_of_break_even(per_token_s: float, loads: bool) -> None:
    result = simulate(tiers_config(per_token_s, host_tokens=1000), two_requests())
    b = row(result, 1)
    assert b.cached_tokens_host == (200 if loads else 0)
    assert b.kv_load_skipped_tokens == (0 if loads else 200)
    assert b.cached_prefix_tokens == (400 if loads else 200)
    stats = result.instance_stats["prefill:0"]
    assert (stats["kv_loads_taken"], stats["kv_loads_rejected"]) == ((1, 0) if loads else (0, 1))


def test_decision_rule_and_mooncake_bound() -> None:
    assert decide_load(0.9, 1.0) and not decide_load(1.0, 1.0) and not decide_load(1.1, 1.0)
    for per_token_s, take in ((1.01e-6, True), (0.99e-6, False)):  # break-even: 1e-6 s/token
        latency = LinearModel(prefill_base_s=0.1, prefill_per_token_s=per_token_s)
        tiers = InstanceTiers("p", KVTiersConfig(host_tokens=1000), 100, 1000.0, 1e9, latency, None)
        tiers.host.put(3)
        plan = tiers.plan(401, HASHES, 2, 4)
        (decision,) = plan.decisions
        assert decision.tier == TIER_HOST and decision.load_s == pytest.approx(1e-4)
        assert decision.recompute_s == pytest.approx(100 * per_token_s)
        assert plan.tiers == ((TIER_HOST,) if take else ())
    # Mooncake's criterion: a = 0 leaves 2·d·s / (gqa·b·d²) = 2·s / (gqa·b·d)
    assert mooncake_min_bandwidth(4096, 2, 4, 1000, 0.0, 1e-15) == pytest.approx(2 * 2 / (4 * 1e-15 * 4096))


def test_global_store_raises_hit_ratio_across_instances() -> None:
    local = simulate(tiers_config(prefill=2, host_tokens=1000), two_requests())
    shared = simulate(tiers_config(prefill=2, host_tokens=1000, store_tokens=10_000), two_requests())
    assert row(local, 1).prefill_instance == 1 and row(local, 1).cached_prefix_tokens == 0
    b = row(shared, 1)
    assert (b.prefill_instance, b.cached_tokens_store, b.cached_prefix_tokens) == (1, 400, 400)
    assert b.kv_load_s == pytest.approx(400 * 1000 / 1e9)
    assert shared.link_stats["prefill:1:nic_in"]["bytes_moved"] == pytest.approx(4e5)
    assert shared.instance_stats["prefill:0"]["kv_store_write_bytes"] == pytest.approx(4e5)


def test_exclusive_tiers_invariant_detects_double_counting() -> None:
    tiers = InstanceTiers("p", KVTiersConfig(host_tokens=1000), 100, 1000.0, 1e9,
                          LinearModel("lin"), None)
    tiers.host.put(7)
    tiers.check_invariants([1, 2])
    with pytest.raises(RuntimeError, match="higher local tier"):
        tiers.check_invariants([7])


@pytest.mark.parametrize("routing", ["kv_centric", "cache_aware", "round_robin"])
def test_invariants_hold_on_a_synthetic_run_with_every_tier(routing: str) -> None:
    cfg = tiers_config(prefill=3, routing=routing, host_tokens=320, ssd_tokens=640, store_tokens=2048,
                       store_write="evict", hot_block_hits=2)
    cfg = replace(cfg, cluster=replace(cfg.cluster, prefix_cache_tokens=128, decode=2, page_size_tokens=8))
    result = simulate(cfg, synthetic(150, seed=3))  # simulate() runs check_invariants
    trace = result.trace
    assert (trace.status == "finished").all()
    parts = trace[["cached_tokens_gpu", "cached_tokens_host", "cached_tokens_ssd", "cached_tokens_store"]]
    assert (parts.sum(axis=1) == trace.cached_prefix_tokens).all()
    assert trace.cached_tokens_host.sum() + trace.cached_tokens_ssd.sum() + trace.cached_tokens_store.sum() > 0
