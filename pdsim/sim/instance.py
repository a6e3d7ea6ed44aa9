"""What every simulated instance shares: identity, health, the wake-up of its scheduler loop.

Each instance runs one simpy process (its scheduler loop, a verb: `run`). The loop sleeps on a
wake event when it has nothing to do; `notify` wakes it. While it is busy with a forward, new work
is picked up at the next iteration boundary, as in SGLang's event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import simpy

from pdsim.config import Config
from pdsim.perf import LatencyModel
from pdsim.sim.state import SimHooks


@dataclass(frozen=True, slots=True)
class InstanceContext:
    """Collaborators an instance needs (one per simulation)."""

    env: simpy.Environment
    cfg: Config
    hooks: SimHooks


class InstanceBase:
    role = "instance"

    def __init__(self, index: int, ctx: InstanceContext, latency: LatencyModel) -> None:
        self.index = index
        self.name = f"{self.role}:{index}"
        self.env = ctx.env
        self.cfg = ctx.cfg
        self.hooks = ctx.hooks
        self.latency = latency
        self.alive = True  # false from the crash on
        self.healthy = True  # the router's belief: false once the crash is detected
        self.queued_requests = 0  # router-side accounting (see InstanceView)
        self.queued_tokens = 0
        self.busy_s = 0.0
        self.iterations = 0
        self.batch_size = 0
        self.placement: Any = None  # topology.Placement, set by the engine
        self._wake: simpy.Event | None = None

    def notify(self) -> None:
        wake = self._wake
        if wake is not None and not wake.triggered:
            wake.succeed()

    def sleep(self) -> simpy.Event:
        self._wake = self.env.event()
        return self._wake

    def crash(self) -> None:
        self.alive = False
        self.batch_size = 0
        self.notify()

    def stats(self) -> dict[str, float]:
        now = self.env.now
        return {
            "role": self.role,
            "busy_s": self.busy_s,
            "utilization": self.busy_s / now if now > 0 else 0.0,
            "iterations": self.iterations,
            "alive": self.alive,
        }
