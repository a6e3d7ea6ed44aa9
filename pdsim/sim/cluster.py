"""The simulated cluster: instances, network and router built from a Config; request lifecycles.

`Simulation` implements the hooks instances call (`SimHooks`): delayed callbacks, finishing and
aborting requests (with optional retry), sending KV chunks and concluding transfers. It keeps
every request that has arrived and not reached a terminal status in `active`, so nothing can be
lost silently, and records exactly one trace row per request.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from pdsim import rng
from pdsim.config import Config
from pdsim.perf import build_latency_model, instance_kv_capacity_tokens
from pdsim.policy.batching import prefill_token_budget
from pdsim.policy.kvpoll import KVPoll, advance_poll
from pdsim.sim.colocated import ColocatedInstance
from pdsim.sim.deadlines import BootstrapTimeouts
from pdsim.sim.decode import DecodeInstance
from pdsim.sim.events import SimEnvironment, Tick, now_s, start
from pdsim.sim.faults import FaultInjector
from pdsim.sim.handoff import validate_handoff
from pdsim.sim.instance import InstanceContext
from pdsim.sim.kv_pool import KVPool
from pdsim.sim.kv_tiers_setup import attach_kv_tiers
from pdsim.sim.network import Network
from pdsim.sim.prefill import PrefillInstance
from pdsim.sim.prompt_kv import PromptKV
from pdsim.sim.records import SimRecorder
from pdsim.sim.router import Router, arrivals
from pdsim.sim.scaling import SCALING_OFF, Rebalancer, validate_scaling
from pdsim.sim.state import (
    FINISH_S,
    PREFILL_END_S,
    TRANSFER_END_S,
    TRANSFER_START_S,
    SimHooks,
    SimRequest,
    record_row,
)
from pdsim.sim.timeseries import TimeseriesSampler
from pdsim.sim.topology import Topology
from pdsim.sim.transfer import TransferService, state_wire_bytes, wire_bytes_per_token
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED
from pdsim.workload.closed_loop import ClosedLoop, closed_loop_of
from pdsim.workload.request import Request, Workload

log = logging.getLogger(__name__)
MODES = ("disaggregated", "colocated")


class Simulation(SimHooks):
    def __init__(self, cfg: Config, workload: Workload) -> None:
        validate_config(cfg)
        self.cfg = cfg
        self.mode = cfg.cluster.mode
        self.workload = workload
        self.env = SimEnvironment()
        self.events = self.env.events
        self.network = Network(self.env)
        self.topology = Topology(self.network, cfg.cluster, cfg.hardware)
        self.total_requests = len(workload)  # (read once per request: Workload's len is Python)
        self.recorder = SimRecorder(self.total_requests)
        self.active: dict[int, SimRequest] = {}
        self.arrived = 0
        self.terminal = 0
        self.profiling = False  # closed loop with a warm-up barrier: the profiling phase has started
        self.done = self.env.event()
        self.health_epoch = 0  # bumped whenever an instance's routability changes
        self.tokenize_s_per_token = cfg.cluster.tokenize_s_per_token
        # when each of the frontend's tokenizer threads is done with its queue (none: no queue)
        self.tokenizer_free_s = [0.0] * cfg.cluster.tokenize_threads
        self.on_terminal: Callable[[], None] | None = None
        self.fault_rng = rng.stream(cfg.seed, "faults.transfer")
        timeout_s = cfg.faults.bootstrap_timeout_s
        timeouts = BootstrapTimeouts(self.env, timeout_s) if timeout_s > 0 else None
        ctx = InstanceContext(self.env, cfg, self, timeouts)
        self.prefill, self.decode = self._build_instances(ctx, workload.block_tokens)
        self.instances = [*self.prefill, *self.decode]
        self.router = Router(
            self.env, cfg, self, self.prefill, self.decode,
            rng.stream(cfg.seed, "router.route"), rng.stream(cfg.seed, "router.bootstrap_room"),
        )
        self.transfer = TransferService(  # the last chunk carries the aux data and any linear-attention state
            self.network, self.topology, cfg.cluster.page_size_tokens, cfg.cluster.link_latency_s,
            cfg.cluster.transfer_aux_bytes + state_wire_bytes(cfg.model, cfg.cluster.decode_tp),
        )
        self.wire_bytes_per_token = wire_bytes_per_token(cfg.model, cfg.cluster.decode_tp)
        self.prefill_dp, self.decode_dp = cfg.cluster.prefill_dp, cfg.cluster.decode_dp
        self.transfer_failure_prob = cfg.faults.transfer_failure_prob
        self.instant_kv = cfg.cluster.transfer_backend == "none"  # no wire: KV at decode at once
        self.faults = FaultInjector(cfg.faults, self, {i.name: i for i in self.instances})
        self.sampler = TimeseriesSampler(self.env, self.network, self.instances, cfg.timeseries_interval_s)
        self.loop: ClosedLoop | None = closed_loop_of(cfg.scenario)
        # a client's next request leaves when it has the last response (token_delivery_s after
        # the request ended here: the trace's finish_s) and has thought
        self.resend_s = cfg.cluster.token_delivery_s + (self.loop.think_s if self.loop is not None else 0.0)
        self._unsent: Iterator[Request] = iter(workload)
        if self.loop is None:
            start(self.env, arrivals(self.env, self._requests(), self._on_arrival))
        elif self.total_requests:
            self.after(0.0, self._send_first)
        self.scaler = Rebalancer(self, ctx, workload.block_tokens) if cfg.policy.scaling != SCALING_OFF else None

    # -- construction ----------------------------------------------------------------------
    def _capacity_pages(self, side: str) -> int:
        c = self.cfg.cluster
        tokens = c.kv_capacity_tokens or instance_kv_capacity_tokens(
            self.cfg.model, self.cfg.hardware, c.parallel(side), c.gpu_memory_utilization, c.max_running_requests)
        return tokens // c.page_size_tokens

    def _prompt_kv(self, name: str, side: str, block_tokens: int) -> PromptKV:
        c = self.cfg.cluster
        return PromptKV(name, self._capacity_pages(side), c.page_size_tokens, c.prefix_cache, block_tokens,
                        c.prefix_cache_tokens)

    def _latency(self, side: str) -> Any:
        cluster = self.cfg.cluster
        return build_latency_model(cluster.perf_for(side, self.cfg.perf), self.cfg.model, self.cfg.hardware,
                                   cluster.parallel(side), data_dir=self.cfg.data_dir)

    def _build_instances(self, ctx: InstanceContext, block_tokens: int) -> tuple[list[Any], list[Any]]:
        c = self.cfg.cluster
        if self.mode == "colocated":
            lat = self._latency("colocated")
            insts = [ColocatedInstance(i, ctx, lat, self._prompt_kv(f"colocated:{i}", "colocated", block_tokens))
                     for i in range(c.colocated)]
            for inst in insts:
                inst.placement = self.topology.place(inst.name, c.parallel("colocated").gpus)
            return insts, []
        p_lat, d_lat = self._latency("prefill"), self._latency("decode")
        prefill = [self.new_prefill(i, ctx, p_lat, block_tokens) for i in range(c.prefill)]
        decode = [self.new_decode(i, ctx, d_lat) for i in range(c.decode)]
        for p_inst in prefill:
            p_inst.placement = self.topology.place(p_inst.name, c.parallel("prefill").gpus, c.prefill_dp)
        for d_inst in decode:
            d_inst.placement = self.topology.place(d_inst.name, c.parallel("decode").gpus, c.decode_dp)
        attach_kv_tiers(self.cfg, prefill, self.network, block_tokens)
        return prefill, decode

    def new_prefill(self, index: int, ctx: InstanceContext, latency: Any, block_tokens: int) -> PrefillInstance:
        """One prefill instance (not yet placed); also used by scaling for a moved instance."""
        return PrefillInstance(index, ctx, latency, self._prompt_kv(f"prefill:{index}", "prefill", block_tokens))

    def new_decode(self, index: int, ctx: InstanceContext, latency: Any) -> DecodeInstance:
        """One decode instance (not yet placed); also used by scaling for a moved instance."""
        c = self.cfg.cluster
        reload_s_per_token = wire_bytes_per_token(self.cfg.model, c.decode_tp) / (
            c.decode_tp * self.cfg.hardware.pcie_gbps * 1e9)
        pool = KVPool(f"decode:{index}", self._capacity_pages("decode"), c.page_size_tokens)
        return DecodeInstance(index, ctx, latency, pool, reload_s_per_token)

    def _requests(self) -> Iterator[SimRequest]:
        for req in self.workload:
            yield self._sim_request(req)

    def _sim_request(self, req: Request) -> SimRequest:
        return SimRequest(req=req, prompt_tokens=req.input_tokens, token_times=[] if self.cfg.record_token_times else None)

    # -- closed loop (pdsim.workload.closed_loop) ------------------------------------------------
    def _send_first(self) -> None:
        """The closed loop's first wave: one request per client, at t=0 or along its ramp."""
        loop = self.loop
        assert loop is not None
        for client in range(min(loop.concurrency, self.total_requests)):
            start_s = loop.first_send_s(client)
            if start_s > 0.0:
                self.after(start_s, self._send_next)
            else:
                self._send_next()

    def _start_profiling(self) -> None:
        """AIPerf's profiling phase (scenario.warmup_barrier): the clients' first wave again."""
        self.profiling = True
        self._send_first()

    def _send_next(self) -> None:
        """A client sends the workload's next request now, unless none may be sent any more;
        then the run ends with the requests sent so far (every one of them accounted for)."""
        loop = self.loop
        assert loop is not None
        now = now_s(self.events)
        if loop.at_barrier(self.arrived) and not self.profiling:  # this client waits for the profiling phase
            return
        if not loop.may_send(now, self.arrived, self.total_requests):
            if self.arrived < self.total_requests:  # out of time: the sent ones are the run
                self.total_requests = self.arrived
                if self.terminal == self.total_requests and not self.done.triggered:
                    self.done.succeed()
            return
        self._on_arrival(self._sim_request(next(self._unsent)._replace(arrival_s=now)))

    def _on_arrival(self, sr: SimRequest) -> None:
        self.arrived += 1
        self.active[sr.rid] = sr
        if self.tokenize_s_per_token > 0.0:
            self.after(self._tokenized_in_s(sr), self._dispatch_tokenized, sr)
        else:
            self.router.dispatch(sr)

    def _tokenized_in_s(self, sr: SimRequest) -> float:
        """How long from now until the frontend has tokenized `sr`'s prompt
        (cluster.tokenize_s_per_token): on the thread free first (the lowest on a tie), after
        the prompts that arrived before it; at once on a thread of its own without a queue."""
        cost_s = self.tokenize_s_per_token * sr.req.input_tokens
        free = self.tokenizer_free_s
        if not free:
            return cost_s
        now = now_s(self.events)
        thread = free.index(min(free))
        free[thread] = max(now, free[thread]) + cost_s
        return free[thread] - now

    def _dispatch_tokenized(self, sr: SimRequest) -> None:
        if not sr.done:  # (a fault may have failed it while it waited)
            self.router.dispatch(sr)

    # -- hooks -------------------------------------------------------------------------------
    def health_changed(self) -> None:
        self.health_epoch += 1

    def after(self, delay_s: float, fn: Callable[..., Any], *args: Any) -> None:
        """Call fn(*args) `delay_s` from now (0 still goes through the event queue, FIFO)."""
        Tick(lambda _e: fn(*args)).at(self.events, delay_s)

    def finish(self, sr: SimRequest) -> None:
        sr.done = True
        sr.set_time(FINISH_S, now_s(self.events))
        self._record(sr, STATUS_FINISHED, "")
        self._terminal(sr)

    def abort(self, sr: SimRequest, reason: str, retryable: bool = False) -> None:
        """Fail `sr` now: both halves release what it holds; retry or record it as failed."""
        if sr.done:
            return
        sr.poll = advance_poll(sr.poll, KVPoll.Failed, sr.rid)
        for flow in sr.send.flows:
            self.network.cancel(flow)
        if sr.prefill is not None:
            sr.prefill.release(sr)
        if sr.decode is not None:
            sr.decode.release(sr)
        faults = self.cfg.faults
        if retryable and faults.retry_failed and sr.attempt < faults.max_retries:
            log.debug("request %d retried after: %s", sr.rid, reason)
            sr.reset_attempt()
            self.router.dispatch(sr)
            return
        sr.done = True
        sr.set_time(FINISH_S, now_s(self.events))
        self._record(sr, STATUS_FAILED, reason)
        self._terminal(sr)

    def reject(self, sr: SimRequest, reason: str) -> None:
        """Record `sr` as rejected by admission (it never reached an instance)."""
        sr.done = True
        sr.set_time(FINISH_S, now_s(self.events))
        self._record(sr, STATUS_REJECTED, reason)
        self._terminal(sr)

    def send_kv(self, sr: SimRequest, pages: int, is_last: bool) -> None:
        """Put a chunk's pages (and the aux data with the last chunk) on the wire."""
        if is_last:
            sr.send.last_sent = True
            prob = self.transfer_failure_prob
            sr.send.fail = prob > 0 and bool(self.fault_rng.random() < prob)
        if pages == 0 and not is_last:
            return
        if self.instant_kv:
            sr.mark(TRANSFER_START_S, now_s(self.events))
            sr.poll = advance_poll(sr.poll, KVPoll.Transferring, sr.rid)
            sr.send.pages += pages
            if is_last:
                self.transfer_ready(sr)
            return
        prefill, decode = sr.prefill_side(), sr.decode_side()
        if not decode.alive:
            self.abort(sr, f"transfer_failed: {decode.name} is down (write to a dead peer)", True)
            return
        sr.mark(TRANSFER_START_S, now_s(self.events))
        sr.poll = advance_poll(sr.poll, KVPoll.Transferring, sr.rid)
        sr.send.flows_pending += 1
        attempt = sr.attempt
        room = sr.bootstrap_room  # each side's DP rank of the request: SGLang's bootstrap_room % dp
        flow, nbytes = self.transfer.send(
            prefill.name, decode.name, pages, self.wire_bytes_per_token, is_last,
            lambda: self._chunk_arrived(sr, attempt), room % self.prefill_dp, room % self.decode_dp,
        )
        sr.send.flows.append(flow)
        sr.send.pages += pages
        sr.send.transfer_bytes += nbytes

    def _chunk_arrived(self, sr: SimRequest, attempt: int) -> None:
        if sr.done or sr.attempt != attempt:
            return
        sr.send.flows_pending -= 1
        self.transfer_ready(sr)

    def transfer_ready(self, sr: SimRequest) -> None:
        """Conclude the transfer once the last chunk was sent, every flow arrived and (with
        layer-wise overlap) the last forward has ended."""
        if sr.send.last_sent and sr.send.flows_pending == 0 and sr.has_time(PREFILL_END_S) and not sr.done:
            self.transfer_done(sr, not sr.send.fail)

    def transfer_done(self, sr: SimRequest, success: bool) -> None:
        sr.set_time(TRANSFER_END_S, now_s(self.events))
        prefill, decode = sr.prefill_side(), sr.decode_side()
        if not success:
            self.abort(sr, f"transfer_failed: {prefill.name} -> {decode.name}", True)
            return
        sr.poll = advance_poll(sr.poll, KVPoll.Success, sr.rid)
        sr.send.flows = []
        prefill.on_transfer_success(sr)
        decode.on_kv_arrived(sr)

    def _record(self, sr: SimRequest, status: str, reason: str) -> None:
        record_row(self.recorder, sr, self.mode, status, reason)

    def _terminal(self, sr: SimRequest) -> None:
        del self.active[sr.rid]
        self.terminal += 1
        if self.on_terminal is not None:
            self.on_terminal()
        loop = self.loop
        if loop is not None and self.arrived < self.total_requests:
            if not loop.at_barrier(self.arrived) or self.profiling:
                self.after(self.resend_s, self._send_next)  # its client's next request
            elif self.terminal == self.arrived:  # the last warm-up request ended: every client sends
                self.after(self.resend_s, self._start_profiling)
            # else: its client waits (decided now: a send already queued would not see the barrier)
        if self.terminal == self.total_requests:
            self.done.succeed()


