"""Prefill instance: bootstrap -> waiting -> (forward) -> inflight.

- bootstrap: the request waits until its decode side has handshaken and pre-allocated (the
  TransferInfo message arrives); prompts longer than the KV pool are rejected here; a request
  still here after faults.bootstrap_timeout_s fails (one deadline queue for all instances:
  deadlines.py).
- waiting: the PrefillAdder (pdsim.policy) forms each forward's batch from an in-progress chunked
  request and the waiting queue, skipping prefix-cached tokens; max_new_tokens is 1. Under
  cluster.prefill_dp_dispatch=bootstrap_room each attention-DP rank fills its own budget from the
  requests its bootstrap room sends it (one chunked request per rank), and the forward is priced
  with the chunks where they lie (pdsim.policy.dp_dispatch, perf.prefill_ranks_time_s).
- inflight: after each chunk's forward its KV pages go on the wire (transfer.py); when the last
  chunk's transfer succeeds the KV is released (full blocks stay in the prefix cache).
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from typing import Any

import simpy

from pdsim.perf import LatencyModel, prefill_ranks_time_s
from pdsim.policy import (
    BOOTSTRAP_ROOM,
    PrefillBatch,
    RequestView,
    plan_prefill_step,
    plan_ranked_prefill_step,
    prefill_dp_rank,
)
from pdsim.policy.kvpoll import KVPoll, advance_poll
from pdsim.policy.prefix_cache import BlockNode
from pdsim.policy.views import ROLE_PREFILL, InstanceView
from pdsim.sim.chunks import ChunkOwner, Planned, start_chunks
from pdsim.sim.events import Wait, now_s, start, timeout
from pdsim.sim.instance import InstanceBase, InstanceContext
from pdsim.sim.kv_tiers import InstanceTiers
from pdsim.sim.prompt_kv import PromptKV
from pdsim.sim.state import (
    BOOTSTRAP_ENTER_S,
    BOOTSTRAP_LEAVE_S,
    INFLIGHT_ENTER_S,
    INFLIGHT_LEAVE_S,
    PREFILL_END_S,
    PREFILL_WAITING_ENTER_S,
    SimRequest,
)
from pdsim.sim.transfer import chunk_pages_to_send


class PrefillInstance(InstanceBase, ChunkOwner):
    role = ROLE_PREFILL

    def __init__(self, index: int, ctx: InstanceContext, latency: LatencyModel, kv: PromptKV) -> None:
        super().__init__(index, ctx, latency)
        self.kv = kv
        self.bootstrap: dict[int, SimRequest] = {}
        self.ready: list[SimRequest] = []
        self.waiting: dict[int, SimRequest] = {}
        self.chunked: dict[int, SimRequest] = {}  # DP rank -> its part-prefilled request (rank 0 unless ranked)
        self.ranked = self.limits.prefill_dp_dispatch == BOOTSTRAP_ROOM and self.limits.dp_ranks > 1
        self.inflight: dict[int, SimRequest] = {}
        self._matches: dict[int, list[BlockNode]] = {}  # the planned candidates' cached blocks
        self.timeouts = ctx.bootstrap_timeouts
        self.prefill_time_s = latency.prefill_timer()  # (roofline and linear: compiled)
        start(self.env, self.run())

    # -- messages -------------------------------------------------------------------------
    def _receive(self, sr: SimRequest) -> None:
        sr.mark(BOOTSTRAP_ENTER_S, now_s(self.events))
        if sr.prompt.tokens > self.kv.pool.capacity_tokens:
            self.hooks.abort(
                sr, f"input_tokens {sr.prompt.tokens} exceed {self.name} KV capacity {self.kv.pool.capacity_tokens}"
            )
            return
        self.bootstrap[sr.rid] = sr
        if self.timeouts is not None:
            self.timeouts.add(self, sr)
        if sr.prompt.ready or self.handoff_at_prefill_end:  # prefill_end: no decode to wait for
            sr.prompt.ready = True
            self.ready.append(sr)
            self.notify()

    def on_transfer_info(self, sr: SimRequest, attempt: int) -> None:
        """The decode side pre-allocated and sent its page indices: KVPoll WaitingForInput."""
        if sr.done or sr.attempt != attempt or not self.alive:
            return
        sr.prompt.ready = True
        sr.poll = advance_poll(sr.poll, KVPoll.WaitingForInput, sr.rid)
        if sr.rid in self.bootstrap:
            self.ready.append(sr)
            self.notify()

    def in_bootstrap(self, sr: SimRequest, attempt: int) -> bool:
        """`sr`, on this attempt, still waits in the bootstrap queue here (BootstrapSide)."""
        return not sr.done and sr.attempt == attempt and self.bootstrap.get(sr.rid) is sr

    def bootstrap_timed_out(self, sr: SimRequest) -> None:
        """faults.bootstrap_timeout_s passed with `sr` still in bootstrap (deadlines.py)."""
        self.hooks.abort(sr, f"bootstrap_timeout after {self.cfg.faults.bootstrap_timeout_s} s on {self.name}", True)

    def on_transfer_success(self, sr: SimRequest) -> None:
        """Inflight poll returned Success: release the KV (blocks stay cached)."""
        self.inflight.pop(sr.rid, None)
        sr.mark(INFLIGHT_LEAVE_S, now_s(self.events))
        self.kv.release(sr, now_s(self.events))
        self.notify()

    def release(self, sr: SimRequest) -> None:
        """Forget an aborted request and free what it holds here."""
        rid = sr.rid
        self.bootstrap.pop(rid, None)
        self.waiting.pop(rid, None)
        self.inflight.pop(rid, None)
        self._drop_chunked(sr)
        if not sr.has_time(PREFILL_END_S):
            self.queued_requests -= 1
            self.queued_tokens -= sr.prompt.tokens
        self.kv.release(sr, now_s(self.events))
        self.notify()

    # -- scheduler loop -------------------------------------------------------------------
    def run(self) -> Generator[Wait, Any, None]:
        while self.alive:
            self._pop_bootstrapped()
            planned = self._schedule()
            if not planned:
                yield self.idle()
                continue
            step_s = self._step_s(planned)
            store_read = None
            tiers = self.kv.tiers
            if tiers is not None:
                step_s, store_read = self._with_loads(tiers, step_s)
            self.busy_s += step_s
            self.iterations += 1
            self.batch_size = len(planned)  # (the router's view is stale from here)
            layerwise = self.cfg.cluster.layerwise_transfer
            if layerwise:
                self._send_chunks(planned)
            if store_read is None:
                yield timeout(self.events, step_s)
            elif self.cfg.kv_tiers.overlap_load:
                yield self.env.all_of([self.env.timeout(step_s), store_read])
            else:
                yield store_read
                yield timeout(self.events, step_s)
            self.view_stale = True
            if self.alive:
                self._complete(planned, send=not layerwise)

    def _with_loads(self, tiers: InstanceTiers, compute_s: float) -> tuple[float, simpy.Event | None]:
        """Step time with this batch's tier loads (PCIe/SSD overlapped layer-wise or added) and
        the store read's network flow (None when nothing comes from the store)."""
        local_s, store_bytes = tiers.take_batch_load()
        step_s = max(compute_s, local_s) if self.cfg.kv_tiers.overlap_load else compute_s + local_s
        read = tiers.start_store_read  # (set whenever a store exists)
        if store_bytes <= 0 or read is None:
            return step_s, None
        done = self.env.event()
        read(store_bytes, done.succeed)
        return step_s, done

    def _pop_bootstrapped(self) -> None:
        now = now_s(self.events)
        for sr in self.ready:  # entries of an earlier attempt have p_ready reset: skipped
            if sr.prompt.ready and self.bootstrap.get(sr.rid) is sr:
                del self.bootstrap[sr.rid]
                sr.mark(BOOTSTRAP_LEAVE_S, now)
                sr.mark(PREFILL_WAITING_ENTER_S, now)
                self.waiting[sr.rid] = sr
        self.ready.clear()

    # -- pdsim.policy.PrefillExecutor: what the shared step planner reads ----------------------
    def prefill_candidates(self) -> Iterator[RequestView]:
        """(each waiting request's cached blocks go to self._matches as it is viewed)"""
        matches: dict[int, list[BlockNode]] = {}
        self._matches = matches
        return self._candidates(matches)

    def free_kv_tokens(self) -> int:
        return self.kv.available_tokens

    def _candidates(self, matches: dict[int, list[BlockNode]]) -> Iterator[RequestView]:
        for rank in sorted(self.chunked):
            chunked = self.chunked[rank]
            yield RequestView(chunked.rid, chunked.prompt.tokens, 1, prefilled_tokens=chunked.prompt.prefilled,
                              cached_tokens=chunked.prompt.cached_tokens)
        for sr in self.waiting.values():
            path = self.kv.peek_match(sr)
            matches[sr.rid] = path
            cached = self.kv.plan_hit(sr, path)
            yield RequestView(sr.rid, sr.prompt.tokens, 1, prefilled_tokens=cached, cached_tokens=cached)

    def bootstrap_room(self, request_id: int) -> int:
        """pdsim.policy.RankedPrefillExecutor: a candidate's bootstrap room."""
        sr = self.waiting.get(request_id)
        if sr is None:
            sr = next(c for c in self.chunked.values() if c.rid == request_id)
        return sr.bootstrap_room

    def _plan(self) -> PrefillBatch:
        """The shared decision (pdsim.policy.prefill_step)."""
        if not self.ranked:
            return plan_prefill_step(self.limits, self)
        return plan_ranked_prefill_step(self.limits, self)

    def _schedule(self) -> Planned:
        if not self.chunked and not self.waiting:
            return []
        batch = self._plan()
        carried = tuple(self.chunked[rank] for rank in sorted(self.chunked))
        planned = start_chunks(self, batch.chunks, self._matches, now_s(self.events), carried) if batch.chunks else []
        if self.decisions is not None and planned:
            self.decisions.prefill(now_s(self.events), self.name, [c for _, _, c in planned])
        return planned

    def _rank_of(self, sr: SimRequest) -> int:
        return prefill_dp_rank(sr.bootstrap_room, self.limits.dp_ranks) if self.ranked else 0

    def _drop_chunked(self, sr: SimRequest) -> None:
        rank = self._rank_of(sr)
        if self.chunked.get(rank) is sr:
            del self.chunked[rank]

    def _step_s(self, planned: Planned) -> float:
        """The forward's time: its chunks where the ranks placed them when ranked (a chunk that
        did not start is not in `planned`), else as the model spreads them."""
        if not self.ranked:
            return self.prefill_time_s([(c.new_tokens, c.context_tokens) for _, _, c in planned])
        ranks: list[list[tuple[int, int]]] = [[] for _ in range(self.limits.dp_ranks)]
        for sr, _, c in planned:
            ranks[self._rank_of(sr)].append((c.new_tokens, c.context_tokens))
        return prefill_ranks_time_s(self.latency, ranks)

    def _send_chunks(self, planned: Planned) -> None:
        """Layer-wise overlap: each chunk's pages go on the wire as its forward starts (the
        transfer still completes no earlier than the forward's end, see Simulation.transfer_ready in cluster.py)."""
        page = self.page_size_tokens
        for sr, _, chunk in planned:
            end = sr.prompt.prefilled + chunk.new_tokens
            self.hooks.send_kv(sr, chunk_pages_to_send(end, sr.prompt.tokens, sr.send.pages, page, chunk.is_last),
                               chunk.is_last)

    def _complete(self, planned: Planned, send: bool = True) -> None:
        now = now_s(self.events)
        page = self.page_size_tokens
        for sr, attempt, chunk in planned:
            if sr.done or sr.attempt != attempt:
                continue
            sr.prompt.prefilled += chunk.new_tokens
            pages = chunk_pages_to_send(sr.prompt.prefilled, sr.prompt.tokens, sr.send.pages, page, chunk.is_last)
            if chunk.is_last:
                sr.mark(PREFILL_END_S, now)
                sr.mark(INFLIGHT_ENTER_S, now)
                self.queued_requests -= 1
                self.queued_tokens -= sr.prompt.tokens
                self.inflight[sr.rid] = sr
                self._drop_chunked(sr)
            else:
                self.chunked[self._rank_of(sr)] = sr
            if send:
                self.hooks.send_kv(sr, pages, chunk.is_last)
            elif chunk.is_last:
                self.hooks.transfer_ready(sr)

    def peek_match(self, sr: SimRequest) -> list[BlockNode]:
        """The cached blocks of `sr`'s prompt here (nothing locked), for cache-aware routing."""
        return self.kv.peek_match(sr)

    def kv_used_tokens(self) -> int:
        return self.kv.used_tokens

    def stats(self) -> dict[str, str | float]:
        stats = super().stats()
        if self.kv.tiers is not None:
            stats.update(self.kv.tiers.stats_dict())
        return stats

    def build_view(self) -> InstanceView:
        return self.instance_view(self.batch_size, len(self.inflight), self.kv.used_tokens, self.kv.pool.capacity_tokens)

    def queue_counts(self) -> tuple[int, int, int, int, int, int, int]:
        return (len(self.bootstrap), 0, 0, len(self.waiting) + len(self.chunked), self.batch_size,
                len(self.inflight), 0)
