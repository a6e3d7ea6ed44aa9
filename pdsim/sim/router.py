"""Router: admission, pair selection by the shared routing policy, dual dispatch.

For each arriving request the router first asks `pdsim.policy.admit` (first attempt only; a
rejection is recorded with status 'rejected' and the policy's reason), then asks
`pdsim.policy.route` for a (prefill, decode) pair over the instances' current views (only
instances it believes healthy; cache_aware also sees each prefill instance's prefix hit for this
request as its cache summary, kv_centric its per-tier prefix lengths), draws a random 63-bit
bootstrap_room from its own seeded stream, and sends the request to both halves at once; both
copies arrive after one control-plane hop, on one timer. In colocated mode only one instance is
chosen.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from pdsim.config import Config
from pdsim.policy import InstanceView, RequestView, SloPredictor
from pdsim.policy.router_policy import REJECTED, RouterPolicy
from pdsim.sim.events import SimEnvironment, Wait, now_s, timeout
from pdsim.sim.instance import InstanceBase
from pdsim.sim.state import ROUTE_S, SimHooks, SimRequest


class Router:
    def __init__(
        self, env: SimEnvironment, cfg: Config, hooks: SimHooks, prefill: Sequence[InstanceBase],
        decode: Sequence[InstanceBase], route_rng: np.random.Generator, room_rng: np.random.Generator,
    ) -> None:
        self.events = env.events
        self.hooks = hooks
        self.prefill = list(prefill)  # prefill or colocated instances (they have a prompt KV: `.kv`)
        self.decode = list(decode)
        first: Any = self.prefill[0] if self.prefill else None
        cache = first.kv.cache if first is not None else None
        block_tokens = cache.block_tokens if cache is not None else cfg.scenario.prefix.block_tokens
        predictor = SloPredictor(self.prefill[0].latency, (self.decode or self.prefill)[0].latency,
                                 cfg.cluster.max_prefill_tokens, cfg.cluster.max_running_requests)
        self.policy = RouterPolicy.create(cfg.policy, cfg.slo, block_tokens, route_rng, room_rng, predictor)
        self.policy_name = cfg.policy.routing
        self.dispatched = 0
        self.dispatch_delay_s = cfg.cluster.dispatch_delay_s
        self.health_only = not self.policy.reads_load
        self._health_views: dict[str, tuple[tuple[int, int], tuple[InstanceView, ...]]] = {}

    def dispatch(self, sr: SimRequest) -> None:
        """Choose a pair and send the request to both halves (or fail it: no healthy instance)."""
        req = sr.req
        view = RequestView(req.request_id, req.input_tokens, req.output_tokens, arrival_s=req.arrival_s,
                           hash_ids=req.hash_ids)
        prefill: Sequence[InstanceView]
        decode: Sequence[InstanceView]
        if self.health_only:
            prefill, decode = self._health("prefill", self.prefill), self._health("decode", self.decode)
        else:
            prefill, decode = self._prefill_views(sr), [d.view() for d in self.decode]
        decision = self.policy.decide(view, prefill, decode, now_s(self.events), first_attempt=sr.attempt == 0)
        if not decision.routed:
            if decision.outcome == REJECTED:
                self.hooks.reject(sr, decision.reason)
            else:
                self.hooks.abort(sr, decision.reason)
            return
        prefill_inst = self.prefill[decision.prefill_id]
        decode_inst = self.decode[decision.decode_id] if self.decode else None
        sr.prefill, sr.decode = prefill_inst, decode_inst
        sr.bootstrap_room = decision.bootstrap_room
        sr.set_time(ROUTE_S, now_s(self.events))
        self.dispatched += 1
        prefill_inst.dispatch(sr)
        if decode_inst is not None:
            decode_inst.dispatch(sr)
        self.hooks.after(self.dispatch_delay_s, _arrive, prefill_inst, decode_inst, sr, sr.attempt)

    def _health(self, side: str, instances: Sequence[InstanceBase]) -> tuple[InstanceView, ...]:
        """Health-only views of one side, rebuilt only when an instance's routability changed
        (SimHooks.health_changed) or scaling added one: the same tuple object meanwhile, on which
        the routing policy caches its sorted healthy list. O(1) per request."""
        key = (self.hooks.health_epoch, len(instances))
        cached = self._health_views.get(side)
        if cached is not None and cached[0] == key:
            return cached[1]
        views = tuple(inst.health_view() for inst in instances)
        self._health_views[side] = (key, views)
        return views

    def _prefill_views(self, sr: SimRequest) -> list[InstanceView]:
        views = [p.view() for p in self.prefill]
        prompt_sides: list[Any] = self.prefill  # (their prompt KV: `.kv`, `peek_match`)
        if self.policy_name == "kv_centric":
            return [replace(v, tier_hit_tokens=p.kv.tier_prefix(sr)) for v, p in zip(views, prompt_sides, strict=True)]
        if self.policy_name != "cache_aware":
            return views
        return [replace(v, cached_blocks=frozenset(sr.req.hash_ids[:len(p.peek_match(sr))]))
                for v, p in zip(views, prompt_sides, strict=True)]


def _arrive(prefill: InstanceBase, decode: InstanceBase | None, sr: SimRequest, attempt: int) -> None:
    """Both copies of a dispatched request reach their instances, prefill's first: what two
    same-time timers created back to back did, since nothing the prefill copy's arrival schedules
    can run between them (only an abort could schedule an urgent event, and then the decode
    copy's arrival does nothing)."""
    prefill.arrive(sr, attempt)
    if decode is not None:
        decode.arrive(sr, attempt)


def arrivals(env: SimEnvironment, requests: Iterator[SimRequest], on_arrival: Any) -> Generator[Wait, Any, None]:
    """simpy process: hand each request to `on_arrival` at its arrival time (absolute times)."""
    events = env.events
    for sr in requests:
        delay = sr.req.arrival_s - now_s(events)
        if delay > 0:
            yield timeout(events, delay)
        on_arrival(sr)
