"""Prefix (radix) cache over prompt block hashes, on prefill and colocated instances.

A trie keyed by block hash: the path from the root spells a prompt's leading blocks (each of
`block_tokens` tokens, `pages_per_block` KV pages). Requests lock the path they matched
(reference counts) while they use it; unreferenced blocks are evicted least recently used first,
leaves before their parents. Only full blocks are cached. The pages of cached blocks are owned by
the pool's CACHE_OWNER; the caller moves pages in and frees the pages `evict` reports.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(slots=True, eq=False)
class BlockNode:
    node_id: int
    block_hash: int
    parent: BlockNode | None
    children: dict[int, BlockNode] = field(default_factory=dict)
    ref: int = 0
    last_access_s: float = 0.0


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
        node, created = self.root, 0
        for h in hash_ids:
            child = node.children.get(h)
            if child is None:
                child = BlockNode(node_id=self._next_id, block_hash=h, parent=node)
                self._next_id += 1
                node.children[h] = child
                self.num_blocks += 1
                self.evictable_blocks += 1
                created += 1
            child.last_access_s = now_s
            node = child
        if node is not self.root and node.ref == 0 and not node.children:
            heapq.heappush(self._heap, (now_s, node.node_id, node))
        return created

    def evict(self, blocks: int) -> int:
        """Evict up to `blocks` unreferenced blocks, LRU leaves first; returns blocks evicted."""
        evicted = 0
        while evicted < blocks and self._heap:
            t, _, node = heapq.heappop(self._heap)
            if node.ref or node.children or node.parent is None or t != node.last_access_s:
                continue  # stale entry: re-locked, grew children, already evicted, or touched
            parent = node.parent
            del parent.children[node.block_hash]
            node.parent = None
            self.num_blocks -= 1
            self.evictable_blocks -= 1
            evicted += 1
            if parent is not self.root and parent.ref == 0 and not parent.children:
                heapq.heappush(self._heap, (parent.last_access_s, parent.node_id, parent))
        return evicted

    def over_capacity_blocks(self) -> int:
        if self.capacity_blocks <= 0:
            return 0
        return max(0, self.num_blocks - self.capacity_blocks)

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
