"""A decode instance's boundary decisions, executed: the step plan of `plan_decode_step` applied
to its queues, pages and trace marks (`apply_plan`), the pre-allocation of prefill_end hand-offs
(`admit_handed_off`) and the look-ahead that ends a span where the shared pre-allocation rule
would next admit or resume a request (`prealloc_limit`).

The decisions themselves are pdsim.policy's (the same calls pdreal's DecodeEngine makes); these
functions only carry them out in simulated time, on what `DecodeQueues` declares of a decode
instance (decode.py's DecodeInstance implements it; this module does not import decode.py).
"""

from __future__ import annotations

from typing import Final

from mypy_extensions import trait

from pdsim.policy import (
    DecodeMemoryView,
    DecodeStepPlan,
    RequestView,
    plan_preallocation,
    prealloc_free_slots,
)
from pdsim.policy.decisions import DecisionLog
from pdsim.policy.limits import StepLimits
from pdsim.policy.memory import need_now_tokens
from pdsim.sim.events import EventQueue, now_s
from pdsim.sim.kv_pool import KVPool
from pdsim.sim.pagegrowth import PageGrowth
from pdsim.sim.span import BatchOwner
from pdsim.sim.state import (
    FIRST_TOKEN_S,
    PREALLOC_LEAVE_S,
    RUNNING_ENTER_S,
    TRANSFER_QUEUE_ENTER_S,
    SimHooks,
    SimRequest,
)

# While requests wait for pre-allocation, a span looks this many boundaries ahead (one policy
# call per boundary): the admission point is found without stepping, at a bounded cost per span.
PREALLOC_LOOKAHEAD: Final = 64


@trait
class DecodeQueues(BatchOwner):
    """What the functions below use of a decode instance: its queues, pages and counters, and
    the calls a plan makes back (a mypyc trait, not a Protocol: compiled, these reads are
    direct, not looked up by name). Queues by request id: prealloc -> transfer -> waiting ->
    running, and retracted."""

    events: EventQueue
    hooks: SimHooks
    decisions: DecisionLog | None
    limits: StepLimits
    pool: KVPool
    page: int  # page size (tokens)
    reload_s_per_token: float
    handoff_at_prefill_end: bool
    control_plane_latency_s: float
    prealloc: dict[int, SimRequest]
    retracted: dict[int, SimRequest]
    transfer: dict[int, SimRequest]
    waiting: dict[int, SimRequest]
    ctx_tokens: int
    remaining_output_tokens: int
    queued_requests: int
    queued_tokens: int
    retractions: int

    def notify(self) -> None:
        raise NotImplementedError

    def prebuilt(self, sr: SimRequest) -> None:
        """`sr`'s KV is here: it waits to join the running batch."""
        raise NotImplementedError

    def finish_request(self, sr: SimRequest) -> None:
        raise NotImplementedError

    def memory_view(self) -> DecodeMemoryView:
        raise NotImplementedError


def apply_plan(inst: DecodeQueues, plan: DecodeStepPlan[SimRequest]) -> float:
    """Execute a step plan now; returns the KV reload time of the resumed requests."""
    if inst.decisions is not None:
        inst.decisions.decode(now_s(inst.events), inst.name, plan, request_id)
    if not plan.changes:
        allocate = inst.pool.allocate
        for sr in plan.growth.grow:
            allocate(sr.rid, 1)
            sr.d_pages += 1
        return 0.0
    now = now_s(inst.events)
    reload_tokens = 0
    for sr in plan.resume:
        del inst.retracted[sr.rid]
        allocate_now(inst, sr)
        reload_tokens += sr.kv_tokens
        inst.waiting[sr.rid] = sr
        inst.remaining_output_tokens += remaining_tokens(sr)
    for sr in plan.admit:
        del inst.prealloc[sr.rid]
        _admit(inst, sr, now)
    for sr in plan.finish_at_join:
        del inst.waiting[sr.rid]
        deliver_first_token(inst, sr, now)
        inst.remaining_output_tokens -= remaining_tokens(sr)
        inst.finish_request(sr)
    for sr in plan.join:
        del inst.waiting[sr.rid]
        deliver_first_token(inst, sr, now)
        inst.running[sr.rid] = sr
        inst.ctx_tokens += sr.kv_tokens
    for sr in plan.growth.victims:
        retract(inst, sr)
    for sr in plan.growth.failed:
        inst.hooks.abort(sr, f"decode KV exhausted on {inst.name}")
    for sr in plan.growth.grow:
        inst.pool.allocate(sr.rid, 1)
        sr.d_pages += 1
    return reload_tokens * inst.reload_s_per_token


