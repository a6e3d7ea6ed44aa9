"""P:D rebalancing during a run (policy.scaling=rebalance): moves instances between roles.

`Rebalancer` runs one simpy process (`watch`). At t = k * scaling_interval_s (k = 1, 2, ...) it
samples the views of every prefill and decode instance the router knows and, unless a move is
under way, asks the pure policy (`pdsim.policy.scaling.propose_move`) for a move. A move:

1. drain: the donor is marked `draining` (the router sees it as unhealthy, so it gets no new
   requests); its queued and running requests finish normally. The drain ends when its
   scheduler loop goes to sleep with every queue empty and no request still counted as queued
   for it (dispatched requests still on their control-plane hop count); at once if it is idle.
2. retire: its scheduler stops, its KV pool must hold no request's pages (KVPoolError if one
   does: a simulator bug). It stays in the router's list (unhealthy), the instance list and the
   time series, so end-of-run invariants still cover it.
3. warm-up: `scaling_warmup_s` after the drain ended, a new instance of the other role, with the
   next free id of that role, starts on the donor's GPUs (same placement and NICs) and joins the
   router, the instance list and the time-series sampler.

The policy's cooldown counts from the moment the new instance is ready (drain end + warm-up).
Each move is recorded in `events` (time_s = ready time, plus decided_s and drained_s).
Requires equal prefill_tp and decode_tp, disaggregated mode and no KV tiers.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Generator
from dataclasses import replace
from typing import Any

import simpy

from pdsim.config import Config
from pdsim.policy.scaling import (
    ScalingDecision,
    ScalingParams,
    ScalingSample,
    ScalingState,
    propose_move,
)
from pdsim.policy.views import ROLE_PREFILL
from pdsim.sim.events import now_s
from pdsim.sim.instance import InstanceContext

log = logging.getLogger(__name__)
SCALING_OFF = "none"
SCALING_MODES = (SCALING_OFF, "rebalance")


def validate_scaling(cfg: Config) -> None:
    """Reject scaling settings the simulator cannot run, naming the field and value."""
    p, c = cfg.policy, cfg.cluster
    if p.scaling not in SCALING_MODES:
        raise ValueError(f"policy: field 'scaling' has unknown value {p.scaling!r} (choose from {SCALING_MODES})")
    if p.scaling == SCALING_OFF:
        return
    if c.mode != "disaggregated":
        raise ValueError(f"policy: scaling={p.scaling!r} needs cluster.mode=disaggregated, got {c.mode!r}")
    if c.parallel("prefill") != c.parallel("decode"):
        raise ValueError(
            f"policy: scaling={p.scaling!r} moves instances between roles on the same GPUs and needs "
            f"the same layout on both sides, got prefill {c.parallel('prefill').text}, decode {c.parallel('decode').text}"
        )
    if cfg.kv_tiers.enabled:
        raise ValueError(f"policy: scaling={p.scaling!r} is not supported together with kv_tiers")
    if p.scaling_interval_s <= 0:
        raise ValueError(f"policy: field 'scaling_interval_s' must be > 0, got {p.scaling_interval_s}")
    scaling_params(cfg)  # threshold errors surface at construction


def scaling_params(cfg: Config) -> ScalingParams:
    p = cfg.policy
    return ScalingParams(
        window_s=p.scaling_window_s, min_samples=p.scaling_min_samples,
        prefill_queue_tokens=p.scaling_prefill_queue_tokens, decode_kv_fraction=p.scaling_decode_kv_fraction,
        decode_queue_requests=p.scaling_decode_queue_requests, high=p.scaling_high, low=p.scaling_low,
        warmup_s=p.scaling_warmup_s, cooldown_s=p.scaling_cooldown_s, min_per_role=p.scaling_min_per_role,
    )


def is_drained(inst: Any) -> bool:
    """No request queued, in flight or running on `inst` (its loop is about to sleep)."""
    return inst.queued_requests == 0 and inst.batch_size == 0 and not any(inst.queue_counts())


class Rebalancer:
    def __init__(self, sim: Any, ctx: InstanceContext, block_tokens: int) -> None:
        self.sim = sim
        self.env = sim.env
        self.ctx = ctx
        self.block_tokens = block_tokens
        self.params = scaling_params(sim.cfg)
        self.interval_s = sim.cfg.policy.scaling_interval_s
        self.state = ScalingState()
        self.samples: deque[ScalingSample] = deque()
        self.moving = False
        self.events: list[dict[str, Any]] = []
        self.env.process(self.watch())

    def watch(self) -> Generator[simpy.Event, Any, None]:
        """simpy process: sample and decide every interval (absolute times); stops when the
        run is done or nothing else is scheduled (a stuck simulation)."""
        k = 1
        while not self.sim.done.triggered:
            yield self.env.timeout(k * self.interval_s - now_s(self.sim.events))
            k += 1
            if self.sim.done.triggered or self.env.peek() == float("inf"):
                return
            self._sample()
            if not self.moving:
                decision = propose_move(self.samples, self.state, self.params, now_s(self.sim.events))
                if decision is not None:
                    self.moving = True
                    self.env.process(self.move(decision))

    def _sample(self) -> None:
        now, router = now_s(self.sim.events), self.sim.router
        self.samples.append(ScalingSample(now, tuple(p.view() for p in router.prefill),
                                          tuple(d.view() for d in router.decode)))
        while self.samples and self.samples[0].t_s <= now - self.params.window_s:
            self.samples.popleft()

    def move(self, decision: ScalingDecision) -> Generator[simpy.Event, Any, None]:
        """simpy process: drain the donor, retire it, warm up, start the new instance."""
        router = self.sim.router
        donors = router.prefill if decision.from_role == ROLE_PREFILL else router.decode
        donor = donors[decision.instance_id]
        log.info("scaling: draining %s at %.6f s (%s)", donor.name, now_s(self.sim.events), decision.reason)
        drained = self.env.event()
        donor.start_drain()
        donor.on_idle = lambda: _check_drained(donor, drained)
        if is_drained(donor):
            _check_drained(donor, drained)
        yield drained
        drained_s = now_s(self.sim.events)
        yield self.env.timeout(self.params.warmup_s)
        new = self._start(donor, decision.to_role)
        self.state = self.state.after(replace(decision, ready_s=now_s(self.sim.events)))
        self.moving = False
        self.events.append({
            "time_s": now_s(self.sim.events), "from_role": decision.from_role, "to_role": decision.to_role,
            "donor_id": donor.index, "new_id": new.index, "donor": donor.name, "new": new.name,
            "decided_s": decision.decided_s, "drained_s": drained_s, "reason": decision.reason,
        })
        log.info("scaling: %s (on the GPUs of %s) serves from %.6f s", new.name, donor.name, now_s(self.sim.events))

    def _start(self, donor: Any, role: str) -> Any:
        sim, router = self.sim, self.sim.router
        if role == ROLE_PREFILL:
            new = sim.new_prefill(len(router.prefill), self.ctx, router.prefill[0].latency, self.block_tokens)
            router.prefill.append(new)
        else:
            new = sim.new_decode(len(router.decode), self.ctx, router.decode[0].latency)
            router.decode.append(new)
        new.placement = donor.placement
        sim.topology.placements[new.name] = donor.placement
        sim.instances.append(new)
        sim.sampler.add_instance(new)
        return new


def _check_drained(inst: Any, drained: Any) -> None:
    """on_idle hook of a draining instance: retire it once nothing is left on it."""
    if drained.triggered or not is_drained(inst):
        return
    inst.retire()
    (inst.kv.check_invariants if hasattr(inst, "kv") else inst.pool.check_invariants)(final=True)
    drained.succeed()
