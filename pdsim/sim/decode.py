"""Decode instance: prealloc -> transfer -> waiting -> running (+ retracted).

- prealloc: a KV receiver handshakes with the prefill side (one bootstrap lookup per prefill
  instance, then cached); pages are pre-allocated by the shared allocatable-tokens rule
  (pdsim.policy.memory), retracted requests first, in pre-allocation slots beyond
  max_running_requests. Then the TransferInfo goes to the prefill side.
- transfer: waits for the KV and aux data (KVPoll Success).
- waiting: the prebuilt batch; joins the running batch at the next iteration boundary, which is
  when the first token (made by prefill) reaches the client.
- running: continuous batching, one decode iteration per step for the whole batch. While the
  batch cannot change, several iterations run as one span with one simpy event (span.py; the
  `skip_ahead=false` path takes one event per iteration, with identical results). When the next
  token's pages do not fit, victims are retracted (KV offloaded to host) and later resumed
  through the prealloc rule; the reload over PCIe delays the iteration it happens in.

Every boundary's decisions come from one call, `pdsim.policy.plan_decode_step` (the same call
pdreal's DecodeEngine makes), which reads this instance as its `DecodeExecutor`; the queues and
the execution of a plan are the base class's (decode_queues.py's DecodeQueues).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Final

from pdsim.perf import LatencyModel
from pdsim.policy import first_admission_boundary, plan_decode_step
from pdsim.policy.views import ROLE_DECODE, InstanceView
from pdsim.sim.decode_queues import DecodeQueues, remaining_tokens
from pdsim.sim.events import Wait, now_s, start
from pdsim.sim.instance import InstanceContext
from pdsim.sim.kv_pool import KVPool
from pdsim.sim.span import Span, SpanPlanner
from pdsim.sim.state import (
    PREALLOC_ENTER_S,
    RUNNING_ENTER_S,
    TRANSFER_QUEUE_LEAVE_S,
    SimRequest,
)

# While requests wait for pre-allocation, a span looks this many boundaries ahead (one policy
# call per boundary): the admission point is found without stepping, at a bounded cost per span.
PREALLOC_LOOKAHEAD: Final = 64


class DecodeInstance(DecodeQueues):
    role = ROLE_DECODE

    def __init__(
        self, index: int, ctx: InstanceContext, latency: LatencyModel, pool: KVPool, reload_s_per_token: float
    ) -> None:
        super().__init__(index, ctx, latency, pool, reload_s_per_token)
        self.max_running = self.limits.max_running_requests
        self.connected_at: dict[str, float] = {}
        # the running batch's spans (self.span_planner is the base class's optional handle to it)
        self.spans = self.span_planner = SpanPlanner(self.env, ctx.series_for(latency), self.page, self.cfg.skip_ahead)
        self.spans.process = start(self.env, self.run())

    # -- messages -------------------------------------------------------------------------
    def dispatched_tokens(self, sr: SimRequest) -> int:
        return sr.req.input_tokens

    def _receive(self, sr: SimRequest) -> None:
        now = now_s(self.events)
        sr.mark(PREALLOC_ENTER_S, now)
        need = sr.req.input_tokens + sr.req.output_tokens
        if need > self.pool.capacity_tokens:
            self.hooks.abort(sr, f"input+output tokens {need} exceed {self.name} KV capacity {self.pool.capacity_tokens}")
            return
        if self.handoff_at_prefill_end:  # pre-allocated when the KV arrives
            return
        self.prealloc[sr.rid] = sr
        ready_s = self.connected_at.setdefault(sr.prefill_side().name, now + self.control_plane_latency_s)
        if ready_s <= now:
            sr.handshaken = True
            self.notify()
        else:
            self.hooks.after(ready_s - now, self._handshaken, sr, sr.attempt)

    def _handshaken(self, sr: SimRequest, attempt: int) -> None:
        if not sr.done and sr.attempt == attempt and sr.rid in self.prealloc:
            sr.handshaken = True
            self.notify()

    def on_kv_arrived(self, sr: SimRequest) -> None:
        """Transfer queue poll returned Success: the prebuilt request waits to join the batch.
        (prefill_end hand-off: the request first goes through pre-allocation, already handshaken.)"""
        now = now_s(self.events)
        if self.transfer.pop(sr.rid, None) is None:
            sr.mark(PREALLOC_ENTER_S, now)
            sr.handshaken = True
            self.prealloc[sr.rid] = sr
            self.notify()
            return
        sr.mark(TRANSFER_QUEUE_LEAVE_S, now)
        self.prebuilt(sr)

    def release(self, sr: SimRequest) -> None:
        rid = sr.rid
        self.spans.settle_now(self)
        for queue in (self.transfer, self.waiting, self.running):
            if rid in queue:
                self.remaining_output_tokens -= remaining_tokens(sr)
        for queue in (self.prealloc, self.retracted, self.transfer, self.waiting):
            queue.pop(rid, None)
        if self.running.pop(rid, None) is not None:
            self.ctx_tokens -= sr.kv_tokens
        if not sr.has_time(RUNNING_ENTER_S):
            self.queued_requests -= 1
            self.queued_tokens -= sr.req.input_tokens
        self.pool.free(rid)
        sr.d_pages = 0
        self.notify()

    # -- scheduler loop -------------------------------------------------------------------
    def run(self) -> Generator[Wait, Any, None]:
        while self.alive:
            plan = plan_decode_step(self.limits, self)  # the shared decision (pdsim.policy.decode_step)
            reload_s = self.apply_plan(plan)
            if plan.replan:
                continue
            if not self.running:
                yield self.idle()
                continue
            if (yield from self.spans.sleep_through(self, self._begin_span(reload_s))):
                self._complete_span()

    def _begin_span(self, reload_s: float) -> Span:
        """Start the next iterations: as many as the batch provably runs unchanged (span.py);
        the first one starts late by this boundary's KV reload time."""
        n, spans = len(self.running), self.spans
        k, growth, first_finish = 1, None, 1
        if not self.waiting or n >= self.max_running:  # (a retraction may have made room)
            k, growth, first_finish = spans.limit(self.running.values(), self.pool.free_pages)
        if growth is not None and (self.retracted or any(sr.handshaken for sr in self.prealloc.values())):
            k = first_admission_boundary(self.limits, self, min(k, PREALLOC_LOOKAHEAD), n, growth.pages)
        span = spans.begin(n, self.ctx_tokens, k, growth, reload_s, first_finish)
        self.busy_s += span.times.step(0)
        self.iterations += 1
        self.batch_size = n
        return span

    def add_pages(self, sr: SimRequest, pages: int) -> None:
        """Grow `sr` by `pages` pages (virtual boundaries of a span, see span.py)."""
        self.pool.allocate(sr.rid, pages)
        sr.d_pages += pages

    def advanced(self, iterations: int, busy_s: float) -> None:
        n = len(self.running)
        self.ctx_tokens += iterations * n
        self.remaining_output_tokens -= iterations * n
        self.busy_s = busy_s
        self.iterations += iterations

    def _complete_span(self) -> None:
        """The span's end: its virtual boundaries and last iteration (one pass, span.py), then
        the requests that made their last token finish."""
        done = self.spans.finish(self)
        n = len(self.running)
        self.ctx_tokens += n
        self.remaining_output_tokens -= n
        for sr in done:
            del self.running[sr.rid]
            self.ctx_tokens -= sr.kv_tokens
            self.finish_request(sr)

    def kv_used_tokens(self) -> int:
        return (self.pool.used_pages + self.spans.pending_pages()) * self.page

    def build_view(self) -> InstanceView:
        return self.instance_view(len(self.running), 0, self.kv_used_tokens(), self.pool.capacity_tokens)

    def queue_counts(self) -> tuple[int, int, int, int, int, int, int]:
        return (0, len(self.prealloc), len(self.transfer), len(self.waiting), len(self.running), 0,
                len(self.retracted))

