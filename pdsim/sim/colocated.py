"""Colocated instance (the no-disaggregation baseline): waiting -> running on one GPU group.

Two schedules (cluster.colocated_schedule):
- mixed: Sarathi-Serve / vLLM v1 / SGLang chunked prefill. Every iteration runs all decodes plus
  prefill chunks chosen by the shared PrefillAdder from the token budget left after one token per
  decode; KV for running decodes' future growth is held back (policy.new_token_ratio).
- prefill_priority: vLLM v0 (the DistServe/Splitwise baseline). Whenever a prefill batch can be
  formed it runs alone; otherwise a decode-only iteration runs.
The first token appears when a request's last prompt chunk finishes. When the next decode tokens'
pages do not fit, victims chosen by the shared retraction rule release their KV and go back to the
head of the waiting queue to recompute prompt + generated tokens. Decode-only iterations while
nothing waits run as spans of several iterations per simpy event (span.py), with results
identical to one event per iteration (`skip_ahead=false`).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Iterator
from typing import Any

from pdsim.perf import LatencyModel
from pdsim.policy import (
    ADP_START,
    GrowthPlan,
    RequestView,
    check_schedule,
    plan_colocated_decodes,
    plan_colocated_step,
)
from pdsim.policy.adp_balance import assign_dp_rank
from pdsim.policy.prefix_cache import BlockNode
from pdsim.policy.receive import counter_after_decodes, receive_point, recv_weight
from pdsim.policy.views import ROLE_COLOCATED, InstanceView
from pdsim.sim.chunks import ChunkOwner, Planned, start_chunks
from pdsim.sim.events import Wait, now_s, start, timeout
from pdsim.sim.handoff import tokens_after_prefill
from pdsim.sim.instance import InstanceBase, InstanceContext
from pdsim.sim.prompt_kv import PromptKV
from pdsim.sim.span import BatchOwner, Span, SpanPlanner
from pdsim.sim.state import (
    FIRST_TOKEN_S,
    LAST_TOKEN_S,
    PREFILL_END_S,
    PREFILL_WAITING_ENTER_S,
    RUNNING_ENTER_S,
    SimRequest,
)


class ColocatedInstance(InstanceBase, BatchOwner, ChunkOwner):
    role = ROLE_COLOCATED

    def __init__(self, index: int, ctx: InstanceContext, latency: LatencyModel, kv: PromptKV) -> None:
        super().__init__(index, ctx, latency)
        check_schedule(self.cfg.cluster.colocated_schedule)
        self.kv = kv
        self.page = kv.page
        self.waiting: dict[int, SimRequest] = {}
        self.chunked: SimRequest | None = None
        self.running: dict[int, SimRequest] = {}
        self.ctx_tokens = 0
        self.retractions = 0
        self._matches: dict[int, list[BlockNode]] = {}
        self._victims: list[int] = []  # retracted by this iteration's plan (decision log)
        self.batch_waited = 0  # iterations batch waiting has held prompts back (pdsim.policy.batch_waits)
        # attention-DP balance (pdsim.policy.adp_balance): its counters and the rank of each request
        # here (arriving, waiting or running); kept only while the balance is on
        self.adp = ADP_START
        self.balance = self.limits.adp_timeout_iters > 0
        self.dp_rank: dict[int, int] = {}
        # arrivals not taken in yet, and the receive counter (pdsim.policy.receive; starts full)
        self.inbox: dict[int, SimRequest] = {}
        self.recv_counter = self.limits.recv_interval_steps
        self.ran_forward = False
        # the running batch's spans (self.span_planner is the base class's optional handle to it)
        self.spans = self.span_planner = SpanPlanner(self.env, ctx.series_for(latency), self.page, self.cfg.skip_ahead)
        self.spans.process = start(self.env, self.run())

    def _receive(self, sr: SimRequest) -> None:
        sr.mark(PREFILL_WAITING_ENTER_S, now_s(self.events))
        need = sr.req.input_tokens + sr.req.output_tokens
        if need > self.kv.pool.capacity_tokens:
            self.hooks.abort(sr, f"input+output tokens {need} exceed {self.name} KV capacity {self.kv.pool.capacity_tokens}")
            return
        (self.inbox if self.limits.recv_interval_steps > 1 else self.waiting)[sr.rid] = sr
        if self.balance:
            self.dp_rank[sr.rid] = assign_dp_rank(self._per_rank(self.dp_rank))
        self.notify()

    def release(self, sr: SimRequest) -> None:
        self.spans.settle_now(self)
        self.waiting.pop(sr.rid, None)
        self.inbox.pop(sr.rid, None)
        if self.chunked is sr:
            self.chunked = None
        if self.running.pop(sr.rid, None) is not None:
            self.ctx_tokens -= sr.kv_tokens
        if not sr.has_time(PREFILL_END_S):
            self.queued_requests -= 1
            self.queued_tokens -= sr.prompt.tokens
        self.kv.release(sr, now_s(self.events))
        self.dp_rank.pop(sr.rid, None)
        self.notify()

    # -- scheduler loop -------------------------------------------------------------------
    def run(self) -> Generator[Wait, Any, None]:
        while self.alive:
            self._victims = []
            self._take_in()
            plan = plan_colocated_step(self.limits, self, self.batch_waited, self.adp, self)  # the shared step plan (pdsim.policy)
            self.batch_waited = plan.waited_after(self.batch_waited)
            self.adp = plan.adp
            carried = (self.chunked,) if self.chunked is not None else ()
            planned = (start_chunks(self, plan.prefill.chunks, self._matches, now_s(self.events), carried)
                       if plan.prefill.chunks else [])
            decodes = list(plan.decodes)
            if plan.prefill.chunks and not planned and not decodes:  # its KV loads did not fit after all
                decodes = list(plan_colocated_decodes(self.limits, self))
            if self.decisions is not None:
                self.decisions.colocated(now_s(self.events), self.name, [c for _, _, c in planned],
                                         [sr.rid for sr in decodes], self._victims)
            if not planned and not decodes:
                self.ran_forward = False
                if not self.inbox:  # (arrivals not taken in yet: an idle loop takes them in at once)
                    yield self.idle()
                continue
            self.ran_forward = True
            if not planned:  # decode-only iterations
                if (yield from self.spans.run_span(self, self._begin_span())):
                    self._complete([], list(self.running.values()))
                continue
            items = [(c.new_tokens, c.context_tokens) for _, _, c in planned]
            ctx = self.ctx_tokens if decodes else 0
            step_s = self.latency.mixed_time_s(items, len(decodes), ctx)
            self.busy_s += step_s
            self.iterations += 1
            self.recv_counter += recv_weight(prefill=True)
            self.batch_size = len(planned) + len(decodes)  # (the router's view is stale from here)
            yield timeout(self.events, step_s)
            self.view_stale = True
            if self.alive:
                self._complete(planned, decodes)

    def _take_in(self) -> None:
        """The top of an iteration: at a receive point (pdsim.policy.receive) the arrivals join
        the waiting queue in arrival order and the counter starts again."""
        take, self.recv_counter = receive_point(self.limits.recv_interval_steps, self.recv_counter,
                                                not self.ran_forward)
        if take and self.inbox:
            self.waiting.update(self.inbox)
            self.inbox.clear()

    def _begin_span(self) -> Span:
        """Decode-only iterations: as many as run before a finish or a retraction (page growth
        may evict cache blocks); one while requests wait (their prefill may fit at any boundary)."""
        n, spans = len(self.running), self.spans
        k, growth = 1, None
        if not self.waiting and self.chunked is None and not self.inbox:
            k, growth, _ = spans.limit(self.running.values(), self.kv.pool.free_pages + self.kv.evictable_pages)
        span = spans.begin(n, self.ctx_tokens, k, growth)
        self.busy_s += span.times.step(0)
        self.iterations += 1
        self.recv_counter += recv_weight(prefill=False)
        self.batch_size = n
        return span

    def add_pages(self, sr: SimRequest, pages: int) -> None:
        if not self.kv.allocate(sr, pages):
            raise RuntimeError(f"{self.name}: span page growth of request {sr.rid} did not fit")

    def advanced(self, iterations: int, busy_s: float) -> None:
        self.ctx_tokens += iterations * len(self.running)
        self.busy_s = busy_s
        self.iterations += iterations
        self.recv_counter = counter_after_decodes(self.limits.recv_interval_steps, self.recv_counter, iterations)
        if self.balance:
            every_rank = min(self.running_per_rank()) > 0
            self.adp = self.adp.after_idle(iterations, self.limits.adp_timeout_iters, every_rank)

    # -- pdsim.policy.DpRanks: the attention-DP ranks the balance reads -----------------------
    def waiting_per_rank(self) -> list[int]:
        chunked = () if self.chunked is None else (self.chunked.rid,)
        return self._per_rank([*self.waiting, *chunked])

    def running_per_rank(self) -> list[int]:
        return self._per_rank(self.running)

    def _per_rank(self, request_ids: Iterable[int]) -> list[int]:
        """How many of `request_ids` each rank holds."""
        counts = [0] * self.limits.dp_ranks
        for rid in request_ids:
            counts[self.dp_rank[rid]] += 1
        return counts

    # -- pdsim.policy.ColocatedExecutor: what the shared step planner reads and applies ------
    def running_requests(self) -> list[SimRequest]:
        return list(self.running.values())

    def free_pages(self) -> int:
        return self.kv.pool.free_pages + self.kv.evictable_pages

    def kv_tokens(self, sr: SimRequest) -> int:
        return sr.kv_tokens

    def request_view(self, sr: SimRequest) -> RequestView:
        return RequestView(sr.rid, sr.req.input_tokens, sr.req.output_tokens, generated_tokens=sr.generated,
                           kv_tokens=sr.kv_tokens)

    def apply_growth(self, plan: GrowthPlan[SimRequest]) -> None:
        for sr in plan.victims:
            self._victims.append(sr.rid)
            self._retract(sr)
        for sr in plan.failed:
            self.hooks.abort(sr, f"KV exhausted on {self.name}")
        for sr in plan.grow:
            if not self.kv.allocate(sr, 1):
                raise RuntimeError(f"{self.name}: planned page growth of request {sr.rid} did not fit")

    def prefill_candidates(self) -> Iterator[RequestView]:
        self._matches = matches = {}
        chunked = self.chunked
        if chunked is not None:
            yield RequestView(chunked.rid, chunked.prompt.tokens, chunked.req.output_tokens,
                              prefilled_tokens=chunked.prompt.prefilled, generated_tokens=chunked.generated)
        block = self.kv.cache.block_tokens if self.kv.cache else 0
        for sr in self.waiting.values():
            path = self.kv.peek_match(sr)
            matches[sr.rid] = path
            cached = len(path) * block
            yield RequestView(sr.rid, sr.prompt.tokens, sr.req.output_tokens, prefilled_tokens=cached,
                              cached_tokens=cached, generated_tokens=sr.generated)

    def free_kv_tokens(self) -> int:
        return self.kv.available_tokens

    def remaining_outputs(self) -> Iterator[int]:
        return (sr.req.output_tokens - sr.generated for sr in self.running.values())

    def _retract(self, sr: SimRequest) -> None:
        del self.running[sr.rid]
        self.ctx_tokens -= sr.kv_tokens
        self.kv.release(sr, now_s(self.events))
        sr.num_retractions += 1
        self.retractions += 1
        sr.prompt.tokens = sr.kv_tokens  # prompt + generated tokens in the KV: recomputed
        sr.prompt.prefilled = sr.kv_tokens = 0
        self.waiting = {sr.rid: sr, **self.waiting}

    def _complete(self, planned: Planned, decodes: list[SimRequest]) -> None:
        now = now_s(self.events)
        for sr in decodes:
            if sr.done or self.running.get(sr.rid) is not sr:
                continue
            sr.kv_tokens += 1
            sr.generated += 1
            sr.mark(FIRST_TOKEN_S, now)
            self.ctx_tokens += 1
            if sr.token_times is not None:
                sr.token_times.append(now)
            if sr.generated >= sr.req.output_tokens:
                self._finish(sr)
        for sr, attempt, chunk in planned:
            if sr.done or sr.attempt != attempt:
                continue
            sr.prompt.prefilled += chunk.new_tokens
            if not chunk.is_last:
                self.chunked = sr
                continue
            if self.chunked is sr:
                self.chunked = None
            self._prefill_done(sr, now)

    def _prefill_done(self, sr: SimRequest, now: float) -> None:
        sr.kv_tokens = sr.prompt.prefilled
        if not sr.has_time(PREFILL_END_S):
            sr.set_time(PREFILL_END_S, now)
            sr.set_time(RUNNING_ENTER_S, now)
            self.queued_requests -= 1
            self.queued_tokens -= sr.prompt.tokens
            sr.generated = tokens_after_prefill(self.cfg.cluster)
            if sr.generated:
                sr.set_time(FIRST_TOKEN_S, now)
                if sr.token_times is not None:
                    sr.token_times.append(now)
        if sr.generated >= sr.req.output_tokens:
            self._finish(sr)
            return
        self.running[sr.rid] = sr
        self.ctx_tokens += sr.kv_tokens

    def _finish(self, sr: SimRequest) -> None:
        if self.running.pop(sr.rid, None) is not None:
            self.ctx_tokens -= sr.kv_tokens
        sr.set_time(LAST_TOKEN_S, now_s(self.events))
        self.kv.release(sr, now_s(self.events))
        self.dp_rank.pop(sr.rid, None)
        self.hooks.finish(sr)

    def peek_match(self, sr: SimRequest) -> list[BlockNode]:
        """The cached blocks of `sr`'s prompt here, for cache-aware routing (a span's pending
        page growth may evict blocks: settled first)."""
        self.spans.settle_now(self)
        self.view_stale = True
        return self.kv.peek_match(sr)

    def kv_used_tokens(self) -> int:
        return self.kv.used_tokens + self.spans.pending_pages() * self.page

    def build_view(self) -> InstanceView:
        return self.instance_view(len(self.running), 0, self.kv_used_tokens(), self.kv.pool.capacity_tokens)

    def queue_counts(self) -> tuple[int, int, int, int, int, int, int]:
        return (0, 0, 0, len(self.inbox) + len(self.waiting) + (self.chunked is not None), len(self.running), 0, 0)
