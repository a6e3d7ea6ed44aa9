"""The prefill instance's loop (the seeds' prefill server).

    add_request -> bootstrap queue  (KVSender created; wait for the decode side's pre-allocation)
                -> waiting queue    (PrefillAdder from pdsim.policy forms each batch: token
                                     budget, chunked prefill, prefix-cache hits skipped;
                                     max_new_tokens is 1 here)
                -> forward          (the last chunk samples the first output token)
                -> inflight queue   (non-last chunks sent full pages - the first one also the
                                     cached prefix's pages: the decode side has no cache - the
                                     last chunk the rest plus aux; poll until Success/Failed)
                -> release          (pages freed in every path; with the prefix cache the
                                     prompt's full pages stay cached, pdreal/kv/radix.py)

As pdsim's prefill instance (`start_chunks`): a waiting request's cache match is re-read each
step; when its first chunk is scheduled its matched prefix is locked, then every chunk's pages are
allocated in order (evicting unlocked cache blocks when short) and the chunks that do not fit are
dropped for this step.

Each `step()` is schedule -> run -> postprocess; the policy call is in `_schedule` only.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pdreal.engine.common import (
    EngineConfig,
    EngineRequest,
    EngineStats,
    GuardedStep,
    ModelRunner,
    RequestOutput,
    allocate_pages,
    check_engine_invariants,
    context_reason,
    engine_stats,
    lock_prefix,
    make_cache,
    release_pages,
    step_victims,
    trace_row,
    unlock_prefix,
)
from pdreal.kv.allocator import PageAllocator
from pdreal.kv.radix import CachedPrefix
from pdreal.model.batch import SeqChunk
from pdreal.model.sampling import prompt_chunk_logprobs, sample, token_logprobs
from pdreal.transfer.base import KVManager, KVPoll, KVSender, TransferAux
from pdreal.transfer.common import TimeSource
from pdsim.policy import PrefillChunk, RequestView, plan_prefill_step
from pdsim.policy.decisions import DecisionLog
from pdsim.policy.views import pages_for
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED

log = logging.getLogger(__name__)


@dataclass
class PrefillState:
    req: EngineRequest
    sender: KVSender | None
    pages: list[int] = field(default_factory=list)
    prefilled_tokens: int = 0
    sent_pages: int = 0
    first_token: int = -1
    first_logprob: Any = None  # [logprob, top] of the first token, when asked
    times: dict[str, float] = field(default_factory=dict)
    done: bool = False  # finished (any status): a failed step must not finish it twice
    block_hashes: tuple[int, ...] = ()  # no prefix cache: published as stored (kv_events), removed on release
    page_hashes: tuple[int, ...] = ()  # prefix cache: the prompt's page hashes
    prefix: CachedPrefix = field(default_factory=CachedPrefix)  # its locked cached pages (head of `pages`)
    cached_tokens: int = 0
    prompt_logprobs: list[Any] = field(default_factory=list)  # entries of prompt tokens 1.., when asked

    @property
    def wants_prompt_logprobs(self) -> bool:
        return self.req.sampling.prompt_logprobs >= 0

    @property
    def kv_sender(self) -> KVSender:
        """Its KV sender: made on admission, before the request enters any queue."""
        assert self.sender is not None, f"request {self.req.request_id} has no KV sender"
        return self.sender

    def view(self) -> RequestView:
        return RequestView(self.req.request_id, len(self.req.input_ids), 1,
                           prefilled_tokens=self.prefilled_tokens, cached_tokens=self.cached_tokens)


class PrefillEngine(GuardedStep):
    def __init__(self, runner: ModelRunner, kv_manager: KVManager, config: EngineConfig,
                 now_s: TimeSource = time.monotonic) -> None:
        self.runner, self.kv, self.config, self.now_s = runner, kv_manager, config, now_s
        self.limits = config.limits
        self.decisions: DecisionLog | None = None  # scheduling decisions, when asked (lockstep test)
        self.bootstrap: list[PrefillState] = []
        self.waiting: deque[PrefillState] = deque()
        self.chunked: PrefillState | None = None
        self.inflight: list[PrefillState] = []
        self._outputs: list[RequestOutput] = []
        self._batch: list[PrefillState] = []  # the requests of the forward being formed or run
        self._matches: dict[int, list[int]] = {}  # the planned candidates' cached prefixes (page ids)
        self.num_added = self.num_finished = self.num_failed = 0
        self.cache = make_cache(runner, config)
        self._kv_events: Any = None

    @property
    def kv_events(self) -> Any:
        """pdreal.kv_events.RequestBlockTracker: stored/removed events for routers (None = off)."""
        return self._kv_events

    @kv_events.setter
    def kv_events(self, tracker: Any) -> None:
        self._kv_events = tracker
        if self.cache is not None:
            self.cache.events = tracker

    @property
    def allocator(self) -> PageAllocator:
        return self.runner.pool.allocator

    def live(self) -> list[PrefillState]:
        return [*self.bootstrap, *self.waiting, *self.inflight, *([self.chunked] if self.chunked else [])]

    def add_request(self, req: EngineRequest) -> None:
        """Enter the bootstrap queue (or finish at once as rejected); duplicate live ids raise ValueError."""
        if any(s.req.request_id == req.request_id for s in self.live()):
            raise ValueError(f"request_id {req.request_id} is already in this prefill engine")
        now = self.now_s()
        self.num_added += 1
        state = PrefillState(req, None, times={"bootstrap_enter_s": now})
        need = pages_for(len(req.input_ids), self.config.page_size_tokens)
        too_long = context_reason(req, self.runner.model.spec.context_length)
        if too_long:
            self._finish(state, STATUS_REJECTED, too_long)
            return
        if need > self.allocator.num_pages:
            self._finish(state, STATUS_REJECTED, f"prompt of {len(req.input_ids)} tokens exceeds the KV pool "
                         f"({self.config.kv_capacity_tokens} tokens)")
            return
        state.sender = self.kv.create_sender(req.bootstrap_room)
        if self.cache is not None:
            state.page_hashes = self.cache.hashes(req.input_ids)
        self.bootstrap.append(state)

    def has_work(self) -> bool:
        return bool(self.bootstrap or self.waiting or self.chunked or self.inflight)

    def ready_to_run(self) -> bool:
        """True when the next step has a forward to run (else a server loop may sleep a little)."""
        return bool(self.waiting or self.chunked)

    def _step(self) -> None:
        """One loop iteration (guarded, GuardedStep.step: an exception fails the requests of the
        step's batch, or every live request when it came from polling outside a batch, frees
        their pages and closes their rooms; the engine goes on)."""
        self._poll_bootstrap()
        plan = self._schedule()
        if plan:
            logits, full = self.runner.forward_logits([chunk for _, _, chunk in plan])
            self._postprocess(plan, logits, full)
        self._batch = []
        self._poll_inflight()

    def _fail_step(self, exc: Exception) -> None:
        reason, victims, ids = step_victims(self._batch, self.live(), exc, f"prefill {self.config.instance_id}")
        self.bootstrap = [s for s in self.bootstrap if id(s) not in ids]
        self.waiting = deque(s for s in self.waiting if id(s) not in ids)
        self.inflight = [s for s in self.inflight if id(s) not in ids]
        if self.chunked is not None and id(self.chunked) in ids:
            self.chunked = None
        self._batch = []
        for state in victims:
            if state.sender is not None:
                with contextlib.suppress(Exception):  # its room may be gone already
                    state.kv_sender.abort(reason)
            self._finish(state, STATUS_FAILED, reason)

    def _poll_bootstrap(self) -> None:
        still: list[PrefillState] = []
        for state in self.bootstrap:
            poll = state.kv_sender.poll()
            if poll == KVPoll.Failed:
                self._finish(state, STATUS_FAILED, state.kv_sender.failure_reason)
            elif poll >= KVPoll.WaitingForInput:
                now = self.now_s()
                state.times.update(bootstrap_leave_s=now, prefill_waiting_enter_s=now)
                self.waiting.append(state)
            else:
                still.append(state)
        self.bootstrap = still
        for state in [s for s in self.waiting if s.kv_sender.poll() == KVPoll.Failed]:
            self.waiting.remove(state)
            self._finish(state, STATUS_FAILED, state.kv_sender.failure_reason)

    def _schedule(self) -> list[tuple[PrefillState, PrefillChunk, SeqChunk]]:
        """The policy seam: PrefillAdder picks the chunks; prefixes are locked and pages allocated
        for them here (chunks that do not fit after all are dropped, as in pdsim)."""
        by_id = {s.req.request_id: s for s in ([self.chunked] if self.chunked else []) + list(self.waiting)}
        batch = plan_prefill_step(self.limits, self)  # the shared decision (pdsim.policy.prefill_step)
        matches = self._matches
        now = self.now_s()
        if self.cache is not None:
            for chunk in batch.chunks:
                if by_id[chunk.request_id] is not self.chunked:
                    lock_prefix(self.cache, by_id[chunk.request_id], matches.get(chunk.request_id, []), now,
                                self.config.page_size_tokens)
        plan = []
        for i, chunk in enumerate(batch.chunks):
            state = by_id[chunk.request_id]
            pages = allocate_pages(self.cache, self.allocator, chunk.new_pages)
            if pages is None:
                for later in batch.chunks[i:]:
                    if by_id[later.request_id] is not self.chunked:
                        unlock_prefix(self.cache, self.allocator, by_id[later.request_id], now)
                break
            self._batch.append(state)
            state.pages.extend(pages)
            if state is self.chunked:
                self.chunked = None
            else:
                self.waiting.remove(state)
            start = chunk.context_tokens
            tokens = list(state.req.input_ids[start:start + chunk.new_tokens])
            state.times.setdefault("prefill_start_s", now)
            plan.append((state, chunk, SeqChunk(tokens, start, state.pages, state.wants_prompt_logprobs)))
        if self.decisions is not None and plan:
            self.decisions.prefill(now, f"prefill:{self.config.instance_id}", [c for _, c, _ in plan])
        return plan

    # -- pdsim.policy.PrefillExecutor: what the shared step planner reads ------------------
    def prefill_candidates(self) -> Iterator[RequestView]:
        """The chunked request, then the waiting queue (consumed lazily); the cached prefixes
        looked up go to self._matches."""
        self._matches = {}
        if self.chunked is not None:
            yield self.chunked.view()
        for state in list(self.waiting):
            yield self._view(state)

    def free_kv_tokens(self) -> int:
        free_pages = self.cache.free_pages if self.cache is not None else self.allocator.num_free
        return free_pages * self.config.page_size_tokens

    def _view(self, state: PrefillState) -> RequestView:
        """A waiting request's view: it starts with its cached prefix (looked up now), unless it
        asks for prompt logprobs (cached positions have no logits: it computes them all)."""
        if self.cache is None or state.wants_prompt_logprobs:
            return state.view()
        path = self._matches[state.req.request_id] = self.cache.match(state.page_hashes, len(state.req.input_ids))
        cached = len(path) * self.config.page_size_tokens
        return RequestView(state.req.request_id, len(state.req.input_ids), 1, prefilled_tokens=cached,
                           cached_tokens=cached)

    def _postprocess(self, plan: list[tuple[PrefillState, PrefillChunk, SeqChunk]], logits: Any,
                     full: list[Any]) -> None:
        params = [s.req.sampling for s, _, _ in plan]
        firsts = sample(logits, params, [0] * len(plan))
        logprobs = token_logprobs(logits, firsts, params)
        now = self.now_s()
        for (state, chunk, _), token, logprob, rows in zip(plan, firsts, logprobs, full, strict=True):
            if rows is not None:
                state.prompt_logprobs += prompt_chunk_logprobs(rows, state.req.input_ids, chunk.context_tokens,
                                                               state.req.sampling.prompt_logprobs)
            state.prefilled_tokens += chunk.new_tokens
            if not chunk.is_last:
                full_pages = state.prefilled_tokens // self.config.page_size_tokens
                self._send(state, state.pages[state.sent_pages:full_pages], None)
                self.chunked = state
                continue
            state.first_token, state.first_logprob = token, logprob
            state.times.update(prefill_end_s=now, inflight_enter_s=now)
            if self.kv_events is not None and self.cache is None:
                state.block_hashes = self.kv_events.stored(state.req.input_ids)
            aux = TransferAux(state.req.bootstrap_room, token, cached_tokens=state.cached_tokens)
            self._send(state, state.pages[state.sent_pages:], aux)
            self.inflight.append(state)

    def _send(self, state: PrefillState, pages: list[int], aux: TransferAux | None) -> None:
        state.sent_pages += len(pages)
        if state.kv_sender.poll() != KVPoll.Failed:
            state.kv_sender.send(pages, aux)

    def _poll_inflight(self) -> None:
        still: list[PrefillState] = []
        for state in self.inflight:
            poll = state.kv_sender.poll()
            if poll == KVPoll.Success:
                self._finish(state, STATUS_FINISHED, "")
            elif poll == KVPoll.Failed:
                self._finish(state, STATUS_FAILED, state.kv_sender.failure_reason)
            else:
                still.append(state)
        self.inflight = still
        if self.chunked is not None and self.chunked.kv_sender.poll() == KVPoll.Failed:
            state, self.chunked = self.chunked, None
            self._finish(state, STATUS_FAILED, state.kv_sender.failure_reason)

    def _finish(self, state: PrefillState, status: str, reason: str) -> None:
        now = self.now_s()
        state.done = True
        if state.times.get("inflight_enter_s") is not None:
            state.times["inflight_leave_s"] = now
        release_pages(self.cache, self.allocator, state, state.prefilled_tokens >= len(state.req.input_ids), now)
        if self.kv_events is not None and state.block_hashes:
            self.kv_events.removed(state.block_hashes)
            state.block_hashes = ()
        if state.sender is not None:
            state.sender.close()
        self.num_finished += status == STATUS_FINISHED
        self.num_failed += status != STATUS_FINISHED
        req = state.req
        row = trace_row(request_id=req.request_id, input_tokens=len(req.input_ids),
                        output_tokens=req.sampling.max_new_tokens, mode="disaggregated",
                        prefill_instance=self.config.instance_id, bootstrap_room=req.bootstrap_room,
                        arrival_s=req.arrival_s, status=status, failure_reason=reason, finish_s=now,
                        cached_prefix_tokens=state.cached_tokens, **state.times)
        tokens = (state.first_token,) if state.first_token >= 0 else ()
        logprobs = (state.first_logprob,) if tokens and state.first_logprob is not None else ()
        prompt = (None, *state.prompt_logprobs) if tokens and state.wants_prompt_logprobs else ()
        self._outputs.append(RequestOutput(req.request_id, tokens, True, status, reason, row, logprobs, prompt))

    def abort(self, request_id: int, reason: str) -> bool:
        """Fail a request wherever it is (client gone); False if it is not here."""
        for queue in (self.bootstrap, self.waiting, self.inflight, [self.chunked] if self.chunked else []):
            for state in list(queue):
                if state.req.request_id == request_id:
                    state.kv_sender.abort(reason)
                    return True
        return False

    def stats(self) -> EngineStats:
        queues = {"bootstrap": len(self.bootstrap), "waiting": len(self.waiting) + (self.chunked is not None),
                  "inflight": len(self.inflight)}
        return engine_stats(self, queues)

    def check_invariants(self) -> None:
        """No page leaked; every request accounted for; no transfer room left open when idle."""
        check_engine_invariants(self, "prefill")
