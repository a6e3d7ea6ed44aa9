"""Unit tests of the resources: network max-min sharing, KV pool, prefix cache, chunk pages."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pdsim.policy.prefix_cache import PrefixCache
from pdsim.sim.events import SimEnvironment
from pdsim.sim.kv_pool import CACHE_OWNER, KVPool, KVPoolError
from pdsim.sim.network import Network, connected_flows, fill_rates
from pdsim.sim.transfer import chunk_pages_to_send


def _flows(specs: list[tuple[float, tuple[str, ...], float]], caps: dict[str, float]) -> list[tuple[int, float]]:
    """Start flows (start_s, path, bytes); return (flow index, delivery time) in delivery order."""
    env = SimEnvironment()
    net = Network(env)
    res = {name: net.add_resource(name, cap) for name, cap in caps.items()}
    done: list[tuple[int, float]] = []

    def start(i: int, path: tuple[str, ...], nbytes: float):
        net.start_flow(tuple(res[p] for p in path), nbytes, 0.0, lambda: done.append((i, round(env.now, 12))))

    for i, (t, path, nbytes) in enumerate(specs):
        env.timeout(t).callbacks.append(lambda _e, i=i, path=path, nbytes=nbytes: start(i, path, nbytes))
    env.run()
    assert not net.flows
    return done


def test_single_flow_runs_at_capacity() -> None:
    assert _flows([(0.0, ("a",), 100.0)], {"a": 100.0}) == [(0, 1.0)]


def test_late_flow_rates_are_recomputed() -> None:
    # f0 alone for 0.5 s (50 B), then both at 50 B/s: f1 (25 B) ends at 1.0, f0 (25 B left) at 1.25.
    assert _flows([(0.0, ("a",), 100.0), (0.5, ("a",), 25.0)], {"a": 100.0}) == [(1, 1.0), (0, 1.25)]


def test_max_min_gives_leftover_to_the_unconstrained_flow() -> None:
    # f0 uses a (cap 100) and b (cap 30); f1 only a. b limits f0 to 30, f1 gets the other 70.
    done = _flows([(0.0, ("a", "b"), 30.0), (0.0, ("a",), 70.0)], {"a": 100.0, "b": 30.0})
    assert done == [(0, 1.0), (1, 1.0)]


def test_cancel_frees_the_share() -> None:
    env = SimEnvironment()
    net = Network(env)
    a = net.add_resource("a", 10.0)
    hits: list[float] = []
    f0 = net.start_flow((a,), 10.0, 0.0, lambda: hits.append(env.now))
    net.start_flow((a,), 10.0, 0.5, lambda: hits.append(env.now))
    env.timeout(1.0).callbacks.append(lambda _e: net.cancel(f0))
    env.run()
    assert hits == [pytest.approx(2.0)]  # 5 B at 5 B/s by 1.0, then 5 B alone by 1.5, +0.5 latency


def test_refilling_connected_flows_gives_the_global_filling() -> None:
    """Flows start and end on 4 nodes' NICs; after every change the rates (refilled only for
    the flows connected to the change) equal a filling over all flows, float for float."""
    env = SimEnvironment()
    net = Network(env)
    rng = np.random.default_rng([7, 20])
    nodes = [(net.add_resource(f"n{i}:out", 400.0), net.add_resource(f"n{i}:in", 400.0)) for i in range(4)]
    nics = [(net.add_resource(f"i{i}:out", 100.0 + 10 * i), net.add_resource(f"i{i}:in", 120.0), i % 4) for i in range(12)]
    checks, groups = [], []

    def start() -> None:
        a, b = rng.choice(len(nics), size=2, replace=False)
        src, dst = nics[a], nics[b]
        net.start_flow((src[0], nodes[src[2]][0], nodes[dst[2]][1], dst[1]), float(rng.uniform(10, 500)), 0.0, lambda: None)
        rates = {i: f.rate_bytes_per_s for i, f in net.flows.items()}
        fill_rates(dict(net.flows))  # every flow at once
        checks.append(rates == {i: f.rate_bytes_per_s for i, f in net.flows.items()})
        groups.append(len(connected_flows(r for n in nodes for r in n)) - len(net.flows))

    for t in np.sort(rng.uniform(0, 20, size=300)):
        env.timeout(float(t)).callbacks.append(lambda _e: start())
    env.run()
    assert len(checks) == 300 and all(checks)
    assert set(groups) == {0}  # the walk from every resource reaches every flow
    assert net.resources["n0:out"].bytes_moved > 0 and not net.flows


def test_bad_capacity_names_the_resource() -> None:
    with pytest.raises(ValueError, match="nic0"):
        Network(SimEnvironment()).add_resource("nic0", 0.0)


def test_kv_pool_accounting() -> None:
    pool = KVPool("decode:0", capacity_pages=10, page_size_tokens=16)
    pool.allocate(1, 4)
    pool.allocate(CACHE_OWNER, 3)
    pool.move(1, CACHE_OWNER, 2)
    assert (pool.free_pages, pool.pages_of(1), pool.pages_of(CACHE_OWNER)) == (3, 2, 5)
    with pytest.raises(KVPoolError, match="owner 2 asked for 4 pages, 3 free"):
        pool.allocate(2, 4)
    with pytest.raises(KVPoolError, match="holds 2"):
        pool.free(1, 3)
    with pytest.raises(KVPoolError, match=r"requests \[1\] still hold"):
        pool.check_invariants(final=True)
    pool.free(1)
    pool.check_invariants(final=True)


def test_prefix_cache_match_lock_and_lru_eviction() -> None:
    cache = PrefixCache(block_tokens=64, pages_per_block=4)
    assert cache.insert([1, 2, 3], now_s=1.0) == 3
    assert cache.insert([1, 2, 4], now_s=2.0) == 1
    path = cache.match([1, 2, 3, 5], max_blocks=4)
    assert [cache.block_hash(n) for n in path] == [1, 2, 3]
    cache.lock(path, now_s=3.0)
    assert cache.evictable_blocks == 1  # only block 4 is unreferenced
    assert cache.evict(5) == 1  # 4 goes; 1-2-3 are locked
    cache.unlock(path, now_s=4.0)
    assert cache.evict(1) == 1 and cache.num_blocks == 2  # leaf 3 first, never a parent first
    assert [cache.block_hash(n) for n in cache.match([1, 2, 3], 3)] == [1, 2]
    cache.check_invariants(final=True)


def test_prefix_cache_evicts_least_recently_used_leaf() -> None:
    cache = PrefixCache(block_tokens=64, pages_per_block=1)
    cache.insert([1], now_s=1.0)
    cache.insert([2], now_s=2.0)
    cache.lock(cache.match([1], 1), now_s=3.0)
    cache.unlock(cache.match([1], 1), now_s=3.0)  # block 1 now more recent than block 2
    assert cache.evict(1) == 1
    assert cache.match([2], 1) == [] and len(cache.match([1], 1)) == 1


@pytest.mark.parametrize(
    ("prefilled", "input_tokens", "sent", "is_last", "expected"),
    [
        (100, 255, 0, False, 10),  # a non-last chunk sends its full pages
        (205, 255, 10, False, 10),  # ... never the partial page (205 tokens = 20 full pages)
        (255, 255, 20, True, 6),  # the last chunk sends the rest, partial page included
        (5, 255, 0, False, 0),  # less than a page computed: nothing to send yet
    ],
)
def test_chunk_pages_to_send(prefilled: int, input_tokens: int, sent: int, is_last: bool, expected: int) -> None:
    assert chunk_pages_to_send(prefilled, input_tokens, sent, 10, is_last) == expected


def test_flow_finishes_late_in_a_long_run() -> None:
    """Past t=2**14 s a tiny remainder used to take a timer shorter than the clock resolves."""
    env = SimEnvironment(initial_time=16471.9)
    net = Network(env)
    link = net.add_resource("nic", 5e10)
    done: list[float] = []
    # 0.0616 B at 5e10 B/s takes 1.2e-12 s, under half an ulp of `now` (3.6e-12 s): the
    # timer lands on the same float time, nothing moves, and a 1e-12 s threshold never fires.
    nbytes = 0.0616
    assert nbytes / 5e10 < math.ulp(16471.9) / 2
    net.start_flow((link,), nbytes, 0.0, lambda: done.append(env.now))
    env.run(until=16472.0)
    assert len(done) == 1 and done[0] == pytest.approx(16471.9, abs=1e-9)


def test_prefix_cache_smaller_than_one_block_is_an_error() -> None:
    from pdsim.sim.prompt_kv import PromptKV

    with pytest.raises(ValueError, match="'prefix_cache_tokens' = 511 holds no prefix block of 512 tokens"):
        PromptKV("prefill:0", 100, 16, True, 512, 511)
    assert PromptKV("prefill:0", 100, 16, True, 512, 512).cache.capacity_blocks == 1
    assert PromptKV("prefill:0", 100, 16, True, 512, 0).cache.capacity_blocks == 0  # bounded by the pool
