"""KV-cache-centric decisions (Mooncake's Conductor, SGLang HiCache): load-or-recompute, routing.

Tiers, in the order a prompt's prefix is looked up: `gpu` (the prefix cache in KV pages),
`host` (pinned host DRAM, L2), `ssd` (local SSD, L3) and `store` (the cluster-wide KV store:
Mooncake's distributed pool over the cluster's DRAM/SSD, HiCache's remote L3). A prefix hit is a
sequence of block runs, each served by one tier.

Load or recompute. Blocks outside the GPU must be copied in before the forward that reads them;
a run is worth loading only when its load time is shorter than the compute it saves:
`decide_load(load_s, recompute_s)` takes it iff load_s < recompute_s (ties recompute: loading
also costs memory bandwidth and pages). recompute_s is the marginal prefill time of the run's
tokens for that request alone (the step's fixed cost cancels out). Runs are decided in prefix
order and the first rejected run ends the hit (later blocks need the earlier ones' KV).

Mooncake's bandwidth criterion, the closed form behind this comparison. For a prefix of p tokens
with hidden size d, bytes per element s, GQA ratio gqa (query heads / KV heads), and a per-layer
prefill cost of a·p²·d + b·p·d² (attention plus linear layers), the prefix's KV is
2·p·d·s/gqa bytes per layer, so loading it at bandwidth B beats recomputing it when

    B > 2·d·s / (gqa·(a·p·d + b·d²)).

`mooncake_min_bandwidth` evaluates that bound; the simulator instead compares its own
performance model's recompute time with the modelled load time, which is the same test with the
model's real constants (and its fixed and memory-bound costs) in place of a and b.

KV-centric routing (`choose_kv_centric`, registered as "kv_centric"): on the prefill side each
healthy instance's cost is `load_tokens - cache_weight * effective_hit`, where effective_hit =
sum over tiers of hit_tokens[t] * (1 - TIER_LOAD_COST[t]): a token loaded from a slower tier saves
less than one already on the GPU. The instance holding the longest (cheapest) prefix wins unless
its queue is longer than the work the hit saves: then a less loaded instance wins, and it reads
shared blocks from the global store when there is one. Ties: (load_tokens, instance_id). The
view's `tier_hit_tokens` carries the per-tier prefix lengths for the request being routed; when
empty, `cached_blocks` (the GPU summary) is used as the GPU tier. The decode side is least-loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pdsim.policy.request_aware import prefix_hit_tokens
from pdsim.policy.routing_state import RouterState
from pdsim.policy.views import InstanceView, RequestView

TIER_GPU, TIER_HOST, TIER_SSD, TIER_STORE = 0, 1, 2, 3
TIER_NAMES: tuple[str, ...] = ("gpu", "host", "ssd", "store")
# cost of one loaded token relative to one recomputed token, per tier (routing heuristic)
TIER_LOAD_COST: tuple[float, ...] = (0.0, 0.1, 0.3, 0.2)


@dataclass(frozen=True, slots=True)
class LoadDecision:
    """The recorded outcome of one load-or-recompute comparison (times in seconds)."""

    tier: int
    tokens: int
    load_s: float
    recompute_s: float
    forced: bool = False  # decision=always: load whatever the comparison says

    @property
    def take(self) -> bool:
        return self.forced or decide_load(self.load_s, self.recompute_s)


def decide_load(load_s: float, recompute_s: float) -> bool:
    """Load the cached KV only when that is strictly faster than computing it again."""
    return load_s < recompute_s


def mooncake_min_bandwidth(
    hidden_size: int, bytes_per_element: float, gqa: float, prefix_tokens: int, a: float, b: float,
) -> float:
    """Mooncake's break-even bandwidth (bytes/s): 2·d·s / (gqa·(a·p·d + b·d²)).

    a, b: seconds per unit of the attention (p²·d) and linear (p·d²) cost terms of one layer.
    """
    d = hidden_size
    return 2 * d * bytes_per_element / (gqa * (a * prefix_tokens * d + b * d * d))


def effective_hit_tokens(request: RequestView, view: InstanceView, block_tokens: int) -> float:
    """Prefix tokens on `view` weighted by what loading them from their tier still costs."""
    hits = view.tier_hit_tokens or (prefix_hit_tokens(request, view, block_tokens),)
    return sum(tokens * (1.0 - TIER_LOAD_COST[tier]) for tier, tokens in enumerate(hits))


def choose_kv_centric(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Minimum (load_tokens - cache_weight * effective hit, load_tokens, instance_id)."""
    healthy = [v for v in views if v.healthy]
    if side == "decode":
        return min(healthy, key=lambda v: (v.load_tokens, v.queued_requests, v.instance_id)).instance_id
    params = state.params

    def cost(v: InstanceView) -> tuple[float, int, int]:
        hit = effective_hit_tokens(request, v, params.block_tokens)
        return (v.load_tokens - params.cache_weight * hit, v.load_tokens, v.instance_id)

    return min(healthy, key=cost).instance_id
