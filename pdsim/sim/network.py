"""Flow-level network: links with capacities shared max-min fairly by concurrent flows.

A flow moves `nbytes` over a path of resources (NIC egress/ingress of instances and nodes, or
NVLink ports). Rates are recomputed by progressive filling whenever a flow starts or ends, so
between those moments every flow moves at a constant rate and the next completion time is exact.
A flow is delivered `latency_s` after its last byte leaves; its callback runs then. Cancelled
flows (peer crash, aborted request) free their share at once and never call back.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import simpy

# A flow is complete when what is left would take less than this at its current rate.
_DONE_EPS_S = 1e-12


@dataclass(slots=True)
class Resource:
    name: str
    capacity_bytes_per_s: float
    order: int = 0  # creation order: the tie-break when two resources offer the same share
    flows: dict[int, Flow] = field(default_factory=dict)
    bytes_moved: float = 0.0


@dataclass(slots=True, eq=False)
class Flow:
    flow_id: int
    path: tuple[Resource, ...]
    remaining_bytes: float
    latency_s: float
    on_done: Callable[[], None]
    rate_bytes_per_s: float = 0.0
    active: bool = True


class Network:
    """Owns resources and active flows; one pending simpy timeout for the next completion."""

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.resources: dict[str, Resource] = {}
        self.flows: dict[int, Flow] = {}
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
        self.flows[flow.flow_id] = flow
        for res in path:
            res.flows[flow.flow_id] = flow
        self._reschedule()
        return flow

    def cancel(self, flow: Flow) -> None:
        if not flow.active:
            return
        self._advance()
        self._remove(flow)
        flow.on_done = _noop
        self._reschedule()

    def utilization(self, res: Resource) -> float:
        if not res.flows:
            return 0.0
        return sum(f.rate_bytes_per_s for f in res.flows.values()) / res.capacity_bytes_per_s

    def _remove(self, flow: Flow) -> None:
        flow.active = False
        del self.flows[flow.flow_id]
        for res in flow.path:
            del res.flows[flow.flow_id]

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last_update_s
        if dt > 0:
            for flow in self.flows.values():
                moved = flow.rate_bytes_per_s * dt
                flow.remaining_bytes -= moved
                for res in flow.path:
                    res.bytes_moved += moved
        self._last_update_s = now

    def _reschedule(self) -> None:
        self._fill_rates()
        self._generation += 1
        if not self.flows:
            return
        next_s = min(f.remaining_bytes / f.rate_bytes_per_s for f in self.flows.values())
        gen = self._generation
        event = self.env.timeout(max(0.0, next_s))
        event.callbacks.append(lambda _e: self._on_timer(gen))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # superseded by a later start/end
        self._advance()
        # A flow is done when what is left takes less than the clock can still resolve at
        # this time (a few float ulps of `now`): otherwise, late in a long run, the next
        # timer could land on the same float time and the clock would never move.
        eps_s = max(_DONE_EPS_S, 4 * math.ulp(self.env.now))
        done = [f for f in self.flows.values() if f.remaining_bytes <= f.rate_bytes_per_s * eps_s]
        for flow in done:
            self._remove(flow)
        self._reschedule()
        for flow in done:
            self._deliver(flow)

    def _deliver(self, flow: Flow) -> None:
        if flow.latency_s > 0:
            self.env.timeout(flow.latency_s).callbacks.append(lambda _e: flow.on_done())
        else:
            flow.on_done()

    def _fill_rates(self) -> None:
        """Max-min fair rates by progressive filling; ties broken by resource creation order.
        Only resources carrying a flow take part (the cost does not grow with idle links)."""
        flows = self.flows
        if len(flows) <= 1:  # alone: the path's narrowest link (what the filling gives)
            for flow in flows.values():
                flow.rate_bytes_per_s = min(res.capacity_bytes_per_s for res in flow.path)
            return
        busy = dict(sorted({res.order: res for flow in flows.values() for res in flow.path}.items()))
        cap = {order: res.capacity_bytes_per_s for order, res in busy.items()}
        count = {order: len(res.flows) for order, res in busy.items()}
        frozen: set[int] = set()
        while len(frozen) < len(flows):
            best, share = -1, math.inf
            for order, left in cap.items():  # the first resource offering the smallest share
                n = count[order]
                if n > 0 and left / n < share:
                    best, share = order, left / n
            for flow in busy[best].flows.values():
                if flow.flow_id in frozen:
                    continue
                frozen.add(flow.flow_id)
                flow.rate_bytes_per_s = share
                for res in flow.path:
                    cap[res.order] -= share
                    count[res.order] -= 1


def _noop() -> None:
    return None
