"""Prefix (radix) cache over prompt block hashes, on prefill and colocated instances.

A trie keyed by block hash: the path from the root spells a prompt's leading blocks (each of
`block_tokens` tokens, `pages_per_block` KV pages). Requests lock the path they matched
(reference counts) while they use it; unreferenced blocks are evicted least recently used first,
leaves before their parents. Only full blocks are cached. The pages of cached blocks are owned by
the pool's CACHE_OWNER; the caller moves pages in and frees the pages `evict` reports.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence


class BlockNode:
    """One cached block: its hash, trie links, lock count and last use (a plain slotted class:
    the cache creates one per new block, so construction cost matters)."""

    __slots__ = ("node_id", "block_hash", "parent", "children", "ref", "last_access_s")

    def __init__(self, node_id: int, block_hash: int, parent: BlockNode | None) -> None:
        self.node_id = node_id
        self.block_hash = block_hash
        self.parent = parent
        self.children: dict[int, BlockNode] = {}
        self.ref = 0
        self.last_access_s = 0.0


class PrefixCache:
    """Block-hash trie with LRU eviction of unreferenced leaves.

    capacity_blocks: 0 = bounded only by the KV pool (the caller evicts on demand).
    """

    def __init__(self, block_tokens: int, pages_per_block: int, capacity_blocks: int = 0) -> None:
        self.block_tokens = block_tokens
        self.pages_per_block = pages_per_block
        self.capacity_blocks = capacity_blocks
        self.root = BlockNode(node_id=0, block_hash=0, parent=None)
        self.num_blocks = 0
        self.evictable_blocks = 0
        self._next_id = 1
        self._heap: list[tuple[float, int, BlockNode]] = []
        self.on_evict: Callable[[int], None] | None = None  # told each evicted block hash (kv_tiers)

    @property
    def evictable_pages(self) -> int:
        return self.evictable_blocks * self.pages_per_block

    @property
    def cached_pages(self) -> int:
        return self.num_blocks * self.pages_per_block

    def match(self, hash_ids: Sequence[int], max_blocks: int) -> list[BlockNode]:
        """The longest cached path for the first `max_blocks` hashes (nothing is locked)."""
        node, path = self.root, []
        for h in hash_ids[:max_blocks]:
            child = node.children.get(h)
            if child is None:
                break
            path.append(child)
            node = child
        return path

    def lock(self, path: Sequence[BlockNode], now_s: float) -> None:
        for node in path:
            if node.ref == 0:
                self.evictable_blocks -= 1
            node.ref += 1
            node.last_access_s = now_s

    def unlock(self, path: Sequence[BlockNode], now_s: float) -> None:
        for node in path:
            if node.ref <= 0:
                raise RuntimeError(f"prefix cache: unlock of unreferenced block {node.block_hash}")
            node.ref -= 1
            node.last_access_s = now_s
            if node.ref == 0:
                self.evictable_blocks += 1
                if not node.children:
                    heapq.heappush(self._heap, (now_s, node.node_id, node))

    def insert(self, hash_ids: Sequence[int], now_s: float) -> int:
        """Add the blocks of `hash_ids` not yet cached (unreferenced); returns how many are new."""
        node, created, next_id = self.root, 0, self._next_id
        for h in hash_ids:
            children = node.children
            child = children.get(h)
            if child is None:
                child = children[h] = BlockNode(next_id, h, node)
                next_id += 1
                created += 1
            child.last_access_s = now_s
            node = child
        self._next_id = next_id
        self.num_blocks += created
        self.evictable_blocks += created
        if node is not self.root and node.ref == 0 and not node.children:
            heapq.heappush(self._heap, (now_s, node.node_id, node))
        return created

    def evict(self, blocks: int) -> int:
        """Evict up to `blocks` unreferenced blocks, LRU leaves first; returns blocks evicted."""
        heap, root, pop, push, on_evict = self._heap, self.root, heapq.heappop, heapq.heappush, self.on_evict
        evicted = 0
        while evicted < blocks and heap:
            t, _, node = pop(heap)
            parent = node.parent
            if node.ref or node.children or parent is None or t != node.last_access_s:
                continue  # stale entry: re-locked, grew children, already evicted, or touched
            del parent.children[node.block_hash]
            node.parent = None
            evicted += 1
            if on_evict is not None:
                on_evict(node.block_hash)
            if parent is not root and parent.ref == 0 and not parent.children:
                push(heap, (parent.last_access_s, parent.node_id, parent))
        self.num_blocks -= evicted
        self.evictable_blocks -= evicted
        return evicted

    def over_capacity_blocks(self) -> int:
        if self.capacity_blocks <= 0:
            return 0
        return max(0, self.num_blocks - self.capacity_blocks)

    def block_hashes(self) -> list[int]:
        """Every cached block's hash (a trie walk; for invariant checks)."""
        out, stack = [], list(self.root.children.values())
        while stack:
            node = stack.pop()
            out.append(node.block_hash)
            stack.extend(node.children.values())
        return out

    def check_invariants(self, final: bool = False) -> None:
        count, free, stack = 0, 0, list(self.root.children.values())
        while stack:
            node = stack.pop()
            count += 1
            free += node.ref == 0
            if node.ref < 0 or (final and node.ref):
                raise RuntimeError(f"prefix cache: block {node.block_hash} has ref {node.ref}")
            stack.extend(node.children.values())
        if count != self.num_blocks or free != self.evictable_blocks:
            raise RuntimeError(
                f"prefix cache: counted {count} blocks/{free} free, recorded {self.num_blocks}/{self.evictable_blocks}"
            )
