"""What every simulated instance shares: identity, health, the wake-up of its scheduler loop.

Each instance runs one simpy process (its scheduler loop, a verb: `run`). The loop sleeps on a
wake event when it has nothing to do; `notify` wakes it. While it is busy with a forward, new work
is picked up at the next iteration boundary, as in SGLang's event loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from pdsim.config import Config
from pdsim.perf import LatencyModel
from pdsim.perf.speculative import iterations_per_step
from pdsim.policy.decisions import DecisionLog
from pdsim.policy.limits import StepLimits
from pdsim.policy.views import InstanceView
from pdsim.sim.deadlines import BootstrapTimeouts
from pdsim.sim.events import SimEnvironment, Tick, now_s
from pdsim.sim.handoff import handoff_at_prefill_end
from pdsim.sim.span import SpanPlanner
from pdsim.sim.state import InstanceSide, SimHooks, SimRequest
from pdsim.sim.steptime import StepSeries
from pdsim.sim.topology import Placement

# The queues of every role, in the time series' column order (seed names: prefill bootstrap ->
# waiting -> inflight; decode prealloc -> transfer -> waiting -> running; colocated waiting ->
# running; decode's retracted).
QUEUES = ("bootstrap", "prealloc", "transfer", "waiting", "running", "inflight", "retracted")


@dataclass(frozen=True, slots=True)
class InstanceContext:
    """Collaborators an instance needs (one per simulation)."""

    env: SimEnvironment
    cfg: Config
    hooks: SimHooks
    bootstrap_timeouts: BootstrapTimeouts | None = None  # None: faults.bootstrap_timeout_s <= 0
    step_series: dict[int, StepSeries] = field(default_factory=dict)  # id(latency) -> its series

    def series_for(self, latency: LatencyModel) -> StepSeries:
        """The decode step series of `latency`, one per model for all its instances (a series
        keeps the compiled step model of each batch size it met)."""
        series = self.step_series.get(id(latency))
        if series is None:  # (the series holds `latency`: its id is not reused while it is kept)
            series = self.step_series[id(latency)] = StepSeries(latency)
        return series


class InstanceBase(InstanceSide):
    role = "instance"

    def __init__(self, index: int, ctx: InstanceContext, latency: LatencyModel) -> None:
        self.index = index
        self.name = f"{self.role}:{index}"
        self.env = ctx.env
        self.events = ctx.env.events
        self.cfg = ctx.cfg
        self.hooks = ctx.hooks
        self.latency = latency
        ranks = ctx.cfg.cluster.parallel(self.role).dp if self.role in ("prefill", "decode", "colocated") else 1
        self.limits = StepLimits.from_config(ctx.cfg.cluster, ctx.cfg.policy, ranks, iterations_per_step(ctx.cfg.perf))
        # cluster settings read per request, kept as native fields (cfg is a Python dataclass)
        self.handoff_at_prefill_end = handoff_at_prefill_end(ctx.cfg.cluster)
        self.control_plane_latency_s = ctx.cfg.cluster.control_plane_latency_s
        self.page_size_tokens = ctx.cfg.cluster.page_size_tokens
        self.decisions: DecisionLog | None = None  # filled when a caller asks (lockstep test)
        self.alive = True  # false from the crash on
        self._healthy = True
        self._draining = False  # scaling: not routable while its work drains (pdsim.sim.scaling)
        self.on_idle: Callable[[], None] | None = None  # called when the loop goes to sleep
        self.queued_requests = 0  # router-side accounting (see InstanceView)
        self.queued_tokens = 0
        self.busy_s = 0.0
        self.iterations = 0
        self._batch_size = 0
        self.placement: Placement | None = None  # set by the cluster
        self._wake: Tick | None = None
        self.span_planner: SpanPlanner | None = None  # decode and colocated: the running batch's spans
        # the router's view is cached: what can change what `build_view` reads sets view_stale -
        # the setters of what it shows (healthy, draining, batch_size: a forward starts or the
        # loop goes idle), the entry points (dispatch, arrive, notify) and a forward's end; a
        # decode span's page growth bounds the cache in time
        self.view_stale = True
        self._view_valid_until_s = 0.0
        self._last_view: InstanceView | None = None
        self._health_view: InstanceView | None = None

    def dispatch(self, sr: SimRequest) -> None:
        """The router sent `sr` here: counted as queued at once; the router calls `arrive` after
        one control-plane hop (one timer for both halves of a disaggregated request)."""
        self.view_stale = True
        self.queued_requests += 1
        self.queued_tokens += self.dispatched_tokens(sr)

    def dispatched_tokens(self, sr: SimRequest) -> int:
        """Tokens the router counts as queued here for `sr` (prompt tokens still to prefill)."""
        return sr.prompt.tokens

    def arrive(self, sr: SimRequest, attempt: int) -> None:
        """`_receive(sr)` unless the request ended, was re-dispatched (a newer attempt) or this
        instance died since the dispatch."""
        if sr.done or sr.attempt != attempt or not self.alive:
            return
        self.view_stale = True
        self._receive(sr)

    def _receive(self, sr: SimRequest) -> None:
        raise NotImplementedError

    @property
    def healthy(self) -> bool:
        """The router's belief: false once the crash is detected."""
        return self._healthy

    @healthy.setter
    def healthy(self, value: bool) -> None:
        self._healthy = value
        self.view_stale = True
        self.hooks.health_changed()

    @property
    def draining(self) -> bool:
        """Scaling: not routable while its work drains (pdsim.sim.scaling)."""
        return self._draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self._draining = value
        self.view_stale = True

    @property
    def batch_size(self) -> int:
        """Requests in the forward that runs now (0 while the loop is idle)."""
        return self._batch_size

    @batch_size.setter
    def batch_size(self, n: int) -> None:
        self._batch_size = n
        self.view_stale = True

    def view(self) -> InstanceView:
        """The instance as the router sees it now (the same frozen object while unchanged)."""
        if self.view_stale or now_s(self.events) > self._view_valid_until_s or self._last_view is None:
            self._last_view = self.build_view()
            self.view_stale = False
            self._view_valid_until_s = self.span_planner.view_valid_until_s() if self.span_planner is not None else math.inf
        return self._last_view

    def build_view(self) -> InstanceView:
        raise NotImplementedError

    def health_view(self) -> InstanceView:
        """The instance as a router that reads only health sees it (RouterPolicy.reads_load
        False): id, role and health; the load fields keep their defaults. The same object while
        the health is unchanged, and never rebuilt by load changes."""
        healthy = self._healthy and not self.draining
        view = self._health_view
        if view is None or view.healthy != healthy:
            view = self._health_view = InstanceView(instance_id=self.index, role=self.role, healthy=healthy)
        return view

    def notify(self) -> None:
        """The next scheduling decision may differ: wake the loop if it sleeps, or end a
        running decode span at its next iteration boundary (span.py)."""
        self.view_stale = True
        if self.span_planner is not None:
            self.span_planner.truncate()
        wake = self._wake
        if wake is not None:  # (forgotten once succeeded: no read of simpy's `triggered` property)
            self._wake = None
            wake.at(self.events, 0.0)  # (Event.succeed)

    def idle(self) -> Tick:
        """Nothing to run: no forward (batch size 0) until `notify` (see `sleep`)."""
        self.batch_size = 0
        return self.sleep()

    def sleep(self) -> Tick:
        wake = self._wake = Tick()
        if self.on_idle is not None:
            self.on_idle()  # (which may notify: `wake` is then triggered already, and forgotten)
        return wake

    def kv_used_tokens(self) -> int:
        """KV tokens held now (evictable prefix-cache blocks count as free)."""
        raise NotImplementedError

    def queue_counts(self) -> tuple[int, int, int, int, int, int, int]:
        """Requests per queue, in QUEUES order (0 for a queue this role does not have)."""
        raise NotImplementedError

    def start_drain(self) -> None:
        """Stop taking new work: the router sees the instance as unhealthy from now on."""
        self.draining = True
        self.hooks.health_changed()

    def retire(self) -> None:
        """Stop the scheduler loop of a drained instance (its GPUs go to a new instance)."""
        self.on_idle = None
        self.alive = False
        self.notify()

    def crash(self) -> None:
        if self.span_planner is not None:  # tokens of the iterations completed before the crash
            self.span_planner.settle_now(self)  # type: ignore[arg-type]  # (decode, colocated: BatchOwners)
            self.span_planner.span = None
        self.alive = False
        self.batch_size = 0
        self.notify()

    def instance_view(self, running: int, inflight: int, kv_used_tokens: int, kv_total_tokens: int) -> InstanceView:
        return InstanceView(
            instance_id=self.index, role=self.role, queued_requests=self.queued_requests,
            queued_tokens=self.queued_tokens, running_requests=running, inflight_requests=inflight,
            kv_used_tokens=kv_used_tokens, kv_total_tokens=kv_total_tokens, healthy=self._healthy and not self.draining,
        )

    def stats(self) -> dict[str, str | float]:
        now = now_s(self.events)
        return {
            "role": self.role,
            "busy_s": self.busy_s,
            "utilization": self.busy_s / now if now > 0 else 0.0,
            "iterations": self.iterations,
            "alive": self.alive,
        }
