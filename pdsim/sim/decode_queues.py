"""A decode instance's queues and what changes them: `DecodeQueues`, the base class of
decode.py's DecodeInstance (which adds the scheduler loop, the messages and the spans).

Queues by request id: prealloc -> transfer -> waiting -> running, and retracted. DecodeQueues is
the `pdsim.policy.executors.DecodeExecutor` the shared planner reads (`plan_decode_step`, the
call pdreal's DecodeEngine makes too); `apply_plan` carries a step plan out in simulated time:
queues, pages, counters and trace marks. The decisions themselves are pdsim.policy's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from pdsim.perf import LatencyModel
from pdsim.policy import (
    DecodeMemoryView,
    DecodeStepPlan,
    RequestView,
)
from pdsim.policy.memory import need_now_tokens
from pdsim.sim.events import now_s
from pdsim.sim.handoff import tokens_after_prefill
from pdsim.sim.instance import InstanceBase, InstanceContext
from pdsim.sim.kv_pool import KVPool
from pdsim.sim.span import BatchOwner
from pdsim.sim.state import (
    DECODE_WAITING_ENTER_S,
    FIRST_TOKEN_S,
    LAST_TOKEN_S,
    PREALLOC_LEAVE_S,
    RUNNING_ENTER_S,
    TRANSFER_QUEUE_ENTER_S,
    SimRequest,
)


class DecodeQueues(InstanceBase, BatchOwner):
    """A decode instance's queues, pages and counters (see the module docstring)."""

    def __init__(
        self, index: int, ctx: InstanceContext, latency: LatencyModel, pool: KVPool, reload_s_per_token: float
    ) -> None:
        super().__init__(index, ctx, latency)
        self.pool = pool
        self.page = pool.page_size_tokens
        self.reload_s_per_token = reload_s_per_token
        self.prealloc: dict[int, SimRequest] = {}
        self.retracted: dict[int, SimRequest] = {}
        self.transfer: dict[int, SimRequest] = {}
        self.waiting: dict[int, SimRequest] = {}
        self.running: dict[int, SimRequest] = {}
        self.ctx_tokens = 0
        self.remaining_output_tokens = 0  # over running + transfer + waiting (memory_view)
        self.retractions = 0
        # the planner's per-request reads (DecodeExecutor): attributes holding plain functions,
        # not methods - called per running request per plan, with no bound method in between
        self.kv_tokens: Callable[[SimRequest], int] = _kv_tokens
        self.request_view: Callable[[SimRequest], RequestView] = request_view
        self.done_at_join: Callable[[SimRequest], bool] = _done_at_join

    # -- pdsim.policy.DecodeExecutor: what the shared step planner reads and asks ------------
    def retracted_requests(self) -> list[SimRequest]:
        return list(self.retracted.values()) if self.retracted else []

    def arrived_requests(self) -> Sequence[SimRequest]:
        """(prefill_end hand-off: every prealloc-queue request's KV is here)"""
        return list(self.prealloc.values()) if self.handoff_at_prefill_end and self.prealloc else ()

    def take_arrived(self, reqs: tuple[SimRequest, ...]) -> None:
        for sr in reqs:
            del self.prealloc[sr.rid]
            self.allocate_now(sr)
            sr.mark(PREALLOC_LEAVE_S, now_s(self.events))
            self.remaining_output_tokens += remaining_tokens(sr)
            self.prebuilt(sr)

    def handshaken_requests(self) -> Iterable[SimRequest]:
        return (sr for sr in self.prealloc.values() if sr.handshaken) if self.prealloc else ()

    def num_preallocated(self) -> int:
        return len(self.transfer) + len(self.waiting)

    def waiting_requests(self) -> list[SimRequest]:
        return list(self.waiting.values())

    def running_requests(self) -> list[SimRequest]:
        return list(self.running.values())

    def free_pages(self) -> int:
        return self.pool.free_pages

    def memory_view(self) -> DecodeMemoryView:
        """The allocatable-tokens inputs; the remaining-output sum is kept up to date as
        requests enter and leave the active queues and decode (no scan of the queues)."""
        largest_need = 0  # (a loop, not max() over a generator: compiled, no generic call)
        for sr in self.running.values():
            need = sr.req.input_tokens + sr.req.output_tokens
            if need > largest_need:
                largest_need = need
        return DecodeMemoryView(
            available_tokens=self.pool.free_pages * self.page,
            num_active=len(self.running) + len(self.transfer) + len(self.waiting),
            reserved_decode_tokens=self.cfg.policy.decode_reserved_tokens,
            remaining_output_tokens=self.remaining_output_tokens,
            largest_need_tokens=largest_need,
            retractable_tokens=self.ctx_tokens,
            page_size_tokens=self.page,
        )

    # -- the plan, carried out ---------------------------------------------------------------
    def apply_plan(self, plan: DecodeStepPlan[SimRequest]) -> float:
        """Execute a step plan now; returns the KV reload time of the resumed requests."""
        if self.decisions is not None:
            self.decisions.decode(now_s(self.events), self.name, plan, request_id)
        if not plan.changes:
            allocate = self.pool.allocate
            for sr in plan.growth.grow:
                allocate(sr.rid, 1)
                sr.d_pages += 1
            return 0.0
        now = now_s(self.events)
        reload_tokens = 0
        for sr in plan.resume:
            del self.retracted[sr.rid]
            self.allocate_now(sr)
            reload_tokens += sr.kv_tokens
            self.waiting[sr.rid] = sr
            self.remaining_output_tokens += remaining_tokens(sr)
        for sr in plan.admit:
            del self.prealloc[sr.rid]
            self._admit(sr, now)
        for sr in plan.finish_at_join:
            del self.waiting[sr.rid]
            self.deliver_first_token(sr, now)
            self.remaining_output_tokens -= remaining_tokens(sr)
            self.finish_request(sr)
        for sr in plan.join:
            del self.waiting[sr.rid]
            self.deliver_first_token(sr, now)
            self.running[sr.rid] = sr
            self.ctx_tokens += sr.kv_tokens
        for sr in plan.growth.victims:
            self.retract(sr)
        for sr in plan.growth.failed:
            self.hooks.abort(sr, f"decode KV exhausted on {self.name}")
        for sr in plan.growth.grow:
            self.pool.allocate(sr.rid, 1)
            sr.d_pages += 1
        return reload_tokens * self.reload_s_per_token

    def _admit(self, sr: SimRequest, now: float) -> None:
        """A pre-allocated request: its transfer may start (or, prefill_end hand-off, it joins next)."""
        self.allocate_now(sr)
        sr.mark(PREALLOC_LEAVE_S, now)
        self.remaining_output_tokens += remaining_tokens(sr)
        if self.handoff_at_prefill_end:  # the KV is already here: join next
            self.prebuilt(sr)
            self.hooks.after(0.0, self.notify)
            return
        sr.mark(TRANSFER_QUEUE_ENTER_S, now)
        self.transfer[sr.rid] = sr
        self.hooks.after(self.control_plane_latency_s, sr.prefill_side().on_transfer_info, sr, sr.attempt)

    def allocate_now(self, sr: SimRequest) -> None:
        pages = need_now_tokens(request_view(sr), self.page) // self.page
        self.pool.allocate(sr.rid, pages)
        sr.d_pages = pages
        sr.kv_tokens = sr.req.input_tokens + max(0, sr.generated - 1)

    def prebuilt(self, sr: SimRequest) -> None:
        """`sr`'s KV is here: it waits to join the running batch."""
        sr.mark(DECODE_WAITING_ENTER_S, now_s(self.events))
        self.remaining_output_tokens -= remaining_tokens(sr)
        sr.generated = tokens_after_prefill(self.cfg.cluster)
        self.remaining_output_tokens += remaining_tokens(sr)
        self.waiting[sr.rid] = sr
        self.notify()

    def deliver_first_token(self, sr: SimRequest, now: float) -> None:
        """Joining the running batch delivers the first token (made by prefill) - once; a prefill
        that made none (cluster.prefill_emits_token=false) delivers it at the first iteration."""
        if sr.has_time(RUNNING_ENTER_S):
            return
        sr.set_time(RUNNING_ENTER_S, now)
        self.queued_requests -= 1
        self.queued_tokens -= sr.req.input_tokens
        if sr.generated > 0:
            sr.set_time(FIRST_TOKEN_S, now)
            if sr.token_times is not None:
                sr.token_times.append(now)

    def retract(self, sr: SimRequest) -> None:
        del self.running[sr.rid]
        self.remaining_output_tokens -= remaining_tokens(sr)
        self.ctx_tokens -= sr.kv_tokens
        self.pool.free(sr.rid)
        sr.d_pages = 0
        sr.num_retractions += 1
        self.retractions += 1
        self.retracted[sr.rid] = sr

    def finish_request(self, sr: SimRequest) -> None:
        sr.set_time(LAST_TOKEN_S, now_s(self.events))
        self.pool.free(sr.rid)
        sr.d_pages = 0
        self.hooks.finish(sr)


def request_view(sr: SimRequest) -> RequestView:
    return RequestView(sr.rid, sr.req.input_tokens, sr.req.output_tokens,
                       generated_tokens=sr.generated, kv_tokens=sr.kv_tokens)


def request_id(sr: SimRequest) -> int:
    return sr.rid


def remaining_tokens(sr: SimRequest) -> int:
    return max(0, sr.req.output_tokens - sr.generated)


_kv_tokens: Callable[[SimRequest], int] = attrgetter("kv_tokens")  # C-level: called per running request per plan


def _done_at_join(sr: SimRequest) -> bool:
    return sr.generated >= sr.req.output_tokens
