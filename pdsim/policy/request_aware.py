"""Side choosers that look at the request itself: cache-aware and length buckets.

Both plug into the routing registry (`route_choice.SIDE_CHOOSERS`) with the same signature as the
load-only choosers and read their parameters from `RouterState.params` (a `RoutingParams`).

- cache_aware: on the prefill (or colocated) side, the instance whose prefix-cache summary
  (`InstanceView.cached_blocks`) holds the longest leading run of the request's block hashes,
  weighed against load: cost = load_tokens - cache_weight * hit_tokens, minimum wins, ties by
  (load_tokens, instance_id). cache_weight 0 is least-loaded; a large weight is pure affinity.
  Decode instances keep no prefix cache, so the decode side is least-loaded.
- length_buckets: ascending prompt-length boundaries split requests into len(boundaries) + 1
  buckets; the instances of a side (all of them, by instance_id, healthy or not) split into as
  many contiguous groups; a request goes to the least-loaded healthy instance of its bucket's
  group, or of the whole side when that group has no healthy instance.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

import numpy as np

from pdsim.policy.routing_state import RouterState
from pdsim.policy.views import InstanceView, RequestView


def _least_loaded(views: Sequence[InstanceView]) -> InstanceView:
    return min(views, key=lambda v: (v.load_tokens, v.queued_requests, v.instance_id))


def prefix_hit_tokens(request: RequestView, view: InstanceView, block_tokens: int) -> int:
    """Prompt tokens covered by the leading request blocks cached on `view` (stops at a miss)."""
    blocks = 0
    for block_hash in request.hash_ids:
        if block_hash not in view.cached_blocks:
            break
        blocks += 1
    return min(blocks * block_tokens, request.input_tokens)


def choose_cache_aware(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Minimum (load_tokens - cache_weight * prefix hit, load_tokens, instance_id)."""
    healthy = [v for v in views if v.healthy]
    if side == "decode":
        return _least_loaded(healthy).instance_id
    params = state.params

    def cost(v: InstanceView) -> tuple[float, int, int]:
        hit = prefix_hit_tokens(request, v, params.block_tokens)
        return (v.load_tokens - params.cache_weight * hit, v.load_tokens, v.instance_id)

    return min(healthy, key=cost).instance_id


def bucket_of(input_tokens: int, boundaries: Sequence[int]) -> int:
    """Bucket index: how many boundaries are <= input_tokens (0 .. len(boundaries))."""
    return bisect_right(boundaries, input_tokens)


def bucket_group(views: Sequence[InstanceView], bucket: int, num_buckets: int) -> list[InstanceView]:
    """The contiguous slice of `views` (by instance_id) serving `bucket`; never empty.

    With n instances and G buckets, bucket g owns positions [g*n//G, (g+1)*n//G); when n < G
    some buckets would own nothing, so each owns at least the instance at g*n//G.
    """
    ordered = sorted(views, key=lambda v: v.instance_id)
    n = len(ordered)
    lo = bucket * n // num_buckets
    hi = max(lo + 1, (bucket + 1) * n // num_buckets)
    return ordered[lo:hi]


def choose_length_bucket(
    request: RequestView, views: Sequence[InstanceView], side: str, state: RouterState,
    rng: np.random.Generator,
) -> int:
    """Least-loaded healthy instance of the request's length group (fallback: the whole side)."""
    bounds = state.params.length_buckets
    group = bucket_group(views, bucket_of(request.input_tokens, bounds), len(bounds) + 1)
    healthy = [v for v in group if v.healthy] or [v for v in views if v.healthy]
    return _least_loaded(healthy).instance_id
