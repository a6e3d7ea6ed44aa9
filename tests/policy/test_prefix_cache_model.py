"""The prefix cache against a naive model of its contract, on random operation sequences.

The model keeps one record per cached prefix and evicts, one block at a time, the unlocked leaf
with the smallest (last use, creation number): the order the cache's heap, its stale entries and
its parent-chain shortcut must reproduce exactly (pdsim's outputs depend on which blocks stay,
kv_tiers' on the order they go). Hashes come from a tiny alphabet so paths branch and share
prefixes; times advance by 0 or 1 so most operations tie on last use.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from pdsim.policy.prefix_cache import PrefixCache

Prefix = tuple[int, ...]


@dataclass
class ModelBlock:
    number: int
    last_s: float
    ref: int = 0


class ModelCache:
    """A block per cached prefix (the hashes from the root to it); no trie, no heap."""

    def __init__(self) -> None:
        self.blocks: dict[Prefix, ModelBlock] = {}
        self.next_number = 1

    def match(self, hashes: Prefix, max_blocks: int) -> int:
        n = 0
        while n < min(max_blocks, len(hashes)) and hashes[:n + 1] in self.blocks:
            n += 1
        return n

    def touch(self, hashes: Prefix, now_s: float, lock: int) -> None:
        for n in range(1, len(hashes) + 1):
            block = self.blocks[hashes[:n]]
            block.ref += lock
            block.last_s = now_s

    def insert(self, hashes: Prefix, now_s: float) -> int:
        new = [hashes[:n] for n in range(1, len(hashes) + 1) if hashes[:n] not in self.blocks]
        for prefix in new:
            self.blocks[prefix] = ModelBlock(self.next_number, now_s)
            self.next_number += 1
        self.touch(hashes, now_s, 0)
        return len(new)

    def evict(self, blocks: int) -> list[int]:
        evicted: list[int] = []
        for _ in range(blocks):
            parents = {prefix[:-1] for prefix in self.blocks}
            leaves = [p for p, b in self.blocks.items() if b.ref == 0 and p not in parents]
            if not leaves:
                break
            victim = min(leaves, key=lambda p: (self.blocks[p].last_s, self.blocks[p].number))
            del self.blocks[victim]
            evicted.append(victim[-1])
        return evicted


def random_prefix(rng: np.random.Generator) -> Prefix:
    return tuple(int(h) for h in rng.integers(0, 3, size=int(rng.integers(1, 7))))


def run_against_model(seed: int, steps: int) -> Counter[str]:
    """Random match/lock/unlock/insert/evict; every answer and count must equal the model's."""
    rng = np.random.default_rng([seed, zlib.crc32(b"prefix-cache-ops")])
    cache, model = PrefixCache(block_tokens=4, pages_per_block=1), ModelCache()
    evicted: list[int] = []
    cache.on_evict = evicted.append
    locked: list[tuple[list[int], Prefix]] = []  # the cache's path and the model's prefix
    seen: Counter[str] = Counter()
    now_s = 0.0
    for _ in range(steps):
        now_s += float(rng.integers(0, 2))
        op = rng.choice(["insert", "lock", "unlock", "evict"], p=[0.4, 0.2, 0.15, 0.25])
        if op == "insert":
            hashes = random_prefix(rng)
            assert cache.insert(list(hashes), now_s) == model.insert(hashes, now_s)
        elif op == "lock":
            hashes = random_prefix(rng)
            path = cache.match(hashes, len(hashes))
            assert len(path) == model.match(hashes, len(hashes))
            assert [cache.block_hash(b) for b in path] == list(hashes[:len(path)])
            cache.lock(path, now_s)
            model.touch(hashes[:len(path)], now_s, +1)
            locked.append((path, hashes[:len(path)]))
        elif op == "unlock" and locked:
            path, prefix = locked.pop(int(rng.integers(0, len(locked))))
            cache.unlock(path, now_s)
            model.touch(prefix, now_s, -1)
        elif op == "evict":
            blocks = int(rng.integers(1, 9))
            evicted.clear()
            assert cache.evict(blocks) == len(evicted)
            assert evicted == model.evict(blocks)  # the same blocks, in the same order
            seen["evicted"] += len(evicted)
            seen["evict_short"] += len(evicted) < blocks
        seen[str(op)] += 1
        assert cache.num_blocks == len(model.blocks)
        assert cache.evictable_blocks == sum(b.ref == 0 for b in model.blocks.values())
        cache.check_invariants()
    return seen


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cache_matches_the_model_on_random_operations(seed: int) -> None:
    seen = run_against_model(seed, steps=3000)
    # not vacuous: thousands of blocks went, some calls found too few to evict
    assert seen["evicted"] > 1500 and seen["evict_short"] > 300 and seen["unlock"] > 300


