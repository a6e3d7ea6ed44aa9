"""Fault injection: failed transfers, instance crashes with heartbeat detection.

- faults.transfer_failure_prob: each request's transfer fails with this probability (drawn from
  the `faults.transfer` stream when its last chunk is sent); KVPoll goes Failed when the last
  byte would have arrived.
- faults.crash_instance at faults.crash_at_s (e.g. "decode:0"): the instance stops at once. Writes
  to a crashed decode instance fail at once (the sender sees an error); flows out of a crashed
  prefill instance just stop. Peers and the router notice only when `heartbeat_misses` beats in a
  row are missed: beats are sent every heartbeat_interval_s from t=0, the last one before the
  crash counts, so detection is at floor(crash/interval)*interval + misses*interval. Then every
  request that still depends on the instance fails ("instance_crashed: ...").
- faults.bootstrap_timeout_s: see prefill.py.
Failed requests are recorded with their reason, or re-dispatched when faults.retry_failed (at most
faults.max_retries times per request).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from pdsim.config import FaultConfig
from pdsim.policy.kvpoll import KVPoll
from pdsim.sim.events import now_s

log = logging.getLogger(__name__)


def detection_time_s(crash_s: float, interval_s: float, misses: int) -> float:
    """When peers declare an instance crashed at `crash_s` dead."""
    if interval_s <= 0 or misses < 1:
        raise ValueError(f"faults: heartbeat_interval_s ({interval_s}) must be > 0 and heartbeat_misses ({misses}) >= 1")
    return math.floor(crash_s / interval_s) * interval_s + misses * interval_s


class FaultInjector:
    def __init__(self, cfg: FaultConfig, sim: Any, instances: dict[str, Any]) -> None:
        self.cfg = cfg
        self.sim = sim
        self.target: Any = None  # the instance that crashes
        if cfg.crash_instance:
            if cfg.crash_instance not in instances:
                raise ValueError(
                    f"faults: field 'crash_instance' has unknown value {cfg.crash_instance!r} (choose from {sorted(instances)})"
                )
            if cfg.crash_at_s < 0:
                raise ValueError(f"faults: crash_instance set but crash_at_s is {cfg.crash_at_s}")
            self.target = instances[cfg.crash_instance]
            sim.after(cfg.crash_at_s, self._crash)

    def _crash(self) -> None:
        inst, now = self.target, now_s(self.sim.events)
        log.info("%s crashes at %.6f s", inst.name, now)
        inst.crash()
        for sr in list(self.sim.active.values()):
            if sr.send.flows_pending <= 0 or sr.poll == KVPoll.Success:
                continue
            if sr.decode is inst:
                self.sim.abort(sr, f"transfer_failed: {inst.name} crashed during the transfer", True)
            elif sr.prefill is inst:
                for flow in sr.send.flows:
                    self.sim.network.cancel(flow)
        detect_s = detection_time_s(now, self.cfg.heartbeat_interval_s, self.cfg.heartbeat_misses)
        self.sim.after(detect_s - now, self._detect)

    def _detect(self) -> None:
        inst, now = self.target, now_s(self.sim.events)
        log.info("%s detected dead at %.6f s", inst.name, now)
        inst.healthy = False
        for sr in list(self.sim.active.values()):
            depends = sr.decode is inst or (sr.prefill is inst and sr.poll != KVPoll.Success)
            if depends and not sr.done:
                self.sim.abort(sr, f"instance_crashed: {inst.name} (detected at {now:.6g} s)", True)
