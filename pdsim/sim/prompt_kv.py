"""The KV side of prompt processing: a paged pool plus the prefix cache (prefill, colocated).

A request's prompt KV is its matched prefix (cache blocks, locked while in use) plus pages it
owns for everything it computes. On release, its full blocks join the cache (their pages move
to CACHE_OWNER) and the rest is freed. Allocation evicts unreferenced cache blocks on demand.
Cached prefixes are whole blocks and never the whole prompt (at least one token is computed).
With KV tiers attached (kv_tiers.py) a prefix continues past the GPU match into host/ssd/store
blocks the load-or-recompute decision took: their pages are allocated with the first chunk and
filled by the load (`commit_load`); they join the GPU cache on release like computed blocks.
"""

from __future__ import annotations

from pdsim.policy.prefix_cache import BlockNode, PrefixCache, cacheable_blocks, matchable_blocks
from pdsim.sim.kv_pool import CACHE_OWNER, KVPool
from pdsim.sim.kv_tiers import InstanceTiers, TierPlan
from pdsim.sim.state import SimRequest


class PromptKV:
    def __init__(
        self, name: str, capacity_pages: int, page_size_tokens: int, cache_enabled: bool,
        block_tokens: int, cache_capacity_tokens: int = 0,
    ) -> None:
        self.pool = KVPool(name, capacity_pages, page_size_tokens)
        self.page = page_size_tokens
        self.cache: PrefixCache | None = None
        self.tiers: InstanceTiers | None = None
        if cache_enabled:
            if 0 < cache_capacity_tokens < block_tokens:
                raise ValueError(
                    f"cluster: field 'prefix_cache_tokens' = {cache_capacity_tokens} holds no prefix block of "
                    f"{block_tokens} tokens (0 = bounded by the KV pool, else >= {block_tokens})"
                )
            if block_tokens % page_size_tokens:
                raise ValueError(
                    f"{name}: prefix cache needs block_tokens ({block_tokens}) to be a multiple of "
                    f"page_size_tokens ({page_size_tokens})"
                )
            self.cache = PrefixCache(
                block_tokens, block_tokens // page_size_tokens, cache_capacity_tokens // block_tokens
            )

    @property
    def evictable_pages(self) -> int:
        return self.cache.evictable_pages if self.cache else 0

    @property
    def used_tokens(self) -> int:
        """KV in use, not counting evictable cache blocks."""
        return (self.pool.used_pages - self.evictable_pages) * self.page

    @property
    def available_tokens(self) -> int:
        return (self.pool.free_pages + self.evictable_pages) * self.page

    def peek_match(self, sr: SimRequest) -> list[BlockNode]:
        """Blocks of the prompt already cached (not locked)."""
        if self.cache is None or not sr.req.hash_ids:
            return []
        return self.cache.match(sr.req.hash_ids, matchable_blocks(sr.prompt.tokens, self.cache.block_tokens))

    def attach_tiers(self, tiers: InstanceTiers) -> None:
        if self.cache is None:
            raise ValueError(f"{self.pool.name}: kv_tiers need cluster.prefix_cache=true")
        self.tiers = tiers
        self.cache.on_evict = tiers.demote

    def plan_hit(self, sr: SimRequest, path: list[BlockNode]) -> int:
        """Prefix tokens `sr` would start with: the GPU match plus the tier blocks worth loading
        (the plan is kept on `sr` and reused while no tier changed)."""
        gpu_tokens = len(path) * self.cache.block_tokens if self.cache else 0
        tiers = self.tiers
        if tiers is None or not sr.req.hash_ids:
            return gpu_tokens
        plan = sr.load.plan
        if plan is None or plan.version != tiers.version or plan.gpu_blocks != len(path):
            max_blocks = matchable_blocks(sr.prompt.tokens, tiers.block_tokens)
            plan = sr.load.plan = tiers.plan(sr.prompt.tokens, sr.req.hash_ids, len(path), max_blocks)
        return gpu_tokens + plan.load_tokens

    def tier_prefix(self, sr: SimRequest) -> tuple[int, ...]:
        """Cached prefix tokens of `sr` per tier (gpu, host, ssd, store), before any load
        decision: the cache summary a KV-centric router sees."""
        path = self.peek_match(sr)
        if self.cache is None:
            return (0, 0, 0, 0)
        bt = self.cache.block_tokens
        if self.tiers is None or not sr.req.hash_ids:
            return (len(path) * bt, 0, 0, 0)
        found = self.tiers.lookup(sr.req.hash_ids, len(path), matchable_blocks(sr.prompt.tokens, bt))
        return (len(path) * bt, found.count(1) * bt, found.count(2) * bt, found.count(3) * bt)

    def begin(self, sr: SimRequest, path: list[BlockNode], now_s: float) -> None:
        """Lock the matched prefix; it counts as prefilled (with the planned tier loads)."""
        if self.cache is not None and path:
            self.cache.lock(path, now_s)
        sr.prompt.match = path
        sr.prompt.cached_tokens = len(path) * self.cache.block_tokens if self.cache and path else 0
        plan: TierPlan | None = sr.load.plan if self.tiers is not None else None
        if plan is not None and plan.gpu_blocks == len(path) and plan.tiers:
            sr.prompt.cached_tokens += plan.load_tokens
            sr.load.pages = plan.load_tokens // self.page
        sr.prompt.prefilled = sr.prompt.cached_tokens

    def commit_load(self, sr: SimRequest) -> None:
        """The first chunk got its pages: take the planned tier blocks (recorded on `sr`)."""
        plan, tiers = sr.load.plan, self.tiers
        sr.load.pages = 0
        if tiers is None:
            return
        if plan is None or plan.gpu_blocks != len(sr.prompt.match):
            plan = TierPlan(len(sr.prompt.match), tiers.version, (), (), tiers.block_tokens)
        tiers.commit(plan, sr.req.hash_ids, sr.prompt.tokens)
        sr.load.loaded_tokens = tuple(plan.tokens_in(t) for t in (1, 2, 3))
        sr.load.kv_load_s = plan.load_s
        sr.load.skipped_tokens = plan.skipped_tokens
        sr.load.plan = None

    def allocate(self, sr: SimRequest, pages: int) -> bool:
        """Give `sr` `pages` more pages, evicting cache blocks if needed; False if impossible."""
        short = pages - self.pool.free_pages
        if short > 0 and self.cache is not None:
            blocks = -(-short // self.cache.pages_per_block)
            evicted = self.cache.evict(blocks)
            self.pool.free(CACHE_OWNER, evicted * self.cache.pages_per_block)
        if pages > self.pool.free_pages:
            return False
        self.pool.allocate(sr.rid, pages)
        sr.prompt.pages += pages
        return True

    def release(self, sr: SimRequest, now_s: float) -> None:
        """Drop `sr`'s prompt KV: complete prompts donate their full blocks to the cache."""
        cache = self.cache
        if cache is not None:
            if sr.prompt.match:
                cache.unlock(sr.prompt.match, now_s)
            if sr.prompt.prefilled >= sr.prompt.tokens and sr.prompt.pages:
                n_full = cacheable_blocks(sr.req.input_tokens, cache.block_tokens, len(sr.req.hash_ids))
                created = cache.insert(sr.req.hash_ids[:n_full], now_s)
                if self.tiers is not None:
                    self.tiers.on_gpu_insert(sr.req.hash_ids[:n_full])
                self.pool.move(sr.rid, CACHE_OWNER, created * cache.pages_per_block)
                over = cache.over_capacity_blocks()
                if over:
                    self.pool.free(CACHE_OWNER, cache.evict(over) * cache.pages_per_block)
        self.pool.free(sr.rid)
        sr.prompt.match = []
        sr.prompt.pages = sr.load.pages = 0

    def check_invariants(self, final: bool = False) -> None:
        self.pool.check_invariants(final)
        if self.cache is not None:
            self.cache.check_invariants(final)
            if self.pool.pages_of(CACHE_OWNER) != self.cache.cached_pages:
                raise RuntimeError(
                    f"{self.pool.name}: cache holds {self.cache.cached_pages} pages, pool says "
                    f"{self.pool.pages_of(CACHE_OWNER)}"
                )
            if self.tiers is not None:
                self.tiers.check_invariants(self.cache.block_hashes())
