"""The state a router keeps between routing calls (`RouterState`) and the request-aware
policies' parameters it carries (`RoutingParams`).

Every side chooser (route_choice.py, request_aware.py, kv_centric.py, request_count.py) takes the
caller-owned `RouterState`; this module imports none of them, so they all import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pdsim.policy.views import InstanceView


@dataclass(frozen=True, slots=True)
class RoutingParams:
    """Parameters of the request-aware routing policies (from `policy.*` in the config).

    block_tokens: tokens per prefix block (the workload's hash_ids granularity).
    """

    cache_weight: float = 1.0
    length_buckets: tuple[int, ...] = ()
    block_tokens: int = 512

    def __post_init__(self) -> None:
        if self.cache_weight < 0:
            raise ValueError(f"policy: field 'cache_weight' must be >= 0, got {self.cache_weight}")
        if self.block_tokens < 1:
            raise ValueError(f"routing: block_tokens must be >= 1, got {self.block_tokens}")
        bounds = self.length_buckets
        if any(b <= 0 for b in bounds) or any(a >= b for a, b in zip(bounds, bounds[1:], strict=False)):
            raise ValueError(
                f"policy: field 'length_buckets' must be positive and strictly increasing, got {list(bounds)}"
            )


@dataclass
class RouterState:
    """Mutable routing state owned by the caller (one per router): round-robin cursors.

    params: the request-aware policies' parameters (request_aware.py), fixed per router.
    """

    cursors: dict[str, int] = field(default_factory=dict)
    params: RoutingParams = field(default_factory=RoutingParams)
    # per side: the last views tuple and its healthy instances (tuples of frozen views cannot
    # change, so a caller passing the same tuple again gets the same list without a sort)
    healthy_memo: dict[str, tuple[Sequence[InstanceView], list[InstanceView]]] = field(
        default_factory=dict, repr=False, compare=False)

    def advance(self, side: str, modulo: int) -> int:
        """Return the cursor for `side` and move it on by one."""
        value = self.cursors.get(side, 0) % modulo
        self.cursors[side] = value + 1
        return value
