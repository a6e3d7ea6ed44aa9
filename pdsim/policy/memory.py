"""Decode-side KV memory policy: pre-allocation admission and retraction.

The allocatable-tokens rule (SGLang `DecodePreallocQueue._allocatable_tokens`, seeds 000/001):

    allocatable = available
                  - max(reserve for every running/transfer/waiting request,
                        largest running request's total need - retractable tokens)
                  - need of every retracted request still waiting to resume

where the per-request reserve is `reserved_decode_tokens` (constant, SGLang's
--num-reserved-decode-tokens) or, when that is 0, the request's remaining output tokens.
Retracted requests resume first; while any of them still waits, no new request is
pre-allocated. Pre-allocated (prealloc+transfer) requests use their own slots beyond
max_running_requests (DecodeReqToTokenPool). A candidate is admitted only when both its
immediate need (its KV now plus its reserve) and its worst case (prompt + all outputs, minus
what retracting every running request would free) fit in the allocatable tokens.

Retraction victims (SGLang `retract_decode`): fewest generated tokens first, then the longest
prompt, then the highest request_id; never the last running request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Generic, TypeVar

from pdsim.policy.record import Record
from pdsim.policy.views import RequestView, pages_for

T = TypeVar("T")


@dataclass(init=False, slots=True, unsafe_hash=True)
class DecodeMemoryView:
    """Aggregates of one decode instance, in tokens (page-rounded by the caller where held)."""

    available_tokens: Final[int]
    num_active: Final[int]  # running + transfer + waiting
    reserved_decode_tokens: Final[int]  # per request; 0 = each request's remaining output
    remaining_output_tokens: Final[int]  # sum over active requests (used when reserved is 0)
    largest_need_tokens: Final[int]  # max over running of input + output tokens (0 if none)
    retractable_tokens: Final[int]  # KV tokens held by running requests
    page_size_tokens: Final[int]

    def __init__(self, available_tokens: int, num_active: int, reserved_decode_tokens: int,
        remaining_output_tokens: int, largest_need_tokens: int, retractable_tokens: int,
        page_size_tokens: int = 1) -> None:
        self.available_tokens = available_tokens
        self.num_active = num_active
        self.reserved_decode_tokens = reserved_decode_tokens
        self.remaining_output_tokens = remaining_output_tokens
        self.largest_need_tokens = largest_need_tokens
        self.retractable_tokens = retractable_tokens
        self.page_size_tokens = page_size_tokens


@dataclass(init=False, slots=True, unsafe_hash=True)
class PreallocPlan:
    """resume_ids: retracted requests to resume; admit_ids: prealloc-queue requests to admit."""

    resume_ids: Final[tuple[int, ...]]
    admit_ids: Final[tuple[int, ...]]
    allocatable_tokens: Final[int]

    def __init__(self, resume_ids: tuple[int, ...], admit_ids: tuple[int, ...], allocatable_tokens: int) -> None:
        self.resume_ids = resume_ids
        self.admit_ids = admit_ids
        self.allocatable_tokens = allocatable_tokens


def reserve_tokens(req: RequestView, reserved_decode_tokens: int) -> int:
    """KV held back for one request's future decode."""
    return reserved_decode_tokens if reserved_decode_tokens > 0 else req.remaining_output_tokens


def allocatable_tokens(mem: DecodeMemoryView, retracted: Sequence[RequestView] = ()) -> int:
    """The seeds' allocatable-tokens rule (see module docstring)."""
    if mem.reserved_decode_tokens > 0:
        reserve = mem.reserved_decode_tokens * mem.num_active
    else:
        reserve = mem.remaining_output_tokens
    single = mem.largest_need_tokens - mem.retractable_tokens
    waiting_retracted = sum(
        r.input_tokens + r.generated_tokens + mem.reserved_decode_tokens for r in retracted
    )
    return mem.available_tokens - max(reserve, single) - waiting_retracted


def need_now_tokens(req: RequestView, page_size_tokens: int) -> int:
    """KV tokens to allocate now: the prompt plus already generated tokens, page-rounded."""
    return pages_for(req.input_tokens + max(0, req.generated_tokens - 1), page_size_tokens) * page_size_tokens


