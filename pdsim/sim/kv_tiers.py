"""KV-cache tiers below the GPU prefix cache: host DRAM, local SSD, and a cluster-wide store.

Per prefill instance: `gpu` is the prefix cache (pdsim/policy/prefix_cache.py, pages in the KV pool), `host`
(L2) and `ssd` (L3) are `TierLRU`s of block hashes; `store` is one `TierLRU` shared by every
prefill instance (Mooncake store / HiCache remote L3). Block hashes identify a whole prefix
(chained hashes, as in the Mooncake trace), so lower tiers are flat sets.

Placement rules (checked by `check_invariants`):
- gpu, host and ssd of one instance are exclusive: a block is in at most one of them. A load
  moves a block out of host/ssd into pages the request owns (it joins the GPU cache when the
  request releases its KV); a block that joins the GPU cache is dropped from host/ssd.
- GPU eviction demotes to host; host overflow demotes to ssd, else to the store when
  store_write=evict; ssd overflow demotes to the store (store_write=evict) or is dropped.
- The store is inclusive (a copy): store_write=through puts every block a request computed;
  hot_block_hits replicates a block into the store once one instance has hit it that often.
- Every tier holds at most its capacity in blocks; eviction is LRU (fifo: hits do not refresh).
Demotions, store writes and replications are asynchronous and cost no simulated time (bytes
are counted). Loads cost time: host over PCIe, ssd at min(ssd, PCIe), store over the instance's
NIC (a network flow, so it shares the NIC) then PCIe. A request whose loaded blocks were taken
out of host/ssd and which aborts before finishing its prefill loses those blocks.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pdsim.config import KVTiersConfig
from pdsim.perf import LatencyModel
from pdsim.policy.kv_centric import TIER_HOST, TIER_NAMES, TIER_SSD, TIER_STORE, LoadDecision


class TierLRU:
    """Block hashes of one tier with a capacity in blocks; least recently used evicted first."""

    def __init__(self, name: str, capacity_blocks: int, refresh_on_hit: bool = True) -> None:
        self.name = name
        self.capacity_blocks = capacity_blocks
        self.refresh_on_hit = refresh_on_hit
        self.blocks: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self.blocks

    def __len__(self) -> int:
        return len(self.blocks)

    def touch(self, block_hash: int) -> None:
        if self.refresh_on_hit and block_hash in self.blocks:
            self.blocks.move_to_end(block_hash)

    def put(self, block_hash: int) -> list[int]:
        """Insert (or refresh) a block; returns the blocks evicted to make room, oldest first."""
        if block_hash in self.blocks:
            self.blocks.move_to_end(block_hash)
            return []
        self.blocks[block_hash] = None
        evicted = []
        while len(self.blocks) > self.capacity_blocks:
            evicted.append(self.blocks.popitem(last=False)[0])
        return evicted

    def discard(self, block_hash: int) -> bool:
        return self.blocks.pop(block_hash, 0) is None

    def check_invariants(self) -> None:
        if len(self.blocks) > self.capacity_blocks:
            raise RuntimeError(f"kv tier {self.name}: {len(self.blocks)} blocks over capacity {self.capacity_blocks}")


@dataclass(frozen=True, slots=True)
class TierPlan:
    """The tier blocks a request will load, after the load-or-recompute decisions.

    gpu_blocks: the GPU match it was planned on; tiers: the tier of each loaded block, in prefix
    order; decisions: every comparison made (taken or not); skipped_tokens: tier hits recomputed.
    """

    gpu_blocks: int
    version: int
    tiers: tuple[int, ...]
    decisions: tuple[LoadDecision, ...]
    block_tokens: int

    @property
    def load_tokens(self) -> int:
        return len(self.tiers) * self.block_tokens

    @property
    def load_s(self) -> float:
        return sum(d.load_s for d in self.decisions if d.take)

    @property
    def skipped_tokens(self) -> int:
        return sum(d.tokens for d in self.decisions if not d.take)

    def tokens_in(self, tier: int) -> int:
        return self.tiers.count(tier) * self.block_tokens


@dataclass
class TierStats:
    hit_tokens: list[int] = field(default_factory=lambda: [0, 0, 0, 0])  # per TIER_NAMES
    load_bytes: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    demote_bytes: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    store_write_bytes: float = 0.0
    replicated_blocks: int = 0
    prompt_tokens: int = 0
    skipped_tokens: int = 0
    loads_taken: int = 0
    loads_rejected: int = 0
    recompute_saved_s: float = 0.0
    load_s: float = 0.0


class InstanceTiers:
    """The host/ssd tiers of one prefill instance, its view of the store, and the load model.

    bandwidths in bytes/s: pcie (all of the instance's GPUs), ssd, nic (set with the placement).
    """

    def __init__(
        self, name: str, cfg: KVTiersConfig, block_tokens: int, kv_bytes_per_token: float,
        pcie_bytes_per_s: float, latency: LatencyModel, store: TierLRU | None,
    ) -> None:
        refresh = cfg.eviction == "lru"
        self.cfg = cfg
        self.block_tokens = block_tokens
        self.block_bytes = kv_bytes_per_token * block_tokens
        self.pcie_bytes_per_s = pcie_bytes_per_s
        self.ssd_bytes_per_s = cfg.ssd_gbps * 1e9
        self.nic_bytes_per_s = pcie_bytes_per_s  # replaced by the NIC's when placed
        self.latency = latency
        self.host = TierLRU(f"{name}:host", cfg.host_tokens // block_tokens, refresh) if cfg.host_tokens else None
        self.ssd = TierLRU(f"{name}:ssd", cfg.ssd_tokens // block_tokens, refresh) if cfg.ssd_tokens else None
        self.store = store
        self.stats = TierStats()
        self.version = 0  # bumped whenever a tier's content changes (plans are reused until then)
        self.pending_bytes = [0.0, 0.0, 0.0, 0.0]
        self.hit_counts: dict[int, int] = {}
        # start_store_read(nbytes, on_done): a network flow into the instance (set when placed)
        self.start_store_read: Callable[[float, Callable[[], object]], None] | None = None

    # -- lookup and decision -------------------------------------------------------------
    def tier_of(self, block_hash: int) -> int:
        """The first lower tier holding the block (host, ssd, store), or -1."""
        if self.host is not None and block_hash in self.host:
            return TIER_HOST
        if self.ssd is not None and block_hash in self.ssd:
            return TIER_SSD
        if self.store is not None and block_hash in self.store:
            return TIER_STORE
        return -1

    def lookup(self, hash_ids: Sequence[int], gpu_blocks: int, max_blocks: int) -> list[int]:
        """Tiers of the blocks after the GPU match, up to the first block cached nowhere."""
        found = []
        for block_hash in hash_ids[gpu_blocks:max_blocks]:
            tier = self.tier_of(block_hash)
            if tier < 0:
                break
            found.append(tier)
        return found

    def load_time_s(self, tier: int, tokens: int) -> float:
        """Modelled time to bring `tokens` of KV from `tier` into GPU pages (alone on the links)."""
        nbytes = tokens * self.block_bytes / self.block_tokens
        source = {TIER_HOST: self.pcie_bytes_per_s, TIER_SSD: self.ssd_bytes_per_s,
                  TIER_STORE: self.nic_bytes_per_s}[tier]
        return nbytes / min(source, self.pcie_bytes_per_s)

    def recompute_time_s(self, prompt_tokens: int, context_tokens: int, tokens: int) -> float:
        """Prefill time the request saves by not computing `tokens` after `context_tokens`."""
        rest = prompt_tokens - context_tokens
        with_run = self.latency.prefill_time_s([(rest, context_tokens)])
        return with_run - self.latency.prefill_time_s([(rest - tokens, context_tokens + tokens)])

    def plan(self, prompt_tokens: int, hash_ids: Sequence[int], gpu_blocks: int, max_blocks: int) -> TierPlan:
        """Decide, run by run in prefix order, which tier blocks to load (module docstring)."""
        found = self.lookup(hash_ids, gpu_blocks, max_blocks)
        taken: list[int] = []
        decisions: list[LoadDecision] = []
        i = 0
        while i < len(found):
            j = i
            while j < len(found) and found[j] == found[i]:
                j += 1
            tokens = (j - i) * self.block_tokens
            context = (gpu_blocks + i) * self.block_tokens
            load_s = self.load_time_s(found[i], tokens)
            recompute_s = self.recompute_time_s(prompt_tokens, context, tokens)
            decisions.append(LoadDecision(found[i], tokens, load_s, recompute_s, self.cfg.decision == "always"))
            if not decisions[-1].take:
                break
            taken.extend(found[i:j])
            i = j
        return TierPlan(gpu_blocks, self.version, tuple(taken), tuple(decisions), self.block_tokens)

    # -- state changes --------------------------------------------------------------------
    def commit(self, plan: TierPlan, hash_ids: Sequence[int], prompt_tokens: int) -> None:
        """The request starts with this plan: move loaded blocks out of host/ssd, count."""
        s, bt = self.stats, self.block_tokens
        s.prompt_tokens += prompt_tokens
        s.hit_tokens[0] += plan.gpu_blocks * bt
        for k, tier in enumerate(plan.tiers):
            block_hash = hash_ids[plan.gpu_blocks + k]
            if tier == TIER_HOST and self.host is not None:
                self.host.discard(block_hash)
            elif tier == TIER_SSD and self.ssd is not None:
                self.ssd.discard(block_hash)
            elif tier == TIER_STORE and self.store is not None:
                self.store.touch(block_hash)
            s.hit_tokens[tier] += bt
            s.load_bytes[tier] += self.block_bytes
            self.pending_bytes[tier] += self.block_bytes
        for d in plan.decisions:
            s.loads_taken += d.take
            s.loads_rejected += not d.take
            s.recompute_saved_s += d.recompute_s if d.take else 0.0
        s.skipped_tokens += plan.skipped_tokens
        s.load_s += plan.load_s
        self.version += 1
        self._count_hits(hash_ids[: plan.gpu_blocks + len(plan.tiers)])

    def _count_hits(self, hashes: Sequence[int]) -> None:
        threshold = self.cfg.hot_block_hits
        if threshold <= 0 or self.store is None:
            return
        for block_hash in hashes:
            n = self.hit_counts.get(block_hash, 0) + 1
            self.hit_counts[block_hash] = n
            if n >= threshold and block_hash not in self.store:
                self.store.put(block_hash)
                self.stats.replicated_blocks += 1
                self.stats.store_write_bytes += self.block_bytes

    def demote(self, block_hash: int) -> None:
        """A block left the GPU cache: keep it in host (cascading overflow down the tiers)."""
        self.version += 1
        if self.host is not None:
            self.stats.demote_bytes[TIER_HOST] += self.block_bytes
            for old in self.host.put(block_hash):
                self._demote_from_host(old)
        else:
            self._demote_from_host(block_hash)

    def _demote_from_host(self, block_hash: int) -> None:
        if self.ssd is not None:
            self.stats.demote_bytes[TIER_SSD] += self.block_bytes
            for old in self.ssd.put(block_hash):
                self._to_store(old)
        else:
            self._to_store(block_hash)

    def _to_store(self, block_hash: int) -> None:
        if self.store is not None and self.cfg.store_write == "evict" and block_hash not in self.store:
            self.stats.demote_bytes[TIER_STORE] += self.block_bytes
            self.store.put(block_hash)

    def on_gpu_insert(self, hashes: Sequence[int]) -> None:
        """Blocks joined the GPU cache: drop host/ssd copies; write through to the store."""
        self.version += 1
        through = self.store if self.cfg.store_write == "through" else None
        for block_hash in hashes:
            if self.host is not None:
                self.host.discard(block_hash)
            if self.ssd is not None:
                self.ssd.discard(block_hash)
            if through is not None and block_hash not in through:
                through.put(block_hash)
                self.stats.store_write_bytes += self.block_bytes

    def take_batch_load(self) -> tuple[float, float]:
        """(local load seconds over PCIe/SSD, store bytes to read) of the loads committed since
        the last call; resets the pending bytes."""
        host, ssd, store = (self.pending_bytes[t] for t in (TIER_HOST, TIER_SSD, TIER_STORE))
        self.pending_bytes = [0.0, 0.0, 0.0, 0.0]
        local_s = max((host + ssd + store) / self.pcie_bytes_per_s, ssd / self.ssd_bytes_per_s)
        return local_s, store

    # -- checks and outputs ---------------------------------------------------------------
    def check_invariants(self, gpu_hashes: Sequence[int]) -> None:
        tiers = [t for t in (self.host, self.ssd, self.store) if t is not None]
        for tier in tiers:
            tier.check_invariants()
        gpu = set(gpu_hashes)
        if len(gpu) != len(gpu_hashes):
            raise RuntimeError("kv tiers: a block hash is cached twice in the GPU prefix cache")
        local = [t for t in (self.host, self.ssd) if t is not None]
        for k, tier in enumerate(local):
            for other in [gpu, *(o.blocks for o in local[k + 1:])]:
                both = [h for h in tier.blocks if h in other]
                if both:
                    raise RuntimeError(f"kv tier {tier.name}: blocks {both[:3]} also held by a higher local tier")

    def stats_dict(self) -> dict[str, float]:
        s = self.stats
        out: dict[str, float] = {"kv_prompt_tokens": s.prompt_tokens, "kv_skipped_tokens": s.skipped_tokens,
                                 "kv_loads_taken": s.loads_taken, "kv_loads_rejected": s.loads_rejected,
                                 "kv_recompute_saved_s": s.recompute_saved_s, "kv_load_s": s.load_s,
                                 "kv_store_write_bytes": s.store_write_bytes,
                                 "kv_replicated_blocks": s.replicated_blocks}
        for tier, name in enumerate(TIER_NAMES):
            out[f"kv_hit_tokens_{name}"] = s.hit_tokens[tier]
            if tier:
                out[f"kv_load_bytes_{name}"] = s.load_bytes[tier]
                out[f"kv_demote_bytes_{name}"] = s.demote_bytes[tier]
        return out