def test_evicts_leaf_chains_and_reuses_their_slots() -> None:
    cache = PrefixCache(block_tokens=4, pages_per_block=2)
    evicted: list[int] = []
    cache.on_evict = evicted.append
    assert cache.insert([1, 2, 3, 4], now_s=1.0) == 4
    assert cache.insert([1, 2, 5], now_s=2.0) == 1  # 1 and 2 used again at 2 s
    assert cache.evict(2) == 2 and evicted == [4, 3]  # the oldest leaf, then its parent
    assert cache.num_blocks == 3 and cache.evictable_pages == 6
    assert cache.insert([1, 2, 5, 6, 7, 8], now_s=3.0) == 3  # a chain of 3 below 5, in freed slots
    path = cache.match([1, 2, 5, 6, 7, 8, 9], max_blocks=6)
    assert [cache.block_hash(b) for b in path] == [1, 2, 5, 6, 7, 8]
    cache.lock(path[:4], now_s=4.0)
    assert cache.evict(10) == 2 and evicted == [4, 3, 8, 7]  # 6 and above are locked
    cache.unlock(path[:4], now_s=5.0)
    assert cache.evict(10) == 4 and evicted == [4, 3, 8, 7, 6, 5, 2, 1]
    assert cache.num_blocks == 0 and cache.evictable_blocks == 0
    cache.check_invariants(final=True)


def test_parent_used_later_waits_for_older_leaves() -> None:
    cache = PrefixCache(block_tokens=4, pages_per_block=1)
    evicted: list[int] = []
    cache.on_evict = evicted.append
    cache.insert([1, 2], now_s=1.0)
    cache.insert([3], now_s=2.0)
    cache.lock(cache.match([1], 1), now_s=3.0)
    cache.unlock(cache.match([1], 1), now_s=3.0)  # 1 used at 3 s, its child 2 at 1 s
    assert cache.evict(2) == 2 and evicted == [2, 3]  # 1 (3 s) comes after 3 (2 s)
    assert cache.evict(1) == 1 and evicted == [2, 3, 1]
    cache.check_invariants(final=True)


def test_one_hash_under_two_parents_is_two_blocks() -> None:
    # hashes name whole prefixes, so one parent per hash is the rule; a workload that breaks it
    # still gets one block per (parent, hash), whichever of the two goes first
    cache = PrefixCache(block_tokens=4, pages_per_block=1)
    evicted: list[int] = []
    cache.on_evict = evicted.append
    assert cache.insert([1, 7], now_s=1.0) == 2
    assert cache.insert([2, 7], now_s=2.0) == 2  # 7 again, below 2
    assert cache.insert([7], now_s=3.0) == 1  # and below the root
    for prefix in ([1, 7], [2, 7], [7]):
        path = cache.match(prefix, 2)
        assert [cache.block_hash(b) for b in path] == prefix
    assert len({cache.match(p, 2)[-1] for p in ([1, 7], [2, 7], [7])}) == 3
    assert cache.evict(1) == 1 and evicted == [7]  # [1, 7]: the first of the three 7s
    assert [len(cache.match(p, 2)) for p in ([1, 7], [2, 7], [7])] == [1, 2, 1]
    assert cache.insert([1, 7], now_s=4.0) == 1  # the hash is free again
    assert cache.evict(2) == 2 and evicted == [7, 7, 2]  # [2, 7] (2 s), then its parent 2
    assert sorted(cache.block_hashes()) == [1, 7, 7]
    assert [len(cache.match(p, 2)) for p in ([1, 7], [2, 7], [7])] == [2, 0, 1]
    cache.check_invariants()
