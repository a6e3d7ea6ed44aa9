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

Before step 1, under pdsim's prefill_end hand-off, prealloc-queue requests whose KV is already
here take their pages by the same rule and wait to join (`DecodeExecutor.take_arrived`).

Executors keep their own request objects (pdsim's SimRequest, pdreal's DecodeState); the plan
refers to them, read through the executor (`pdsim.policy.executors.DecodeExecutor`).
`first_admission_boundary` is the same pre-allocation rule looked ahead over iterations that run
unchanged (pdsim's spans). Pure: no simpy, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import ClassVar, Final, Generic, TypeVar

from pdsim.policy.executors import DecodeExecutor
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


def prealloc_free_slots(limits: StepLimits, num_preallocated: int) -> int:
    """Pre-allocation slots left: requests holding pre-allocated pages (transfer + waiting) use them."""
    return limits.prealloc_slots - num_preallocated


def _take_arrived(limits: StepLimits, ex: DecodeExecutor[T]) -> None:
    """prefill_end hand-off: requests whose KV is here take their pages by the pre-allocation
    rule (retracted requests keep their priority) and wait to join, so the step plan joins them
    at this very boundary."""
    arrived = ex.arrived_requests()
    if not arrived:
        return
    view = ex.request_view
    free_slots = prealloc_free_slots(limits, ex.num_preallocated())
    retracted = [view(r) for r in ex.retracted_requests()]
    plan = plan_preallocation(retracted, (view(r) for r in arrived), ex.memory_view(), free_slots)
    if plan.admit_ids:  # (a prefix of the queue, in order)
        ex.take_arrived(tuple(arrived[:len(plan.admit_ids)]))


def _preallocate(
    limits: StepLimits, ex: DecodeExecutor[T], retracted: Sequence[T], free_slots: int,
) -> tuple[tuple[T, ...], tuple[T, ...]]:
    pending = iter(ex.handshaken_requests())
    head: T | None = None
    for item in pending:  # (the first, if any: compiled, `next(it, None)` is a generic call)
        head = item
        break
    if not retracted and head is None:
        return (), ()
    view = ex.request_view
    viewed: list[T] = []  # the handshaken requests viewed so far, in order
    plan = plan_preallocation([view(r) for r in retracted], _views(head, pending, view, viewed), ex.memory_view(),
                              free_slots)
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


def plan_decode_step(limits: StepLimits, ex: DecodeExecutor[T]) -> DecodeStepPlan[T]:
    """The plan of one decode iteration (see the module docstring for the order); arrived
    requests (prefill_end hand-off) are taken first, through `ex.take_arrived`."""
    _take_arrived(limits, ex)
    page = limits.page_size_tokens
    waiting, running = ex.waiting_requests(), ex.running_requests()
    free_slots = prealloc_free_slots(limits, ex.num_preallocated())
    resume, admit = _preallocate(limits, ex, ex.retracted_requests(), free_slots)
    view = ex.request_view
    kv_tokens = ex.kv_tokens
    done_at_join = ex.done_at_join
    free = ex.free_pages()
    if resume or admit:
        free -= sum(need_now_tokens(view(r), page) // page for r in (*resume, *admit))
    join: list[T] = []
    done: list[T] = []
    if waiting or resume:
        room = limits.max_running_requests - len(running)
        for req in (waiting if not resume else (*waiting, *resume)):
            if len(join) >= room:
                break
            if done_at_join(req):
                done.append(req)
                free += pages_for(kv_tokens(req), page)
            else:
                join.append(req)
    batch = (*running, *join) if join else tuple(running)
    growth = plan_page_growth(batch, free, page, kv_tokens, view)
    if growth.victims or growth.failed:
        out = {id(r) for r in (*growth.victims, *growth.failed)}
        batch = tuple(r for r in batch if id(r) not in out)
    return DecodeStepPlan(resume, admit, tuple(join), tuple(done), growth, batch)


def first_admission_boundary(
    limits: StepLimits, ex: DecodeExecutor[T], k: int, num_running: int, pages_grown: Callable[[int], int],
) -> int:
    """A look-ahead over iterations the running batch runs unchanged (pdsim's spans): the first
    boundary 1..k-1 at which `plan_decode_step`'s pre-allocation would admit or resume a
    request, given the memory those iterations free up (k if none). pages_grown(j): the pages
    the batch takes over its first j iterations; each iteration adds a token per request."""
    base = ex.memory_view()
    free_slots = prealloc_free_slots(limits, ex.num_preallocated())
    view = ex.request_view
    retracted = [view(r) for r in ex.retracted_requests()]
    n, page = num_running, base.page_size_tokens
    for j in range(1, k):
        mem = DecodeMemoryView(
            available_tokens=base.available_tokens - pages_grown(j - 1) * page,
            num_active=base.num_active, reserved_decode_tokens=base.reserved_decode_tokens,
            remaining_output_tokens=base.remaining_output_tokens - n * j,
            largest_need_tokens=base.largest_need_tokens,
            retractable_tokens=base.retractable_tokens + n * j, page_size_tokens=page,
        )
        plan = plan_preallocation(retracted, (view(r) for r in ex.handshaken_requests()), mem, free_slots)
        if plan.resume_ids or plan.admit_ids:
            return j
    return k
