"""The decode instance's step plan: one function decides everything a decode iteration changes.

At each iteration boundary (pdsim: a simpy boundary of the running batch; pdreal: the top of
`DecodeEngine.step`) the executor observes its queues and calls `plan_decode_step`, then applies
the plan in this order:

1. resume: retracted requests get their pages back and their KV is reloaded from host memory
   (seed 001 section 7.4, SGLang `resume_retracted_reqs` -> `load_kv_cache`); they rejoin the
   waiting queue's tail, their KV already complete (seed 000: "retracted requests go to the
   waiting queue first, their KV cache is already there"). The reload belongs to this step:
   the forward starts after it.
2. admit: handshaken prealloc-queue requests get their pages and move to the transfer queue
   (pdsim.policy.memory.plan_preallocation: retracted first, FIFO, allocatable-tokens rule).
3. join: the waiting queue (KV arrived; the prebuilt batch) joins the running batch in FIFO
   order while it has room; the first token, made by prefill, is delivered now. A request that
   is already complete at this point (one output token) finishes instead of joining.
4. grow: every running request gets the page its next token needs; when pages run short,
   victims are retracted (their KV offloaded to host, `retracted` queue) or, if even that cannot
   help, the last request fails (pdsim.policy.memory.plan_page_growth).
5. the batch: the running requests that remain run one forward. If it is empty because of a
   failure, the executor plans again at once (`replan`: the freed KV may admit a request).

Executors keep their own request objects (pdsim's SimRequest, pdreal's DecodeState); the plan
refers to them, read through a `DecodeAccess`. Pure: no simpy, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import ClassVar, Final, Generic, TypeVar

from pdsim.policy.limits import StepLimits
from pdsim.policy.memory import (
    DecodeMemoryView,
    GrowthPlan,
    need_now_tokens,
    plan_page_growth,
    plan_preallocation,
)
from pdsim.policy.record import Record
from pdsim.policy.views import RequestView, pages_for

T = TypeVar("T")


class DecodeAccess(Record, Generic[T]):
    """How the planner reads an executor's request: its view, its KV length, and whether it is
    complete when it joins (one output token, or its first token ended it). A compiled Record,
    not a frozen dataclass: the planner reads its fields a few times a step, and a Python
    object's are looked up by name."""

    FIELDS: ClassVar[tuple[str, ...]] = ("view", "kv_tokens", "done_at_join")

    def __init__(self, view: Callable[[T], RequestView], kv_tokens: Callable[[T], int],
                 done_at_join: Callable[[T], bool]) -> None:
        self.view: Final = view
        self.kv_tokens: Final = kv_tokens
        self.done_at_join: Final = done_at_join


class DecodeStepPlan(Record, Generic[T]):
    FIELDS: ClassVar[tuple[str, ...]] = ("resume", "admit", "join", "finish_at_join", "growth", "batch")

    def __init__(self, resume: tuple[T, ...], admit: tuple[T, ...], join: tuple[T, ...],
                 finish_at_join: tuple[T, ...], growth: GrowthPlan[T], batch: tuple[T, ...]) -> None:
        self.resume: Final = resume  # retracted -> pages now, KV reloaded, then the waiting tail
        self.admit: Final = admit  # prealloc -> pages now -> transfer queue
        self.join: Final = join  # waiting -> running
        self.finish_at_join: Final = finish_at_join  # waiting -> finished (complete already)
        self.growth: Final = growth  # retraction victims, failures, page growth of the batch
        self.batch: Final = batch  # the forward's requests, in running order

    @property
    def replan(self) -> bool:
        """True when the executor must plan again before it waits: a failure freed KV after the
        pre-allocation decision, and nothing runs that would bring it back to plan."""
        return bool(self.growth.failed) and not self.batch

    @property
    def changes(self) -> bool:
        """True when the plan does anything besides running the batch."""
        g = self.growth
        return bool(self.resume or self.admit or self.join or self.finish_at_join or g.victims or g.failed)


def prealloc_free_slots(limits: StepLimits, num_transfer: int, num_waiting: int) -> int:
    """Pre-allocation slots left: requests holding pre-allocated pages (transfer + waiting) use them."""
    return limits.prealloc_slots - num_transfer - num_waiting


def _preallocate(
    limits: StepLimits, memory: Callable[[], DecodeMemoryView], retracted: Sequence[T],
    handshaken: Iterable[T], free_slots: int, access: DecodeAccess[T],
) -> tuple[tuple[T, ...], tuple[T, ...]]:
    pending = iter(handshaken)
    head: T | None = None
    for item in pending:  # (the first, if any: compiled, `next(it, None)` is a generic call)
        head = item
        break
    if not retracted and head is None:
        return (), ()
    view = access.view
    viewed: list[T] = []  # the handshaken requests viewed so far, in order
    plan = plan_preallocation([view(r) for r in retracted], _views(head, pending, view, viewed), memory(), free_slots)
    # (both are prefixes, in queue order: the scan stops at the first that does not fit)
    return tuple(retracted[:len(plan.resume_ids)]), tuple(viewed[:len(plan.admit_ids)])


def _views(head: T | None, rest: Iterator[T], view: Callable[[T], RequestView], viewed: list[T]) -> Iterator[RequestView]:
    """The views of head and then of rest's items, consumed lazily; `viewed` gets each item."""
    if head is not None:
        viewed.append(head)
        yield view(head)
    for item in rest:
        viewed.append(item)
        yield view(item)


def plan_decode_step(
    limits: StepLimits,
    memory: Callable[[], DecodeMemoryView],
    retracted: Sequence[T],
    handshaken: Iterable[T],
    num_transfer: int,
    waiting: Sequence[T],
    running: Sequence[T],
    free_pages: int,
    access: DecodeAccess[T],
) -> DecodeStepPlan[T]:
    """The plan of one decode iteration (see the module docstring for the order).

    memory: the allocatable-tokens inputs (called only when something waits for pre-allocation);
    handshaken: prealloc-queue requests whose receiver is ready, in queue order (consumed lazily);
    waiting / running: the queues in order; free_pages: the pool's free pages now.
    """
    page = limits.page_size_tokens
    free_slots = prealloc_free_slots(limits, num_transfer, len(waiting))
    resume, admit = _preallocate(limits, memory, retracted, handshaken, free_slots, access)
    free = free_pages
    if resume or admit:
        free -= sum(need_now_tokens(access.view(r), page) // page for r in (*resume, *admit))
    join: list[T] = []
    done: list[T] = []
    if waiting or resume:
        room = limits.max_running_requests - len(running)
        for req in (waiting if not resume else (*waiting, *resume)):
            if len(join) >= room:
                break
            if access.done_at_join(req):
                done.append(req)
                free += pages_for(access.kv_tokens(req), page)
            else:
                join.append(req)
    batch = (*running, *join) if join else tuple(running)
    growth = plan_page_growth(batch, free, page, access.kv_tokens, access.view)
    if growth.victims or growth.failed:
        out = {id(r) for r in (*growth.victims, *growth.failed)}
        batch = tuple(r for r in batch if id(r) not in out)
    return DecodeStepPlan(resume, admit, tuple(join), tuple(done), growth, batch)
