"""Router: admission, pair selection by the shared routing policy, dual dispatch.

For each arriving request the router asks `pdsim.policy.route` for a (prefill, decode) pair over
the instances' current views (only instances it believes healthy), draws a random 63-bit
bootstrap_room from its own seeded stream, and sends the request to both halves at once; each
copy arrives after one control-plane hop. In colocated mode only one instance is chosen.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import simpy

from pdsim.config import Config
from pdsim.policy import RequestView, RouterState, route
from pdsim.sim.state import SimHooks, SimRequest

ADMISSION_POLICIES = ("accept_all",)


class Router:
    def __init__(
        self, env: simpy.Environment, cfg: Config, hooks: SimHooks, prefill: Sequence[Any],
        decode: Sequence[Any], route_rng: np.random.Generator, room_rng: np.random.Generator,
    ) -> None:
        if cfg.policy.admission not in ADMISSION_POLICIES:
            raise ValueError(
                f"policy: field 'admission' has unknown value {cfg.policy.admission!r} (choose from {ADMISSION_POLICIES})"
            )
        self.env = env
        self.policy_name = cfg.policy.routing
        self.hooks = hooks
        self.prefill = list(prefill)
        self.decode = list(decode)
        self.state = RouterState()
        self.route_rng = route_rng
        self.room_rng = room_rng
        self.dispatched = 0

    def dispatch(self, sr: SimRequest) -> None:
        """Choose a pair and send the request to both halves (or fail it: no healthy instance)."""
        req = sr.req
        view = RequestView(req.request_id, req.input_tokens, req.output_tokens, arrival_s=req.arrival_s,
                           hash_ids=req.hash_ids)
        decision = route(
            self.policy_name, view, [p.view() for p in self.prefill], [d.view() for d in self.decode],
            self.state, self.route_rng,
        )
        if decision is None:
            self.hooks.abort(sr, "no healthy instance to route to")
            return
        sr.prefill = self.prefill[decision.prefill_id]
        sr.decode = self.decode[decision.decode_id] if self.decode else None
        sr.bootstrap_room = int(self.room_rng.integers(0, 2**63, dtype=np.int64))
        sr.times["route_s"] = self.env.now
        self.dispatched += 1
        sr.prefill.dispatch(sr)
        if sr.decode is not None:
            sr.decode.dispatch(sr)


def arrivals(env: simpy.Environment, requests: Iterator[SimRequest], on_arrival: Any) -> Iterator:
    """simpy process: hand each request to `on_arrival` at its arrival time (absolute times)."""
    for sr in requests:
        delay = sr.req.arrival_s - env.now
        if delay > 0:
            yield env.timeout(delay)
        on_arrival(sr)
