"""The colocated instance's loop (no disaggregation): one engine prefills and decodes.

    add_request -> waiting queue   (FIFO; retracted requests go back to its head)
                -> chunked         (the one request whose prompt continues in the next forward)
                -> running batch   (joined when the last prompt chunk's forward ends; that forward
                                    samples the first output token, emitted at once)
                -> finish          (max_new_tokens, EOS or stop token; pages freed)

Each step asks `pdsim.policy.plan_colocated_step` - the call pdsim's ColocatedInstance makes -
for the iteration's plan under `EngineConfig.colocated_schedule` (pdsim's
`cluster.colocated_schedule`): mixed (decodes' pages grow first, retracting when short, then
prefill chunks fill the budget left after one token per decode, all in one `mixed` forward) or
prefill_priority (a prefill batch alone whenever one can be formed, else a decode-only forward).
This engine implements the planner's `ColocatedExecutor` reads and executes the plan.

Retraction (victims from the shared rule): a victim frees its KV and goes back to the head of
the waiting queue; its prompt becomes the prompt plus every generated token but the last (which
the next decode step feeds), recomputed by chunked prefill without sampling (SGLang's
non-disaggregated retraction). There is no KV transfer (`kv` is None).

Prefix cache (pdreal/kv/radix.py, as pdsim's colocated instance): a waiting request's view starts
with its cached prefix; its first chunk locks it; a request that finishes, fails or is retracted
after its prompt was computed leaves its full prompt pages cached (a retracted request's
recompute then hits them). Running decodes and prefill chunks may evict unlocked blocks.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
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
    allocate_pages,
    check_engine_invariants,
    engine_stats,
    generation_row,
    lock_prefix,
    make_cache,
    oversize_reason,
    release_pages,
    step_victims,
    stop_reached,
    unlock_prefix,
)
from pdreal.kv.allocator import PageAllocator
from pdreal.kv.radix import CachedPrefix
from pdreal.model.batch import SeqChunk
from pdreal.model.sampling import prompt_chunk_logprobs, sample, token_logprobs
from pdreal.transfer.common import TimeSource
from pdsim.policy import (
    GrowthPlan,
    PrefillChunk,
    RequestView,
    plan_colocated_decodes,
    plan_colocated_step,
)
from pdsim.policy.decisions import DecisionLog
from pdsim.policy.receive import receive_point, recv_weight
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED

log = logging.getLogger(__name__)


@dataclass
class ColocatedState:
    req: EngineRequest
    prompt_ids: tuple[int, ...]  # tokens to prefill (after a retraction: prompt + outputs but the last)
    pages: list[int] = field(default_factory=list)
    prefilled_tokens: int = 0
    kv_tokens: int = 0  # tokens whose KV is in the pages
    output_ids: list[int] = field(default_factory=list)
    num_retractions: int = 0
    times: dict[str, float] = field(default_factory=dict)
    done: bool = False  # finished (any status): a failed step must not finish it twice
    token_times_s: list[float] = field(default_factory=list)
    page_hashes: tuple[int, ...] = ()  # prefix cache: the prompt's page hashes
    prefix: CachedPrefix = field(default_factory=CachedPrefix)  # its locked cached pages (head of `pages`)
    cached_tokens: int = 0
    prompt_logprobs: list[Any] = field(default_factory=list)  # entries of prompt tokens 1.., when asked

    @property
    def computes_prompt_logprobs(self) -> bool:
        """Asked for prompt logprobs and still on its first prompt pass (a retracted request's
        recompute has them already)."""
        return self.req.sampling.prompt_logprobs >= 0 and not self.output_ids

    @property
    def remaining_output_tokens(self) -> int:
        return max(0, self.req.sampling.max_new_tokens - len(self.output_ids))

    def prefill_view(self) -> RequestView:
        return RequestView(self.req.request_id, len(self.prompt_ids), self.req.sampling.max_new_tokens,
                           prefilled_tokens=self.prefilled_tokens, generated_tokens=len(self.output_ids))

    def running_view(self) -> RequestView:
        return RequestView(self.req.request_id, len(self.req.input_ids), self.req.sampling.max_new_tokens,
                           generated_tokens=len(self.output_ids), kv_tokens=self.kv_tokens)

    def prefill_chunk(self, chunk: PrefillChunk) -> SeqChunk:
        start = chunk.context_tokens
        return SeqChunk(list(self.prompt_ids[start:start + chunk.new_tokens]), start, self.pages,
                        self.computes_prompt_logprobs)

    def decode_chunk(self) -> SeqChunk:
        return SeqChunk([self.output_ids[-1]], self.kv_tokens, self.pages)


Plan = list[tuple[ColocatedState, PrefillChunk]]


class ColocatedEngine(GuardedStep):
    def __init__(self, runner: ModelRunner, config: EngineConfig, now_s: TimeSource = time.monotonic) -> None:
        self.runner, self.config, self.now_s = runner, config, now_s
        self.limits = config.limits  # checks the schedule name
        self.decisions: DecisionLog | None = None  # scheduling decisions, when asked (lockstep test)
        self._victims: list[int] = []  # retracted by this step's plan (decision log)
        self._batch_waited = 0  # iterations batch waiting has held prompts back (pdsim.policy.batch_waits)
        # arrivals not taken in yet, and the receive counter (pdsim.policy.receive; starts full)
        self.inbox: deque[ColocatedState] = deque()
        self._recv_counter = self.limits.recv_interval_steps
        self._ran_forward = False
        self.kv: Any = None  # no KV transfer on a colocated instance
        self.eos_ids = frozenset(runner.model.spec.eos_token_ids)
        self.waiting: deque[ColocatedState] = deque()
        self.chunked: ColocatedState | None = None
        self.running: list[ColocatedState] = []
        self._outputs: list[RequestOutput] = []
        self._aborts: dict[int, str] = {}
        self._batch: list[ColocatedState] = []  # the requests of the forward being run
        self.emit: Callable[[list[RequestOutput]], None] | None = None
        self.num_added = self.num_finished = self.num_failed = self.num_retractions = 0
        self.cache = make_cache(runner, config)
        self._matches: dict[int, list[int]] = {}  # the waiting requests' cache matches this step

    @property
    def allocator(self) -> PageAllocator:
        return self.runner.pool.allocator

    @property
    def name(self) -> str:
        return f"colocated:{self.config.instance_id}"

    def set_emitter(self, emit: Callable[[list[RequestOutput]], None] | None) -> None:
        """Deliver outputs produced before the forward (rejections, failures) through `emit` at
        once; the forward's tokens (first tokens included) leave when `step()` returns."""
        self.emit = emit

    def live(self) -> list[ColocatedState]:
        return [*self.inbox, *self.waiting, *([self.chunked] if self.chunked else []), *self.running]

    def has_work(self) -> bool:
        return bool(self.inbox or self.waiting or self.chunked or self.running)

    def ready_to_run(self) -> bool:
        """True when the next step has a forward to run (else a server loop may sleep a little)."""
        return self.has_work()

    def add_request(self, req: EngineRequest) -> None:
        """Enter the waiting queue (or finish at once as rejected); duplicate live ids raise ValueError."""
        if any(s.req.request_id == req.request_id for s in self.live()):
            raise ValueError(f"request_id {req.request_id} is already in this colocated engine")
        self.num_added += 1
        state = ColocatedState(req, req.input_ids, times={"prefill_waiting_enter_s": self.now_s()})
        reason = oversize_reason(req, self.config, self.allocator.num_pages, self.runner.model.spec.context_length)
        if reason:
            self._finish(state, STATUS_REJECTED, reason)
            return
        if self.cache is not None:
            state.page_hashes = self.cache.hashes(req.input_ids)
        (self.inbox if self.limits.recv_interval_steps > 1 else self.waiting).append(state)

    def _fail_step(self, exc: Exception) -> None:
        reason, victims, ids = step_victims(self._batch, self.live(), exc, self.name)
        self.waiting = deque(s for s in self.waiting if id(s) not in ids)
        self.inbox = deque(s for s in self.inbox if id(s) not in ids)
        self.running = [s for s in self.running if id(s) not in ids]
        if self.chunked is not None and id(self.chunked) in ids:
            self.chunked = None
        self._batch = []
        for state in victims:
            self._finish(state, STATUS_FAILED, reason)

    def _take_in(self) -> None:
        """The top of a step: at a receive point (pdsim.policy.receive) the arrivals join the
        waiting queue in arrival order and the counter starts again (as pdsim's instance)."""
        take, self._recv_counter = receive_point(self.limits.recv_interval_steps, self._recv_counter,
                                                 not self._ran_forward)
        if take:
            self.waiting.extend(self.inbox)
            self.inbox.clear()

    def _step(self) -> None:
        self._apply_aborts()
        self._take_in()
        self._victims = []
        now = self.now_s()
        step = plan_colocated_step(self.limits, self, self._batch_waited)  # the shared step plan (pdsim.policy)
        self._batch_waited = step.waited_after(self._batch_waited)
        plan = self._start(step.prefill.chunks)
        decodes = list(step.decodes)
        if step.prefill.chunks and not plan and not decodes:  # its chunks did not fit after all
            decodes = list(plan_colocated_decodes(self.limits, self))
        if self.decisions is not None:
            self.decisions.colocated(now, self.name, [c for _, c in plan], [s.req.request_id for s in decodes],
                                     self._victims)
        self._emit_early()
        self._ran_forward = bool(plan or decodes)
        if plan or decodes:
            self._recv_counter += recv_weight(prefill=bool(plan))
            self._batch = [s for s, _ in plan] + decodes
            chunks = [s.prefill_chunk(c) for s, c in plan] + [s.decode_chunk() for s in decodes]
            logits, full = self.runner.forward_logits(chunks, num_decodes=len(decodes))
            self._postprocess(plan, decodes, logits, full[:len(plan)])
        self._batch = []

    def _emit_early(self) -> None:
        if self.emit is not None and self._outputs:
            outputs, self._outputs = self._outputs, []
            self.emit(outputs)

    # -- pdsim.policy.ColocatedExecutor: what the shared step planner reads and applies ------
    def running_requests(self) -> list[ColocatedState]:
        return self.running

    def free_pages(self) -> int:
        return self.cache.free_pages if self.cache is not None else self.allocator.num_free

    def kv_tokens(self, state: ColocatedState) -> int:
        return state.kv_tokens

    def request_view(self, state: ColocatedState) -> RequestView:
        return state.running_view()

    def apply_growth(self, plan: GrowthPlan[ColocatedState]) -> None:
        for state in plan.victims:
            self._victims.append(state.req.request_id)
            self._retract(state)
        for state in plan.failed:
            self.running.remove(state)
            self._finish(state, STATUS_FAILED, f"KV exhausted on {self.name} ({self.config.kv_capacity_tokens} tokens)")
        for state in plan.grow:
            pages = allocate_pages(self.cache, self.allocator, 1)
            if pages is None:
                raise RuntimeError(f"{self.name}: planned page growth of request {state.req.request_id} did not fit")
            state.pages.extend(pages)

    def prefill_candidates(self) -> Iterator[RequestView]:
        """The chunked request first, then the waiting queue in order (consumed lazily); a waiting
        request starts with its cached prefix, unless it asks for prompt logprobs (cached positions
        have no logits: it computes them all)."""
        self._matches = {}
        if self.chunked is not None:
            yield self.chunked.prefill_view()
        for state in self.waiting:
            if self.cache is None or state.computes_prompt_logprobs:
                yield state.prefill_view()
                continue
            path = self._matches[state.req.request_id] = self.cache.match(state.page_hashes, len(state.prompt_ids))
            cached = len(path) * self.config.page_size_tokens
            yield RequestView(state.req.request_id, len(state.prompt_ids), state.req.sampling.max_new_tokens,
                              prefilled_tokens=cached, cached_tokens=cached, generated_tokens=len(state.output_ids))

    def free_kv_tokens(self) -> int:
        return self.free_pages() * self.config.page_size_tokens

    def _release(self, state: ColocatedState) -> None:
        """Free a request's KV; with the cache, its full prompt pages stay cached once computed."""
        release_pages(self.cache, self.allocator, state, state.prefilled_tokens >= len(state.prompt_ids), self.now_s())

    def remaining_outputs(self) -> Iterator[int]:
        return (s.remaining_output_tokens for s in self.running)

    def _retract(self, state: ColocatedState) -> None:
        self.running.remove(state)
        self._release(state)
        state.prompt_ids = state.req.input_ids + tuple(state.output_ids[:-1])
        state.prefilled_tokens = state.kv_tokens = 0
        state.num_retractions += 1
        self.num_retractions += 1
        self.waiting.appendleft(state)

    def _start(self, chunks: tuple[PrefillChunk, ...]) -> Plan:
        """New requests lock their cached prefixes, then the planned chunks get their pages in
        order and leave the waiting queue (FIFO); chunks that do not fit are dropped (pdsim's
        start_chunks)."""
        now = self.now_s()
        chunked_id = self.chunked.req.request_id if self.chunked is not None else None
        by_id = {s.req.request_id: s for s in self.waiting if s.req.request_id in {c.request_id for c in chunks}}
        if self.cache is not None:
            for state in by_id.values():
                lock_prefix(self.cache, state, self._matches.get(state.req.request_id, []), now,
                            self.config.page_size_tokens)
        plan: Plan = []
        for i, chunk in enumerate(chunks):
            state = by_id[chunk.request_id] if chunk.request_id != chunked_id or self.chunked is None else self.chunked
            pages = allocate_pages(self.cache, self.allocator, chunk.new_pages)
            if pages is None:
                for dropped in (by_id[c.request_id] for c in chunks[i:] if c.request_id != chunked_id):
                    unlock_prefix(self.cache, self.allocator, dropped, now)
                break
            if state is not self.chunked:
                if self.waiting.popleft() is not state:
                    raise AssertionError(f"request {chunk.request_id} scheduled out of FIFO order")
                state.times.setdefault("prefill_start_s", now)
            self._batch.append(state)
            state.pages.extend(pages)
            plan.append((state, chunk))
        return plan

    def _postprocess(self, plan: Plan, decodes: list[ColocatedState], logits: torch.Tensor,
                     full: list[torch.Tensor | None]) -> None:
        """Decodes first, then prefill chunks (pdsim's order); a last chunk of a fresh prompt
        yields the first token, a recomputed one (after retraction) none. `full`: per chunk of the
        plan, the logits of every token where it computes prompt logprobs."""
        rows = [(i, s) for i, (s, c) in enumerate(plan) if c.is_last and not s.output_ids]
        rows += [(len(plan) + j, s) for j, s in enumerate(decodes)]
        picked = logits if len(rows) == logits.shape[0] else logits[[i for i, _ in rows]]
        tokens = sample(picked, [s.req.sampling for _, s in rows], [len(s.output_ids) for _, s in rows]) if rows else []
        params = [s.req.sampling for _, s in rows]
        logprobs = token_logprobs(picked, tokens, params)  # None for rows that do not ask
        token_of = {id(s): t for (_, s), t in zip(rows, tokens, strict=True)}
        logprob_of = {id(s): lp for (_, s), lp in zip(rows, logprobs, strict=True)}
        now = self.now_s()
        for state in decodes:
            state.kv_tokens += 1
            self._append_token(state, token_of[id(state)], now, logprob_of.get(id(state)))
            if self._done(state):
                self.running.remove(state)
                self._finish(state, STATUS_FINISHED, "")
        for (state, chunk), prompt_rows in zip(plan, full, strict=True):
            if prompt_rows is not None:
                state.prompt_logprobs += prompt_chunk_logprobs(prompt_rows, state.prompt_ids, chunk.context_tokens,
                                                               state.req.sampling.prompt_logprobs)
            state.prefilled_tokens += chunk.new_tokens
            if not chunk.is_last:
                self.chunked = state
                continue
            if self.chunked is state:
                self.chunked = None
            state.kv_tokens = state.prefilled_tokens
            if id(state) in token_of:
                state.times.update(prefill_end_s=now, first_token_s=now, running_enter_s=now)
                self._append_token(state, token_of[id(state)], now, logprob_of.get(id(state)))
            if self._done(state):
                self._finish(state, STATUS_FINISHED, "")
            else:
                self.running.append(state)

    def _append_token(self, state: ColocatedState, token: int, now: float, logprob: Any = None) -> None:
        """Emit a token; the first one carries the prompt logprobs when asked."""
        prompt = (None, *state.prompt_logprobs) if state.computes_prompt_logprobs else ()
        state.output_ids.append(token)
        state.token_times_s.append(now)
        self._outputs.append(RequestOutput(state.req.request_id, (token,),
                                           logprobs=(logprob,) if logprob is not None else (),
                                           prompt_logprobs=prompt))

    def _done(self, state: ColocatedState) -> bool:
        return stop_reached(state.output_ids, state.req.sampling, self.eos_ids)

    def _finish(self, state: ColocatedState, status: str, reason: str) -> None:
        now = self.now_s()
        state.done = True
        self._release(state)
        self.num_finished += status == STATUS_FINISHED
        self.num_failed += status != STATUS_FINISHED
        req, instance = state.req, self.config.instance_id
        row = generation_row(req, state.output_ids, state.token_times_s, status, reason, now, state.num_retractions,
                             mode="colocated", prefill_instance=instance, decode_instance=instance,
                             transfer_bytes=0, cached_prefix_tokens=state.cached_tokens, **state.times)
        self._outputs.append(RequestOutput(req.request_id, (), True, status, reason, row))

    def abort(self, request_id: int, reason: str) -> None:
        """Fail the request at the start of the next step, wherever it is."""
        self._aborts[request_id] = reason

    def _apply_aborts(self) -> None:
        if not self._aborts:
            return
        if self.chunked is not None and self.chunked.req.request_id in self._aborts:
            state, self.chunked = self.chunked, None
            self._finish(state, STATUS_FAILED, self._aborts[state.req.request_id])
        for queue in (self.inbox, self.waiting, self.running):
            for state in [s for s in queue if s.req.request_id in self._aborts]:
                queue.remove(state)
                self._finish(state, STATUS_FAILED, self._aborts[state.req.request_id])
        self._aborts.clear()

    def stats(self) -> EngineStats:
        queues = {"waiting": len(self.inbox) + len(self.waiting) + (self.chunked is not None), "running": len(self.running)}
        return engine_stats(self, queues)

    def check_invariants(self) -> None:
        """No page leaked; every request accounted for."""
        check_engine_invariants(self, "colocated")
