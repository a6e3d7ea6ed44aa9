"""The radix prefix cache of a prefill or colocated engine (SGLang's RadixCache, page granular).

One KV page is one cache block, named by a chained hash of the prompt's tokens up to the end of
that page (`block_hash_ids`: Mooncake's hash_ids semantics, the hashes KV events publish and the
router looks up). The trie, its locks and its LRU order are pdsim's (`pdsim.policy.prefix_cache`),
so both executors match, lock and evict alike; this module adds the real page of each block.

A request's life with the cache:

- `match`: the longest cached run of its leading pages (`matchable_blocks`: whole pages, never
  the whole prompt, so its last token is computed and samples the first output token); nothing
  is locked, the answer is re-read each step while it waits.
- `lock`: when it starts, the matched blocks are locked (reference counted) and their pages head
  its page table; it computes only the rest, into pages of its own.
- `allocate`: pages for its chunks; when the free list is short, unlocked blocks are evicted
  least recently used first (leaves before parents) and their pages freed. A locked block - one
  some live request's page table holds - is never evicted.
- `release`: when it is done (or fails, retracts), its blocks are unlocked; if its whole prompt
  was computed, its full prompt pages join the cache (`cacheable_blocks`), pages whose block was
  cached meanwhile by another request are freed, and so is everything else it owned.

Cache changes go to an optional `BlockEvents` sink (KV events: stored on insert, removed on
eviction). Decode instances have no cache: SGLang disables it there (seed 001 §5.3), every
prompt page arrives by transfer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pdreal.kv.allocator import PageAllocator
from pdsim.policy.prefix_cache import BlockNode, PrefixCache, cacheable_blocks, matchable_blocks


def block_hash_ids(token_ids: Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """Chained 63-bit hashes of the prompt's full blocks (each hash covers the whole prefix)."""
    out, prev = [], b""
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        block = ",".join(map(str, token_ids[start:start + block_tokens])).encode()
        prev = hashlib.blake2b(prev + block, digest_size=8).digest()
        out.append(int.from_bytes(prev, "big") >> 1)
    return tuple(out)


class BlockEvents(Protocol):
    """Where cache changes go (pdreal.kv_events.RequestBlockTracker publishes them)."""

    def cache_stored(self, block_hashes: Sequence[int]) -> None: ...

    def cache_removed(self, block_hashes: Sequence[int]) -> None: ...


@dataclass
class CachedPrefix:
    """A request's hold on the cache: its locked blocks (their pages head its page table)."""

    path: list[BlockNode] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)


class RadixCache:
    """Page-granular prefix cache over an engine's page allocator."""

    def __init__(self, allocator: PageAllocator, page_size_tokens: int) -> None:
        self.allocator = allocator
        self.page_size_tokens = page_size_tokens
        self.tree = PrefixCache(page_size_tokens, 1)
        self.tree.on_evict = self._evicted
        self.events: BlockEvents | None = None
        self._page_of: dict[int, int] = {}  # block hash -> its page (chained hashes name one block)
        self._evicted_hashes: list[int] = []
        self.evicted_blocks = 0

    @property
    def cached_pages(self) -> int:
        return self.tree.num_blocks

    @property
    def evictable_pages(self) -> int:
        return self.tree.evictable_pages

    @property
    def free_pages(self) -> int:
        """Pages an allocation may take: free ones plus evictable cache blocks."""
        return self.allocator.num_free + self.tree.evictable_pages

    def hashes(self, token_ids: Sequence[int]) -> tuple[int, ...]:
        return block_hash_ids(token_ids, self.page_size_tokens)

    def match(self, block_hashes: Sequence[int], prompt_tokens: int) -> list[BlockNode]:
        """The cached leading blocks of a prompt of `prompt_tokens` (nothing locked)."""
        return self.tree.match(block_hashes, matchable_blocks(prompt_tokens, self.page_size_tokens))

    def lock(self, path: list[BlockNode], now_s: float) -> CachedPrefix:
        self.tree.lock(path, now_s)
        page_of, block_hash = self._page_of, self.tree.block_hash
        return CachedPrefix(list(path), [page_of[block_hash(node)] for node in path])

    def allocate(self, num_pages: int) -> list[int] | None:
        """`num_pages` pages, evicting unlocked blocks when short; None if they do not fit."""
        short = num_pages - self.allocator.num_free
        if short > 0:
            self.tree.evict(short)
            self._free_evicted()
        if num_pages > self.allocator.num_free:
            return None
        return self.allocator.allocate(num_pages)

    def release(self, prefix: CachedPrefix, pages: list[int], block_hashes: Sequence[int], input_tokens: int,
                complete: bool, now_s: float) -> None:
        """A request lets go of `pages` (its page table: `prefix.pages`, then its own pages).

        complete: its prompt's KV is all computed, so its full prompt pages join the cache."""
        self.tree.unlock(prefix.path, now_s)
        own = pages[len(prefix.pages):]
        if not complete:
            self.allocator.free(own)
            return
        n_full = cacheable_blocks(input_tokens, self.page_size_tokens, len(block_hashes))
        created = self.tree.insert(block_hashes[:n_full], now_s)
        first_new = n_full - created  # blocks [first_new, n_full) were not cached: their pages join
        for i in range(first_new, n_full):
            self._page_of[block_hashes[i]] = pages[i]
        keep = set(range(max(first_new, len(prefix.pages)), n_full))
        self.allocator.free([p for i, p in enumerate(pages) if i >= len(prefix.pages) and i not in keep])
        if created and self.events is not None:
            self.events.cache_stored(block_hashes[first_new:n_full])

    def _evicted(self, block_hash: int) -> None:
        self._evicted_hashes.append(block_hash)

    def _free_evicted(self) -> None:
        hashes, self._evicted_hashes = self._evicted_hashes, []
        if not hashes:
            return
        self.allocator.free([self._page_of.pop(h) for h in hashes])
        self.evicted_blocks += len(hashes)
        if self.events is not None:
            self.events.cache_removed(hashes)

    def check_invariants(self, live_prefixes: Sequence[CachedPrefix], final: bool = False) -> None:
        """Counts agree; every block's page is allocated and no request owns it; every block a
        live request holds is locked (so eviction cannot have freed a page in use)."""
        try:
            self.tree.check_invariants(final)
        except RuntimeError as exc:  # the engines' invariant checks raise AssertionError
            raise AssertionError(str(exc)) from exc
        if len(self._page_of) != self.tree.num_blocks:
            raise AssertionError(f"radix cache: {len(self._page_of)} pages for {self.tree.num_blocks} blocks")
        free = {p for start, n in self.allocator.free_runs() for p in range(start, start + n)}
        cached = set(self._page_of.values())
        if cached & free:
            raise AssertionError(f"radix cache: pages {sorted(cached & free)[:8]} are cached and free")
        for prefix in live_prefixes:
            for node, page in zip(prefix.path, prefix.pages, strict=True):
                if self.tree.ref_count(node) <= 0 or self._page_of.get(self.tree.block_hash(node)) != page:
                    raise AssertionError(f"radix cache: page {page} in use but its block is not locked/cached")
