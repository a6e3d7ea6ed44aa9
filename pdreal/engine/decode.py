"""The decode instance's loop (the seeds' decode server).

    add_request -> prealloc queue  (KVReceiver created; pages pre-allocated when pdsim.policy's
                                    allocatable-tokens rule admits it; retracted requests first)
                -> transfer queue  (poll the receiver until the KV and aux have arrived)
                -> waiting queue   (prebuilt: no forward; the first token came with the aux)
                -> running batch   (joined in FIFO order while there is room; joining delivers the
                                    first token, before this step's forward, as SGLang streams a
                                    prebuilt batch; continuous batching; retraction when pages
                                    run out)
                -> finish          (max_new_tokens, EOS or stop token; pages freed)

Every step: observe (aborts, failed receivers, arrived KV), then one call to
`pdsim.policy.plan_decode_step` - the same call pdsim's DecodeInstance makes - decides resumes,
pre-allocations, joins, retraction victims and the batch, reading DecodeEngine as its
`DecodeExecutor`; this module executes the plan.
Retracted requests offload their KV pages to host memory and reload them when resumed (SGLang's
decode side, seed 001 section 7.4); they rejoin the waiting queue's tail.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from pdreal.engine.common import (
    EngineConfig,
    EngineRequest,
    EngineStats,
    GuardedStep,
    ModelRunner,
    RequestOutput,
    check_engine_invariants,
    engine_stats,
    generation_row,
    oversize_reason,
    step_victims,
    stop_reached,
)
from pdreal.kv.allocator import PageAllocator
from pdreal.model.batch import SeqChunk
from pdreal.model.sampling import sample, token_logprobs
from pdreal.transfer.base import KVManager, KVPoll, KVReceiver
from pdreal.transfer.common import TimeSource
from pdsim.policy import (
    DecodeMemoryView,
    DecodeStepPlan,
    RequestView,
    need_now_tokens,
    plan_decode_step,
)
from pdsim.policy.decisions import DecisionLog
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED

log = logging.getLogger(__name__)


@dataclass
class DecodeState:
    req: EngineRequest
    receiver: KVReceiver | None
    pages: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    kv_tokens: int = 0  # tokens whose KV is in the pages (prompt + outputs but the last)
    host_kv: torch.Tensor | None = None  # the offloaded KV while retracted
    num_retractions: int = 0
    times: dict[str, float] = field(default_factory=dict)
    done: bool = False  # finished (any status): a failed step must not finish it twice
    token_times_s: list[float] = field(default_factory=list)

    @property
    def kv_receiver(self) -> KVReceiver:
        """Its KV receiver: made on admission, before the request enters any queue."""
        assert self.receiver is not None, f"request {self.req.request_id} has no KV receiver"
        return self.receiver

    def view(self) -> RequestView:
        r = self.req
        return RequestView(r.request_id, len(r.input_ids), r.sampling.max_new_tokens,
                           generated_tokens=len(self.output_ids), kv_tokens=self.kv_tokens)

    def chunk(self) -> SeqChunk:
        return SeqChunk([self.output_ids[-1]], self.kv_tokens, self.pages)

    @property
    def delivered(self) -> bool:
        """Whether the first token has gone out (the request joined the running batch)."""
        return "running_enter_s" in self.times


class DecodeEngine(GuardedStep):
    def __init__(self, runner: ModelRunner, kv_manager: KVManager, config: EngineConfig,
                 now_s: TimeSource = time.monotonic) -> None:
        self.runner, self.kv, self.config, self.now_s = runner, kv_manager, config, now_s
        self.limits = config.limits
        self.decisions: DecisionLog | None = None  # scheduling decisions, when asked (lockstep test)
        self.eos_ids = frozenset(runner.model.spec.eos_token_ids)
        self.prealloc: list[DecodeState] = []
        self.retracted: deque[DecodeState] = deque()
        self.transfer: list[DecodeState] = []
        self.waiting: deque[DecodeState] = deque()
        self.running: list[DecodeState] = []
        self._outputs: list[RequestOutput] = []
        self._aborts: dict[int, str] = {}
        self._batch: list[DecodeState] = []  # the requests the current forward (or plan) works on
        self._handshaken: list[DecodeState] = []  # prealloc-queue requests whose receiver is ready
        self.num_added = self.num_finished = self.num_failed = 0
        self.emit: Callable[[list[RequestOutput]], None] | None = None

    @property
    def allocator(self) -> PageAllocator:
        return self.runner.pool.allocator

    def set_emitter(self, emit: Callable[[list[RequestOutput]], None] | None) -> None:
        """Deliver outputs produced before the forward (first tokens, failures) through `emit`
        at once instead of returning them from `step()` after the forward."""
        self.emit = emit

    def add_request(self, req: EngineRequest) -> None:
        """Enter the prealloc queue (or finish at once as rejected); duplicate live ids raise ValueError."""
        if any(s.req.request_id == req.request_id for s in self.live()):
            raise ValueError(f"request_id {req.request_id} is already in this decode engine")
        self.num_added += 1
        state = DecodeState(req, None, times={"prealloc_enter_s": self.now_s()})
        reason = oversize_reason(req, self.config, self.allocator.num_pages, self.runner.model.spec.context_length)
        if reason:
            self._finish(state, STATUS_REJECTED, reason)
            return
        state.receiver = self.kv.create_receiver(req.bootstrap_addr, req.bootstrap_room)
        self.prealloc.append(state)

    def has_work(self) -> bool:
        return bool(self.prealloc or self.retracted or self.transfer or self.waiting or self.running)

    def ready_to_run(self) -> bool:
        """True when the next step has a forward to run (else a server loop may sleep a little)."""
        return bool(self.running or self.waiting)

    def _fail_step(self, exc: Exception) -> None:
        reason, victims, ids = step_victims(self._batch, self.live(), exc, f"decode {self.config.instance_id}")
        for name in ("prealloc", "transfer", "running"):
            setattr(self, name, [s for s in getattr(self, name) if id(s) not in ids])
        self.retracted = deque(s for s in self.retracted if id(s) not in ids)
        self.waiting = deque(s for s in self.waiting if id(s) not in ids)
        self._batch = []
        for state in victims:
            state.host_kv = None
            if state.receiver is not None:
                with contextlib.suppress(Exception):  # its room may be gone already
                    state.kv_receiver.abort(reason)
            self._finish(state, STATUS_FAILED, reason)

    def _step(self) -> None:
        self._apply_aborts()
        self._handshaken = self._poll_prealloc()
        self._poll_transfer()
        while True:
            plan = plan_decode_step(self.limits, self)  # the shared decision (pdsim.policy.decode_step)
            self._apply(plan, self.now_s())
            if not plan.replan:
                break
            waiting_ids = {id(s) for s in self.prealloc}
            self._handshaken = [s for s in self._handshaken if id(s) in waiting_ids]
        self._handshaken = []
        self._emit_early()
        if self.running:
            batch = self._batch = list(self.running)
            logits = self.runner.forward([s.chunk() for s in batch])
            self._postprocess(batch, logits)
        self._batch = []

    def _emit_early(self) -> None:
        """First tokens (made by prefill, delivered on joining) leave now, not after the forward."""
        if self.emit is not None and self._outputs:
            outputs, self._outputs = self._outputs, []
            self.emit(outputs)

    def _poll_prealloc(self) -> list[DecodeState]:
        """Fail requests whose receiver failed; the handshaken ones, in queue order."""
        ready: list[DecodeState] = []
        for state in list(self.prealloc):
            poll = state.kv_receiver.poll()
            if poll == KVPoll.Failed:
                self.prealloc.remove(state)
                self._finish(state, STATUS_FAILED, state.kv_receiver.failure_reason)
            elif poll >= KVPoll.WaitingForInput:
                ready.append(state)
        return ready

    def _poll_transfer(self) -> None:
        """Arrived KV: the request waits to join with its first token (from the aux)."""
        for state in list(self.transfer):
            poll = state.kv_receiver.poll()
            if poll not in (KVPoll.Success, KVPoll.Failed):
                continue
            self.transfer.remove(state)
            if poll == KVPoll.Failed:
                self._finish(state, STATUS_FAILED, state.kv_receiver.failure_reason)
                continue
            aux, now = state.kv_receiver.aux(), self.now_s()
            state.times.update(transfer_queue_leave_s=now, decode_waiting_enter_s=now)
            if aux is not None:
                state.times.update(transfer_start_s=aux.transfer_start_s, transfer_end_s=aux.transfer_end_s)
                state.times["transfer_bytes"] = aux.transfer_bytes
            state.kv_tokens = len(state.req.input_ids)
            state.output_ids.append(aux.first_token_id if aux is not None else 0)
            self.waiting.append(state)

    # -- pdsim.policy.DecodeExecutor: what the shared step planner reads ------------------
    def retracted_requests(self) -> list[DecodeState]:
        return list(self.retracted)

    def arrived_requests(self) -> tuple[()]:
        """(none: the KV always arrives after pre-allocation, SGLang's prealloc hand-off)"""
        return ()

    def take_arrived(self, reqs: tuple[DecodeState, ...]) -> None:
        raise RuntimeError(f"decode {self.config.instance_id}: no request arrives before its pre-allocation")

    def handshaken_requests(self) -> list[DecodeState]:
        return self._handshaken

    def num_preallocated(self) -> int:
        return len(self.transfer) + len(self.waiting)

    def waiting_requests(self) -> list[DecodeState]:
        return list(self.waiting)

    def running_requests(self) -> list[DecodeState]:
        return list(self.running)

    def free_pages(self) -> int:
        return self.allocator.num_free

    def memory_view(self) -> DecodeMemoryView:
        c, active = self.config, [*self.running, *self.transfer, *self.waiting]
        return DecodeMemoryView(
            available_tokens=self.allocator.num_free * c.page_size_tokens,
            num_active=len(active),
            reserved_decode_tokens=c.decode_reserved_tokens,
            remaining_output_tokens=sum(s.view().remaining_output_tokens for s in active),
            largest_need_tokens=max((s.view().total_tokens for s in self.running), default=0),
            retractable_tokens=sum(s.kv_tokens for s in self.running),
            page_size_tokens=c.page_size_tokens,
        )

    def kv_tokens(self, state: DecodeState) -> int:
        return state.kv_tokens

    def request_view(self, state: DecodeState) -> RequestView:
        return state.view()

    def done_at_join(self, state: DecodeState) -> bool:
        return self._done(state)

    def _apply(self, plan: DecodeStepPlan[DecodeState], now: float) -> None:
        """Execute the step plan (pdsim.policy.decode_step's order; the transfer info of admitted
        requests goes out before the resumed requests' KV reload, which delays only the forward)."""
        if self.decisions is not None:
            self.decisions.decode(now, f"decode:{self.config.instance_id}", plan, _request_id)
        # the requests this plan moves between queues: the victims should executing it fail
        self._batch = [*plan.admit, *plan.resume, *plan.finish_at_join, *plan.join, *plan.growth.victims,
                       *plan.growth.grow]
        page = self.config.page_size_tokens
        for state in plan.admit:
            self.prealloc.remove(state)
            state.pages = self.allocator.allocate(need_now_tokens(state.view(), page) // page)
            state.times.update(prealloc_leave_s=now, transfer_queue_enter_s=now)
            state.kv_receiver.init(state.pages)
            self.transfer.append(state)
        for state in plan.resume:
            self.retracted.remove(state)
            state.pages = self.allocator.allocate(need_now_tokens(state.view(), page) // page)
            assert state.host_kv is not None  # (offloaded when it was retracted)
            self.runner.reload_kv(state.pages, state.host_kv)
            state.host_kv = None
            self.waiting.append(state)
        for state in plan.finish_at_join:
            self.waiting.remove(state)
            self._deliver_first_token(state, now)
            self._finish(state, STATUS_FINISHED, "")
        for state in plan.join:
            self.waiting.remove(state)
            self._deliver_first_token(state, now)
            self.running.append(state)
        for state in plan.growth.victims:
            self._retract(state)
        for state in plan.growth.failed:
            self.running.remove(state)
            self._finish(state, STATUS_FAILED, f"KV pool of {self.config.kv_capacity_tokens} tokens "
                         f"cannot hold request {state.req.request_id}")
        for state in plan.growth.grow:
            state.pages.extend(self.allocator.allocate(1))
        self._batch = []

    def _deliver_first_token(self, state: DecodeState, now: float) -> None:
        if state.delivered:
            return
        state.times.update(running_enter_s=now, first_token_s=now)
        state.token_times_s.append(now)
        self._outputs.append(RequestOutput(state.req.request_id, (state.output_ids[0],)))

    def _retract(self, state: DecodeState) -> None:
        """Offload the KV to host, free the pages; the request waits in `retracted`."""
        self.running.remove(state)
        state.host_kv = self.runner.offload_kv(state.pages, state.kv_tokens)
        self.allocator.free(state.pages)
        state.pages = []
        state.num_retractions += 1
        self.retracted.append(state)

    def _postprocess(self, batch: list[DecodeState], logits: torch.Tensor) -> None:
        params = [s.req.sampling for s in batch]
        tokens = sample(logits, params, [len(s.output_ids) for s in batch])
        logprobs = token_logprobs(logits, tokens, params)
        now = self.now_s()
        for state, token, logprob in zip(batch, tokens, logprobs, strict=True):
            state.kv_tokens += 1
            self._append_token(state, token, now, logprob)
            if self._done(state):
                self.running.remove(state)

    def _append_token(self, state: DecodeState, token: int, now: float, logprob: Any = None) -> None:
        """A decoded token: out at once; the request finishes when it stops."""
        state.output_ids.append(token)
        state.token_times_s.append(now)
        self._outputs.append(RequestOutput(state.req.request_id, (token,),
                                           logprobs=(logprob,) if logprob is not None else ()))
        if self._done(state):
            self._finish(state, STATUS_FINISHED, "")

    def _done(self, state: DecodeState) -> bool:
        return stop_reached(state.output_ids, state.req.sampling, self.eos_ids)

    def _finish(self, state: DecodeState, status: str, reason: str) -> None:
        now = self.now_s()
        state.done = True
        self.allocator.free(state.pages)
        state.pages = []
        if state.receiver is not None:
            state.kv_receiver.close()
        self.num_finished += status == STATUS_FINISHED
        self.num_failed += status != STATUS_FINISHED
        req, times = state.req, dict(state.times)
        transfer_bytes = int(times.pop("transfer_bytes", 0))
        row = generation_row(req, state.output_ids, state.token_times_s, status, reason, now, state.num_retractions,
                             mode="disaggregated", decode_instance=self.config.instance_id,
                             transfer_bytes=transfer_bytes, **times)
        self._outputs.append(RequestOutput(req.request_id, (), True, status, reason, row))

    def abort(self, request_id: int, reason: str) -> None:
        """Fail the request at the start of the next step, wherever it is."""
        self._aborts[request_id] = reason

    def _apply_aborts(self) -> None:
        if not self._aborts:
            return
        for queue in (self.prealloc, self.retracted, self.transfer, self.waiting, self.running):
            for state in [s for s in queue if s.req.request_id in self._aborts]:
                queue.remove(state)
                state.host_kv = None
                if state.receiver is not None:
                    state.kv_receiver.abort(self._aborts[state.req.request_id])
                self._finish(state, STATUS_FAILED, self._aborts[state.req.request_id])
        self._aborts.clear()

    def live(self) -> list[DecodeState]:
        return [*self.prealloc, *self.retracted, *self.transfer, *self.waiting, *self.running]

    def stats(self) -> EngineStats:
        queues = {"prealloc": len(self.prealloc) + len(self.retracted), "transfer": len(self.transfer),
                  "waiting": len(self.waiting), "running": len(self.running)}
        return engine_stats(self, queues)

    def check_invariants(self) -> None:
        """No page leaked; every request accounted for; no transfer room left open when idle."""
        check_engine_invariants(self, "decode")


def _request_id(state: DecodeState) -> int:
    return state.req.request_id

