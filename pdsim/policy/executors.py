"""What each step planner reads from (and asks of) its executor: one protocol per planner family.

pdsim's simulated instances (pdsim/sim) and pdreal's engines (pdreal/engine) both implement
these; each planner (prefill_step.py, decode_step.py) takes its limits and an executor, and
returns a plan the executor then carries out. An executor keeps its own request objects (`T`:
pdsim's SimRequest, pdreal's per-engine states); a planner refers to them and reads them only
through these calls. The calls are reads, except the `apply_*` / `take_*` ones, where a planner
tells the executor to carry out a part of the plan that the rest of the plan depends on.

- `PrefillExecutor`: a prefill instance (chunked request first, then the waiting queue).
- `RunningBatch`: a running batch whose pages grow one token at a time (decode, colocated).
- `DecodeExecutor`: a decode instance's queues (prealloc -> transfer -> waiting -> running, and
  retracted).
- `ColocatedExecutor`: both halves on one instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, TypeVar

from pdsim.policy.memory import DecodeMemoryView, GrowthPlan
from pdsim.policy.views import RequestView

T = TypeVar("T")


class PrefillExecutor(Protocol):
    """What the prefill planner reads."""

    def prefill_candidates(self) -> Iterable[RequestView]:
        """The chunked request, then the waiting queue, as views (consumed lazily; a waiting
        request's prefix-cache hit is in its `prefilled_tokens`)."""

    def free_kv_tokens(self) -> int:
        """KV tokens a prefill chunk may take now."""


class RankedPrefillExecutor(PrefillExecutor, Protocol):
    """A prefill executor whose attention-DP ranks each take the requests their bootstrap room
    sends them (limits.prefill_dp_dispatch = bootstrap_room; pdsim.policy.dp_dispatch)."""

    def bootstrap_room(self, request_id: int) -> int:
        """The bootstrap room of a candidate request."""


class RunningBatch(Protocol[T]):
    """A running batch whose requests each need a page when their KV length is a page multiple."""

    def running_requests(self) -> Sequence[T]:
        """The running batch in order."""

    def free_pages(self) -> int:
        """Pages the running batch may grow into (pdsim colocated: free plus evictable
        prefix-cache pages)."""

    def kv_tokens(self, req: T) -> int:
        """Tokens whose KV `req` holds."""

    def request_view(self, req: T) -> RequestView: ...


class DecodeExecutor(RunningBatch[T], Protocol[T]):
    """What the decode planner reads from (and asks of) a decode instance."""

    def retracted_requests(self) -> Sequence[T]:
        """The retracted queue in order (KV offloaded; they resume before anything is admitted)."""

    def arrived_requests(self) -> Sequence[T]:
        """Prealloc-queue requests whose KV is here already (pdsim's prefill_end hand-off;
        empty under SGLang's prealloc hand-off), in queue order."""

    def take_arrived(self, reqs: tuple[T, ...]) -> None:
        """Give these arrived requests their pages: they wait to join (this very step)."""

    def handshaken_requests(self) -> Iterable[T]:
        """Prealloc-queue requests whose receiver is ready, in queue order (consumed lazily)."""

    def num_preallocated(self) -> int:
        """Requests holding pre-allocated pages that have not joined (transfer + waiting queues)."""

    def waiting_requests(self) -> Sequence[T]:
        """The waiting queue (KV arrived, the prebuilt batch) in order."""

    def memory_view(self) -> DecodeMemoryView:
        """The allocatable-tokens inputs (called only when something waits for pre-allocation)."""

    def done_at_join(self, req: T) -> bool:
        """`req` is complete when it joins (one output token, or its first token ended it)."""


class ColocatedExecutor(RunningBatch[T], PrefillExecutor, Protocol[T]):
    """What the colocated planner reads from (and asks of) a colocated instance."""

    def apply_growth(self, plan: GrowthPlan[T]) -> None:
        """Retract the victims (KV freed, back to the waiting queue's head to recompute), fail
        the failed ones, give the growing ones their page."""

    def remaining_outputs(self) -> Iterable[int]:
        """Remaining output tokens of every running request (their future growth)."""
