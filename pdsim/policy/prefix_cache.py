"""Prefix (radix) cache over prompt block hashes, on prefill and colocated instances: one
structure for both executors (pdsim's PromptKV and pdreal's RadixCache wrap it).

A trie keyed by block hash: the path from the root spells a prompt's leading blocks (each of
`block_tokens` tokens, `pages_per_block` KV pages). Requests lock the path they matched
(reference counts) while they use it; unreferenced blocks are evicted least recently used first,
leaves before their parents. Only full blocks are cached. The pages of cached blocks are owned by
the pool's CACHE_OWNER; the caller moves pages in and frees the pages `evict` reports.

Array-backed: a block is an int slot into parallel arrays (its hash, parent, lock count, last
use, creation number, child count, chain successor); no object per block. The arrays are
librt `vec`s of 64-bit ints and floats (mypyc's unboxed arrays: compiled, a read or write is a
memory access, not a Python int or float object; block hashes must fit a signed 64-bit int).
The blocks an insert adds form one chain below the last cached one (`_add_chain`): each but the
first is found from its parent (`_next`), with no dict entry. A chain's first block is found by
its hash: one dict maps a hash to the slot of the first parent's child with it (hashes name
whole prefixes, so one parent per hash is the rule), a second dict maps (parent slot, hash) for
any other parent's. Slots of evicted blocks are reused. The LRU order is a heap of (last use,
creation number, slot) (lru_heap.py) with stale entries skipped: creation numbers never repeat, so ties break
exactly as they did when each block was an object numbered at creation.
Eviction takes, one block at a time, the unlocked leaf with the smallest (last use, creation
number) (tests/policy/test_prefix_cache_model.py holds the cache to that rule).

The two rules on which blocks a prompt may use and give back (`matchable_blocks`,
`cacheable_blocks`) are module functions: pdsim and pdreal both call them. Block hashes follow
Mooncake's hash_ids: hash i stands for the whole prefix up to and including block i.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from librt.vecs import extend, vec
from mypy_extensions import i64

from pdsim.policy.lru_heap import LruHeap

BlockNode = int  # a cached block is its slot in the cache's arrays (paths are lists of slots)
# (Final: the compiled core inlines them; a plain module global is a dict lookup at every use)
ROOT: Final = 0
_DEAD: Final = -1  # creation number of a free slot; no slot
_IN_CHILD: Final = 0  # where a block is found: _child, _other, its parent's _next
_IN_OTHER: Final = 1
_IN_CHAIN: Final = 2


def matchable_blocks(prompt_tokens: int, block_tokens: int) -> int:
    """Leading blocks of a prompt a cache hit may cover: whole blocks, never the whole prompt
    (its last token is always computed: its forward samples the first output token)."""
    return max(0, prompt_tokens - 1) // block_tokens


def cacheable_blocks(input_tokens: int, block_tokens: int, num_hashes: int) -> int:
    """Blocks a finished prompt gives to the cache: its full blocks that have a hash."""
    return min(input_tokens // block_tokens, num_hashes)


class PrefixCache:
    """Block-hash trie with LRU eviction of unreferenced leaves.

    capacity_blocks: 0 = bounded only by the KV pool (the caller evicts on demand).
    """

    def __init__(self, block_tokens: int, pages_per_block: int, capacity_blocks: int = 0) -> None:
        self.block_tokens = block_tokens
        self.pages_per_block = pages_per_block
        self.capacity_blocks = capacity_blocks
        self.num_blocks = 0
        self.evictable_blocks = 0
        self.on_evict: Callable[[int], None] | None = None  # told each evicted block hash (kv_tiers)
        self._child: dict[int, int] = {}  # block hash -> slot (the first parent's child with it)
        self._other: dict[tuple[int, int], int] = {}  # (parent slot, block hash) -> slot, any other parent's
        self._key: vec[i64] = vec[i64]([0])  # slot -> its block hash; slot 0 is the root
        self._parent: vec[i64] = vec[i64]([_DEAD])
        self._next: vec[i64] = vec[i64]([_DEAD])  # slot -> the block made after it in its chain (its child), or _DEAD
        self._found: vec[i64] = vec[i64]([_IN_CHILD])  # slot -> where it is found: _IN_CHILD, _IN_OTHER, _IN_CHAIN
        self._ref: vec[i64] = vec[i64]([1])  # the root holds a reference of its own: never evicted
        self._last_s: vec[float] = vec[float]([0.0])
        self._created: vec[i64] = vec[i64]([0])
        self._children: vec[i64] = vec[i64]([0])
        self._free: list[int] = []
        self._next_created = 1
        self._heap = LruHeap()

    @property
    def evictable_pages(self) -> int:
        return self.evictable_blocks * self.pages_per_block

    @property
    def cached_pages(self) -> int:
        return self.num_blocks * self.pages_per_block

    def block_hash(self, block: BlockNode) -> int:
        return self._key[block]

    def _find(self, parent: int, block_hash: int) -> int:
        """The slot of `parent`'s child with `block_hash`, or _DEAD."""
        slot = self._next[parent]
        if slot != _DEAD and self._key[slot] == block_hash:
            return slot
        slot = self._child.get(block_hash, _DEAD)
        if slot != _DEAD and self._parent[slot] == parent:
            return slot
        if self._other:
            return self._other.get((parent, block_hash), _DEAD)
        return _DEAD

    def ref_count(self, block: BlockNode) -> int:
        """How many requests hold `block` locked (0 = evictable once it is a leaf)."""
        return self._ref[block]

    def match(self, hash_ids: Sequence[int], max_blocks: int) -> list[BlockNode]:
        """The longest cached path for the first `max_blocks` hashes (nothing is locked)."""
        node, path = ROOT, []
        ids: tuple[int, ...] = tuple(hash_ids)  # (typed: compiled, a tuple's items are read natively)
        for i in range(min(max_blocks, len(ids))):
            child = self._find(node, ids[i])
            if child == _DEAD:
                break
            node = child
            path.append(node)
        return path

    def lock(self, path: Sequence[BlockNode], now_s: float) -> None:
        ref, last_s = self._ref, self._last_s
        for node in path:
            if ref[node] == 0:
                self.evictable_blocks -= 1
            ref[node] += 1
            last_s[node] = now_s

    def unlock(self, path: Sequence[BlockNode], now_s: float) -> None:
        ref, last_s, children = self._ref, self._last_s, self._children
        for node in path:
            if ref[node] <= 0:
                raise RuntimeError(f"prefix cache: unlock of unreferenced block {self.block_hash(node)}")
            ref[node] -= 1
            last_s[node] = now_s
            if ref[node] == 0:
                self.evictable_blocks += 1
                if not children[node]:
                    self._heap.push(now_s, self._created[node], node)

    def insert(self, hash_ids: Sequence[int], now_s: float) -> int:
        """Add the blocks of `hash_ids` not yet cached (unreferenced); returns how many are new."""
        last_s, node = self._last_s, ROOT
        for cached, h in enumerate(hash_ids):
            child = self._find(node, h)
            if child == _DEAD:  # the rest hangs below `node`, one new block under the other
                created = len(hash_ids) - cached
                node = self._add_chain(node, hash_ids[cached:], now_s)
                break
            last_s[child] = now_s
            node = child
        else:
            created = 0
        self.num_blocks += created
        self.evictable_blocks += created
        if node != ROOT and self._ref[node] == 0 and not self._children[node]:
            self._heap.push(now_s, self._created[node], node)
        return created

    def _add_chain(self, parent: int, hashes: Sequence[int], now_s: float) -> int:
        """New blocks for `hashes` (at least one), each the child of the one before, the first
        one `parent`'s; numbered in that order, in freed slots first (last freed first). Returns
        the last block."""
        chain: tuple[int, ...] = tuple(hashes)  # (typed: compiled, a tuple's items are read natively)
        free, n = self._free, len(chain)
        slots = free[:-n - 1:-1]
        del free[len(free) - len(slots):]
        if len(slots) < n:
            start, more = len(self._ref), n - len(slots)
            slots += range(start, start + more)
            self._key = extend(self._key, [0] * more)
            self._parent = extend(self._parent, [_DEAD] * more)
            self._next = extend(self._next, [_DEAD] * more)
            self._found = extend(self._found, [_IN_CHILD] * more)
            self._ref = extend(self._ref, [0] * more)  # freed slots hold 0 too: only unreferenced blocks are evicted
            self._last_s = extend(self._last_s, [0.0] * more)
            self._created = extend(self._created, [_DEAD] * more)
            self._children = extend(self._children, [0] * more)
        key_of, parent_of, next_of, found = self._key, self._parent, self._next, self._found
        created, children, last_s = self._created, self._children, self._last_s
        number, above = self._next_created, slots[0]
        head = chain[0]
        if self._child.setdefault(head, above) != above:  # another parent's child has this hash
            self._other[(parent, head)] = above
            found[above] = _IN_OTHER
        else:
            found[above] = _IN_CHILD
        key_of[above], parent_of[above] = head, parent
        for i in range(1, n):  # (an index loop: compiled, no object per step)
            slot = slots[i]
            key_of[slot] = chain[i]
            parent_of[slot] = above
            next_of[above] = slot
            found[slot] = _IN_CHAIN
            above = slot
        next_of[above] = _DEAD
        for i in range(n):
            slot = slots[i]
            created[slot] = number + i
            children[slot] = 1
            last_s[slot] = now_s
        children[above] = 0
        children[parent] += 1
        self._next_created = number + n
        return above

    def evict(self, blocks: int) -> int:
        """Evict up to `blocks` unreferenced blocks, LRU leaves first; returns blocks evicted.

        A parent left childless and unlocked is evicted at once when it would be the heap's next
        pop anyway (its entry sorts before the heap's top): the same order without the push/pop.
        A parent last used when its child was sorts before it (it is numbered before its child),
        hence before the heap's top, with no comparison.
        """
        heap, on_evict = self._heap, self.on_evict
        ref, children, created, last_s = self._ref, self._children, self._created, self._last_s
        keys, parents, found, child_of, free = self._key, self._parent, self._found, self._child, self._free
        evicted = 0
        while evicted < blocks and heap.size:
            t, number, node = heap.top_time_s(), heap.top_number(), heap.top_slot()
            heap.pop()
            if created[node] != number or ref[node] or children[node] or t != last_s[node]:
                continue  # stale entry: evicted (slot maybe reused), re-locked, grew children, touched
            while True:  # evict `node` (last used at t, sorting before the heap's top), then its parent?
                block_hash, parent, where = keys[node], parents[node], found[node]
                if where == _IN_CHAIN:
                    self._next[parent] = _DEAD
                elif where == _IN_CHILD:
                    del child_of[block_hash]
                else:
                    del self._other[(parent, block_hash)]
                created[node] = _DEAD
                free.append(node)
                node = parent
                children[node] -= 1
                evicted += 1
                if on_evict is not None:
                    on_evict(block_hash)
                if ref[node] or children[node]:  # (the root's own reference stops here too)
                    break
                if evicted < blocks:
                    if last_s[node] == t:
                        continue
                    if not heap.size or heap.before_top(last_s[node], created[node], node):
                        t = last_s[node]
                        continue
                heap.push(last_s[node], created[node], node)
                break
        self.num_blocks -= evicted
        self.evictable_blocks -= evicted
        return evicted

    def over_capacity_blocks(self) -> int:
        if self.capacity_blocks <= 0:
            return 0
        return max(0, self.num_blocks - self.capacity_blocks)

    def block_hashes(self) -> list[int]:
        """Every cached block's hash (for invariant checks)."""
        return [self._key[node] for node in self._live()]

    def _live(self) -> list[int]:
        return [node for node in range(1, len(self._created)) if self._created[node] != _DEAD]

    def check_invariants(self, final: bool = False) -> None:
        live = self._live()
        lost = [node for node in live if self._find(self._parent[node], self._key[node]) != node]
        if lost:
            raise RuntimeError(f"prefix cache: blocks {[self._key[n] for n in lost[:3]]} are cached but not found")
        for node in live:
            ref = self._ref[node]
            if ref < 0 or (final and ref):
                raise RuntimeError(f"prefix cache: block {self.block_hash(node)} has ref {ref}")
        free = sum(1 for node in live if self._ref[node] == 0)
        children = sum(self._children[node] for node in live) + self._children[ROOT]
        if len(live) != self.num_blocks or free != self.evictable_blocks or children != len(live):
            raise RuntimeError(
                f"prefix cache: counted {len(live)} blocks/{free} free/{children} child links, "
                f"recorded {self.num_blocks}/{self.evictable_blocks}"
            )