def plan_preallocation(
    retracted: Iterable[RequestView],
    waiting: Iterable[RequestView],
    mem: DecodeMemoryView,
    free_slots: int,
) -> PreallocPlan:
    """Which retracted requests to resume and which prealloc-queue requests to admit.

    Scans in order and stops at the first that does not fit (FIFO, no overtaking); `waiting` is
    consumed lazily, so a caller may pass a generator over a long queue. Retracted
    requests do not use pre-allocation slots (they go straight back to the waiting queue);
    admitted ones take one slot each.
    """
    allocatable = allocatable_tokens(mem)
    resume: list[int] = []
    for req in retracted:
        cost = need_now_tokens(req, mem.page_size_tokens) + reserve_tokens(req, mem.reserved_decode_tokens)
        if cost > allocatable:
            return PreallocPlan(tuple(resume), (), allocatable)
        resume.append(req.request_id)
        allocatable -= cost
    admit: list[int] = []
    for req in waiting:
        if len(admit) >= free_slots:
            break
        now = need_now_tokens(req, mem.page_size_tokens)
        cost = now + reserve_tokens(req, mem.reserved_decode_tokens)
        worst = req.total_tokens - mem.retractable_tokens
        if max(cost, worst) > allocatable:
            break
        admit.append(req.request_id)
        allocatable -= cost
    return PreallocPlan(tuple(resume), tuple(admit), allocatable)


def retraction_order_key(req: RequestView) -> tuple[int, int, int]:
    """Sort key: smaller keys are retracted first."""
    return (req.generated_tokens, -req.input_tokens, -req.request_id)


def choose_retraction_victims(
    running: Sequence[RequestView], pages_short: int, page_size_tokens: int
) -> tuple[int, ...]:
    """Request ids to retract, in order, until `pages_short` pages are freed.

    Each victim frees the pages its kv_tokens occupy; the last running request is never
    retracted (the caller fails it if it alone cannot fit). Freed pages also remove the
    victim's own next-token page need, which the caller accounts for by re-checking.
    """
    if pages_short <= 0:
        return ()
    victims: list[int] = []
    freed = 0
    for req in sorted(running, key=retraction_order_key):
        if len(victims) >= len(running) - 1 or freed >= pages_short:
            break
        victims.append(req.request_id)
        freed += pages_for(req.kv_tokens, page_size_tokens)
    return tuple(victims)


class GrowthPlan(Record, Generic[T]):
    """Before a decode iteration: who is retracted, who fails, who gets a new page.

    victims: retracted (in order); failed: requests that cannot continue even after retracting
    every other one; grow: requests that get one page for their next token (after the victims
    and failed ones are gone, so it always fits).
    """

    FIELDS: ClassVar[tuple[str, ...]] = ("victims", "failed", "grow")

    def __init__(self, victims: tuple[T, ...], failed: tuple[T, ...], grow: tuple[T, ...]) -> None:
        self.victims: Final = victims
        self.failed: Final = failed
        self.grow: Final = grow


def plan_page_growth(
    batch: Sequence[T], free_pages: int, page_size_tokens: int,
    kv_tokens: Callable[[T], int], view: Callable[[T], RequestView],
) -> GrowthPlan[T]:
    """Give every request of `batch` room for its next token, retracting when pages run short.

    A request whose KV length is a page multiple needs a new page. When more need one than
    `free_pages`, victims come from `choose_retraction_victims` (never the last request); if
    the pages are still short, the one request left fails. Works on the executor's own request
    objects through `kv_tokens` and `view` (views are built only when pages are short).
    """
    page = page_size_tokens
    grow = [r for r in batch if kv_tokens(r) % page == 0]
    if len(grow) <= free_pages:
        return GrowthPlan((), (), tuple(grow))
    by_id = {}
    views = []
    for r in batch:
        v = view(r)
        by_id[v.request_id] = r
        views.append(v)
    victims = tuple(by_id[i] for i in choose_retraction_victims(views, len(grow) - free_pages, page))
    gone = {id(r) for r in victims}
    free = free_pages + sum(pages_for(kv_tokens(r), page) for r in victims)
    left = [r for r in batch if id(r) not in gone]
    grow = [r for r in left if kv_tokens(r) % page == 0]
    if len(grow) <= free:
        return GrowthPlan(victims, (), tuple(grow))
    return GrowthPlan(victims, tuple(left), ())


def next_new_token_ratio(current: float, decay: float, minimum: float) -> float:
    """SGLang's per-step decay of the new-token ratio used by mixed-batch admission."""
    return max(current - decay, minimum)
