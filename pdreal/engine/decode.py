"""The decode instance's loop (the seeds' decode server).

    add_request -> prealloc queue  (KVReceiver created; pages pre-allocated when pdsim.policy's
                                    allocatable-tokens rule admits it; retracted requests first)
                -> transfer queue  (poll the receiver until the KV and aux have arrived)
                -> waiting queue   (prebuilt: no forward, the first token came with the aux and is
                                    emitted as soon as the poll sees the KV, before this step's
                                    forward, as SGLang streams a prebuilt batch's first tokens)
                -> running batch   (continuous batching; retraction when pages run out)
                -> finish          (max_new_tokens, EOS or stop token; pages freed)

Retracted requests free their KV and recompute it locally (one extend chunk of prompt + output
so far) when resumed. Each `step()` is schedule -> run -> postprocess.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from pdreal.engine.common import (
    EngineConfig,
    EngineRequest,
    EngineStats,
    ModelRunner,
    RequestOutput,
    check_engine_invariants,
    engine_stats,
    generation_row,
    oversize_reason,
    stop_reached,
)
from pdreal.kv.allocator import PageAllocator, pages_for_tokens
from pdreal.model.batch import SeqChunk
from pdreal.model.sampling import sample
from pdreal.transfer.base import KVManager, KVPoll, KVReceiver
from pdreal.transfer.common import Clock
from pdsim.policy import (
    DecodeMemoryView,
    RequestView,
    choose_retraction_victims,
    need_now_tokens,
    plan_preallocation,
)
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED


@dataclass
class DecodeState:
    req: EngineRequest
    receiver: KVReceiver | None
    pages: list[int] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    kv_tokens: int = 0
    needs_extend: bool = False
    num_retractions: int = 0
    times: dict[str, float] = field(default_factory=dict)
    token_times_s: list[float] = field(default_factory=list)

    def view(self) -> RequestView:
        r = self.req
        return RequestView(r.request_id, len(r.input_ids), r.sampling.max_new_tokens,
                           generated_tokens=len(self.output_ids), kv_tokens=self.kv_tokens)

    def chunk(self) -> SeqChunk:
        if self.needs_extend:
            return SeqChunk(list(self.req.input_ids) + self.output_ids, 0, self.pages)
        return SeqChunk([self.output_ids[-1]], self.kv_tokens, self.pages)

    def tokens_after_step(self) -> int:
        return len(self.req.input_ids) + len(self.output_ids)


class DecodeEngine:
    def __init__(self, runner: ModelRunner, kv_manager: KVManager, config: EngineConfig,
                 clock: Clock = time.monotonic) -> None:
        self.runner, self.kv, self.config, self.clock = runner, kv_manager, config, clock
        self.eos_ids = frozenset(runner.model.spec.eos_token_ids)
        self.prealloc: list[DecodeState] = []
        self.retracted: deque[DecodeState] = deque()
        self.transfer: list[DecodeState] = []
        self.waiting: deque[DecodeState] = deque()
        self.running: list[DecodeState] = []
        self._outputs: list[RequestOutput] = []
        self._aborts: dict[int, str] = {}
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
        state = DecodeState(req, None, times={"prealloc_enter_s": self.clock()})
        reason = oversize_reason(req, self.config, self.allocator.num_pages)
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

    def step(self) -> list[RequestOutput]:
        self._apply_aborts()
        self._poll_prealloc()
        self._poll_transfer()
        self._emit_early()
        while self.waiting and len(self.running) < self.config.max_running_requests:
            state = self.waiting.popleft()
            state.times.setdefault("running_enter_s", self.clock())
            self.running.append(state)
        batch = self._schedule()
        if batch:
            logits = self.runner.forward([s.chunk() for s in batch])
            self._postprocess(batch, logits)
        outputs, self._outputs = self._outputs, []
        return outputs

    def _emit_early(self) -> None:
        """First tokens (made by prefill, arrived with the KV) leave now, not after the forward."""
        if self.emit is not None and self._outputs:
            outputs, self._outputs = self._outputs, []
            self.emit(outputs)

    def _memory_view(self) -> DecodeMemoryView:
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

    def _poll_prealloc(self) -> None:
        """The policy seam for pre-allocation: plan_preallocation decides, pages follow."""
        ready: list[DecodeState] = []
        for state in list(self.prealloc):
            poll = state.receiver.poll()
            if poll == KVPoll.Failed:
                self.prealloc.remove(state)
                self._finish(state, STATUS_FAILED, state.receiver.failure_reason)
            elif poll >= KVPoll.WaitingForInput:
                ready.append(state)
        free_slots = self.config.max_prealloc_requests - len(self.transfer)
        plan = plan_preallocation([s.view() for s in self.retracted], [s.view() for s in ready],
                                  self._memory_view(), free_slots)
        page = self.config.page_size_tokens
        for _ in plan.resume_ids:
            state = self.retracted.popleft()
            state.pages = self.allocator.allocate(need_now_tokens(state.view(), page) // page)
            self.waiting.appendleft(state)
        by_id = {s.req.request_id: s for s in ready}
        for request_id in plan.admit_ids:
            state = by_id[request_id]
            self.prealloc.remove(state)
            state.pages = self.allocator.allocate(need_now_tokens(state.view(), page) // page)
            now = self.clock()
            state.times.update(prealloc_leave_s=now, transfer_queue_enter_s=now)
            state.receiver.init(state.pages)
            self.transfer.append(state)

    def _poll_transfer(self) -> None:
        for state in list(self.transfer):
            poll = state.receiver.poll()
            if poll not in (KVPoll.Success, KVPoll.Failed):
                continue
            self.transfer.remove(state)
            if poll == KVPoll.Failed:
                self._finish(state, STATUS_FAILED, state.receiver.failure_reason)
                continue
            aux, now = state.receiver.aux(), self.clock()
            state.times.update(transfer_queue_leave_s=now, decode_waiting_enter_s=now, first_token_s=now)
            if aux is not None:
                state.times.update(transfer_start_s=aux.transfer_start_s, transfer_end_s=aux.transfer_end_s)
                state.times["transfer_bytes"] = aux.transfer_bytes
            state.kv_tokens = len(state.req.input_ids)
            self._append_token(state, aux.first_token_id if aux is not None else 0, now)
            if not self._done(state):
                self.waiting.append(state)

    def _schedule(self) -> list[DecodeState]:
        """Make room for every running request's next token (retracting if short), allocate it."""
        page = self.config.page_size_tokens
        while self.running:
            needs = [pages_for_tokens(s.tokens_after_step(), page) - len(s.pages) for s in self.running]
            short = sum(needs) - self.allocator.num_free
            if short <= 0:
                for state, need in zip(self.running, needs, strict=True):
                    state.pages.extend(self.allocator.allocate(max(0, need)))
                return list(self.running)
            victims = choose_retraction_victims([s.view() for s in self.running], short, page)
            if not victims:
                state = self.running.pop()
                self._finish(state, STATUS_FAILED, f"KV pool of {self.config.kv_capacity_tokens} tokens "
                             f"cannot hold request {state.req.request_id}")
            for request_id in victims:
                self._retract(next(s for s in self.running if s.req.request_id == request_id))
        return []

    def _retract(self, state: DecodeState) -> None:
        self.running.remove(state)
        self.allocator.free(state.pages)
        state.pages, state.kv_tokens, state.needs_extend = [], 0, True
        state.num_retractions += 1
        self.retracted.append(state)

    def _postprocess(self, batch: list[DecodeState], logits: torch.Tensor) -> None:
        tokens = sample(logits, [s.req.sampling for s in batch], [len(s.output_ids) for s in batch])
        now = self.clock()
        for state, token in zip(batch, tokens, strict=True):
            state.kv_tokens = state.tokens_after_step()
            state.needs_extend = False
            self._append_token(state, token, now)
            if self._done(state):
                self.running.remove(state)

    def _append_token(self, state: DecodeState, token: int, now: float) -> None:
        state.output_ids.append(token)
        state.token_times_s.append(now)
        self._outputs.append(RequestOutput(state.req.request_id, (token,)))
        if self._done(state):
            self._finish(state, STATUS_FINISHED, "")

    def _done(self, state: DecodeState) -> bool:
        return stop_reached(state.output_ids, state.req.sampling, self.eos_ids)

    def _finish(self, state: DecodeState, status: str, reason: str) -> None:
        now = self.clock()
        self.allocator.free(state.pages)
        state.pages = []
        if state.receiver is not None:
            state.receiver.close()
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
                if state.receiver is not None:
                    state.receiver.abort(self._aborts[state.req.request_id])
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
