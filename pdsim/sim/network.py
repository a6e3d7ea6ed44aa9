"""Flow-level network: links with capacities shared max-min fairly by concurrent flows.

A flow moves `nbytes` over a path of resources (NIC egress/ingress of instances and nodes, or
NVLink ports). Rates are recomputed by progressive filling whenever a flow starts or ends, so
between those moments every flow moves at a constant rate and the next completion time is exact.
Only the flows connected to the changed one through shared resources are refilled: the filling of
one connected group never reads another's, so the rates are those of a filling over all flows
(the same floats), at a cost that does not grow with the number of unrelated transfers.
A flow is delivered `latency_s` after its last byte leaves; its callback runs then. Cancelled
flows (peer crash, aborted request) free their share at once and never call back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pdsim.sim.events import SimEnvironment, Tick, now_s

# A flow is complete when what is left would take less than this at its current rate.
_DONE_EPS_S: Final = 1e-12


@dataclass(slots=True)
class Resource:
    name: str
    capacity_bytes_per_s: float
    order: int = 0  # creation order: the tie-break when two resources offer the same share
    flows: dict[object, Flow] = field(default_factory=dict)  # by Flow.key
    bytes_moved: float = 0.0
    fill_left_bytes_per_s: float = 0.0  # during a filling (fill_rates): capacity not given out
    fill_open_flows: int = -1  # during a filling: flows not yet frozen; -1 outside one


@dataclass(init=False, slots=True, eq=False)
class Flow:
    flow_id: int
    key: Any  # flow_id as the Python int the flow dicts are keyed by (made once, not per use)
    path: tuple[Resource, ...]
    remaining_bytes: float
    latency_s: float
    on_done: Callable[[], None]
    rate_bytes_per_s: float
    active: bool
    fill_frozen: bool  # during a filling (fill_rates): its rate is set

    def __init__(self, flow_id: int, path: tuple[Resource, ...], remaining_bytes: float, latency_s: float,
        on_done: Callable[[], None], rate_bytes_per_s: float = 0.0, active: bool = True) -> None:
        self.flow_id = flow_id
        self.key = flow_id
        self.path = path
        self.remaining_bytes = remaining_bytes
        self.latency_s = latency_s
        self.on_done = on_done
        self.rate_bytes_per_s = rate_bytes_per_s
        self.active = active
        self.fill_frozen = False


class Network:
    """Owns resources and active flows; one pending simpy timeout for the next completion."""

    def __init__(self, env: SimEnvironment) -> None:
        self.events = env.events
        self.resources: dict[str, Resource] = {}
        self.flows: dict[object, Flow] = {}  # by Flow.key
        self._next_flow_id = 0
        self._last_update_s = 0.0
        self._generation = 0

    def add_resource(self, name: str, capacity_bytes_per_s: float) -> Resource:
        if capacity_bytes_per_s <= 0:
            raise ValueError(f"network resource {name}: capacity must be > 0 B/s, got {capacity_bytes_per_s}")
        if name in self.resources:
            raise ValueError(f"network resource {name} defined twice")
        res = Resource(name, capacity_bytes_per_s, len(self.resources))
        self.resources[name] = res
        return res

    def start_flow(
        self, path: tuple[Resource, ...], nbytes: float, latency_s: float, on_done: Callable[[], None]
    ) -> Flow:
        """Start moving `nbytes`; `on_done()` runs when the last byte has arrived."""
        self._advance()
        flow = Flow(self._next_flow_id, path, float(nbytes), latency_s, on_done)
        self._next_flow_id += 1
        if nbytes <= 0 or not path:
            flow.active = False
            self._deliver(flow)
            return flow
        key = flow.key
        self.flows[key] = flow
        for res in path:
            res.flows[key] = flow
        self._reschedule(path, flow)
        return flow

    def cancel(self, flow: Flow) -> None:
        if not flow.active:
            return
        self._advance()
        self._remove(flow)
        flow.on_done = _noop
        self._reschedule(flow.path)

    def utilization(self, res: Resource) -> float:
        if not res.flows:
            return 0.0
        total = 0.0  # (a loop: compiled, no generator object; the additions of sum() on 3.11)
        for f in res.flows.values():
            total += f.rate_bytes_per_s
        return total / res.capacity_bytes_per_s

    def _remove(self, flow: Flow) -> None:
        flow.active = False
        key = flow.key
        del self.flows[key]
        for res in flow.path:
            del res.flows[key]

    def _advance(self) -> None:
        now = now_s(self.events)
        dt = now - self._last_update_s
        if dt > 0:
            for flow in self.flows.values():
                moved = flow.rate_bytes_per_s * dt
                flow.remaining_bytes -= moved
                for res in flow.path:
                    res.bytes_moved += moved
        self._last_update_s = now

    def _reschedule(self, changed: Sequence[Resource], started: Flow | None = None) -> None:
        """Refill the rates of the flows connected to the `changed` resources; re-arm the timer."""
        fill_rates(self._affected(changed, started))
        self._generation += 1
        if not self.flows:
            return
        next_s = math.inf
        for f in self.flows.values():  # (a loop: compiled, no generator object)
            left_s = f.remaining_bytes / f.rate_bytes_per_s
            if left_s < next_s:  # (min keeps the first of equal values; equal floats are equal)
                next_s = left_s
        gen = self._generation
        Tick(lambda _e: self._on_timer(gen)).at(self.events, max(0.0, next_s))

    def _affected(self, changed: Sequence[Resource], started: Flow | None = None) -> dict[object, Flow]:
        """The flows whose rates a change at `changed` (the path of the `started` flow, or of
        flows that ended) can move: every flow when one changed resource carries them all (as a
        shared node NIC often does), none or only the started one when they share no resource
        with another flow, else the connected ones."""
        flows = self.flows
        n = len(flows)
        if n <= 1:
            return flows
        most = 0
        for res in changed:
            k = len(res.flows)
            if k == n:
                return flows
            most = max(most, k)
        if most == 0:
            return {}
        if most == 1 and started is not None:
            return {started.key: started}
        return connected_flows(changed)

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later start/end
        self._advance()
        # A flow is done when what is left takes less than the clock can still resolve at
        # this time (a few float ulps of `now`): otherwise, late in a long run, the next
        # timer could land on the same float time and the clock would never move.
        eps_s = max(_DONE_EPS_S, 4 * math.ulp(now_s(self.events)))
        done = [f for f in self.flows.values() if f.remaining_bytes <= f.rate_bytes_per_s * eps_s]
        for flow in done:
            self._remove(flow)
        self._reschedule([res for flow in done for res in flow.path])
        for flow in done:
            self._deliver(flow)

    def _deliver(self, flow: Flow) -> None:
        if flow.latency_s > 0:
            Tick(lambda _e: flow.on_done()).at(self.events, flow.latency_s)
        else:
            flow.on_done()


def connected_flows(seeds: Iterable[Resource]) -> dict[object, Flow]:
    """The active flows reachable from `seeds` through shared resources (a connected group of
    the flow/resource graph, or several), by flow id."""
    flows: dict[object, Flow] = {}
    reached = {res.order: res for res in seeds}
    stack = list(reached.values())
    while stack:
        for flow_id, flow in stack.pop().flows.items():
            if flow_id not in flows:
                flows[flow_id] = flow
                for res in flow.path:
                    if res.order not in reached:
                        reached[res.order] = res
                        stack.append(res)
    return flows


def fill_rates(flows: dict[object, Flow]) -> None:
    """Max-min fair rates of `flows` (closed under shared resources) by progressive filling;
    ties broken by resource creation order. Only resources carrying a flow take part. (The
    filling's state lives on the resources and flows, `fill_*`, for the length of one call.)"""
    if len(flows) <= 1:  # alone: the path's narrowest link (what the filling gives)
        for flow in flows.values():
            flow.rate_bytes_per_s = _narrowest_bytes_per_s(flow.path)
        return
    busy: list[Resource] = []  # each busy resource once: capacity left, flows not yet frozen
    for flow in flows.values():
        flow.fill_frozen = False
        for res in flow.path:
            if res.fill_open_flows < 0:
                res.fill_open_flows = len(res.flows)
                res.fill_left_bytes_per_s = res.capacity_bytes_per_s
                busy.append(res)
    live = busy
    while live:
        best = live[0]
        share = best.fill_left_bytes_per_s / best.fill_open_flows
        for res in live:  # the smallest share; of equal ones, the first resource created
            offer = res.fill_left_bytes_per_s / res.fill_open_flows
            if offer < share or (offer == share and res.order < best.order):
                best, share = res, offer
        for flow in best.flows.values():
            if not flow.fill_frozen:
                flow.fill_frozen = True
                flow.rate_bytes_per_s = share
                for res in flow.path:
                    res.fill_left_bytes_per_s -= share
                    res.fill_open_flows -= 1
        live = [res for res in live if res.fill_open_flows > 0]
    for res in busy:
        res.fill_open_flows = -1


def _narrowest_bytes_per_s(path: tuple[Resource, ...]) -> float:
    """The smallest capacity on the path (the first of equal ones: min's)."""
    narrowest = path[0].capacity_bytes_per_s
    for res in path:
        if res.capacity_bytes_per_s < narrowest:
            narrowest = res.capacity_bytes_per_s
    return narrowest


def _noop() -> None:
    return None