def _admit(inst: DecodeQueues, sr: SimRequest, now: float) -> None:
    """A pre-allocated request: its transfer may start (or, prefill_end hand-off, it joins next)."""
    allocate_now(inst, sr)
    sr.mark(PREALLOC_LEAVE_S, now)
    inst.remaining_output_tokens += remaining_tokens(sr)
    if inst.handoff_at_prefill_end:  # the KV is already here: join next
        inst.prebuilt(sr)
        inst.hooks.after(0.0, inst.notify)
        return
    sr.mark(TRANSFER_QUEUE_ENTER_S, now)
    inst.transfer[sr.rid] = sr
    inst.hooks.after(inst.control_plane_latency_s, sr.prefill_side().on_transfer_info, sr, sr.attempt)


def allocate_now(inst: DecodeQueues, sr: SimRequest) -> None:
    pages = need_now_tokens(request_view(sr), inst.page) // inst.page
    inst.pool.allocate(sr.rid, pages)
    sr.d_pages = pages
    sr.kv_tokens = sr.req.input_tokens + max(0, sr.generated - 1)


def deliver_first_token(inst: DecodeQueues, sr: SimRequest, now: float) -> None:
    """Joining the running batch delivers the first token (made by prefill) - once; a prefill
    that made none (cluster.prefill_emits_token=false) delivers it at the first iteration."""
    if sr.has_time(RUNNING_ENTER_S):
        return
    sr.set_time(RUNNING_ENTER_S, now)
    inst.queued_requests -= 1
    inst.queued_tokens -= sr.req.input_tokens
    if sr.generated > 0:
        sr.set_time(FIRST_TOKEN_S, now)
        if sr.token_times is not None:
            sr.token_times.append(now)


def retract(inst: DecodeQueues, sr: SimRequest) -> None:
    del inst.running[sr.rid]
    inst.remaining_output_tokens -= remaining_tokens(sr)
    inst.ctx_tokens -= sr.kv_tokens
    inst.pool.free(sr.rid)
    sr.d_pages = 0
    sr.num_retractions += 1
    inst.retractions += 1
    inst.retracted[sr.rid] = sr


def admit_handed_off(inst: DecodeQueues) -> None:
    """prefill_end hand-off: requests whose KV is here take their pages by the shared
    pre-allocation rule (retracted requests keep their priority) and wait to join, so the
    step plan joins them at this very boundary."""
    if not inst.prealloc:
        return
    free_slots = prealloc_free_slots(inst.limits, len(inst.transfer), len(inst.waiting))
    retracted = [request_view(sr) for sr in inst.retracted.values()]
    arrived = (request_view(sr) for sr in inst.prealloc.values())
    for rid in plan_preallocation(retracted, arrived, inst.memory_view(), free_slots).admit_ids:
        sr = inst.prealloc.pop(rid)
        allocate_now(inst, sr)
        sr.mark(PREALLOC_LEAVE_S, now_s(inst.events))
        inst.remaining_output_tokens += remaining_tokens(sr)
        inst.prebuilt(sr)


def prealloc_limit(inst: DecodeQueues, k: int, n: int, growth: PageGrowth) -> int:
    """The first boundary 1..k-1 at which the shared pre-allocation plan would admit or
    resume a request, given the memory those boundaries free up (k if none)."""
    base = inst.memory_view()
    free_slots = prealloc_free_slots(inst.limits, len(inst.transfer), len(inst.waiting))
    retracted = [request_view(sr) for sr in inst.retracted.values()]
    for j in range(1, k):
        mem = DecodeMemoryView(
            available_tokens=base.available_tokens - growth.pages(j - 1) * inst.page,
            num_active=base.num_active, reserved_decode_tokens=base.reserved_decode_tokens,
            remaining_output_tokens=base.remaining_output_tokens - n * j,
            largest_need_tokens=base.largest_need_tokens,
            retractable_tokens=base.retractable_tokens + n * j, page_size_tokens=inst.page,
        )
        handshaken = (request_view(sr) for sr in inst.prealloc.values() if sr.handshaken)
        plan = plan_preallocation(retracted, handshaken, mem, free_slots)
        if plan.resume_ids or plan.admit_ids:
            return j
    return k


def request_view(sr: SimRequest) -> RequestView:
    return RequestView(sr.rid, sr.req.input_tokens, sr.req.output_tokens,
                       generated_tokens=sr.generated, kv_tokens=sr.kv_tokens)


def request_id(sr: SimRequest) -> int:
    return sr.rid


def remaining_tokens(sr: SimRequest) -> int:
    return max(0, sr.req.output_tokens - sr.generated)