def validate_config(cfg: Config) -> None:
    """Reject configurations the simulator cannot run, naming the field and value."""
    c = cfg.cluster
    if c.mode not in MODES:
        raise ValueError(f"cluster: field 'mode' has unknown value {c.mode!r} (choose from {MODES})")
    counts = {"colocated": c.colocated} if c.mode == "colocated" else {"prefill": c.prefill, "decode": c.decode}
    for name, value in counts.items():
        if value < 1:
            raise ValueError(f"cluster: field {name!r} must be >= 1 in {c.mode} mode, got {value}")
    if c.page_size_tokens < 1:
        raise ValueError(f"cluster: field 'page_size_tokens' must be >= 1, got {c.page_size_tokens}")
    budget = prefill_token_budget(c.max_prefill_tokens, c.chunk_size_tokens)
    if budget < c.page_size_tokens:
        raise ValueError(f"cluster: prefill token budget {budget} is smaller than page_size_tokens {c.page_size_tokens}")
    if c.max_running_requests < 1:
        raise ValueError(f"cluster: field 'max_running_requests' must be >= 1, got {c.max_running_requests}")
    if not 0.0 <= cfg.faults.transfer_failure_prob <= 1.0:
        raise ValueError(f"faults: field 'transfer_failure_prob' must be in [0, 1], got {cfg.faults.transfer_failure_prob}")
    validate_handoff(c)
    validate_scaling(cfg)
