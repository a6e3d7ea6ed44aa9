"""Bootstrap timeouts of every prefill instance: one deadline queue, at most one simpy timer.

A request that enters a prefill instance's bootstrap queue fails ("bootstrap_timeout ...") if it
is still there faults.bootstrap_timeout_s later. Almost every request leaves within
milliseconds, so one simpy timer per request (what this replaces) kept thousands of useless
timers in simpy's event heap (~9,600 at 320 req/s), making every push and pop deeper.

`BootstrapTimeouts` keeps (deadline_s, instance, request, attempt) entries in arrival order and
one timer, pending for the earliest entry whose request is still in bootstrap; entries whose
request left (or ended, or was re-attempted) are dropped when the timer passes them, without a
timer of their own. The outputs are those of one timer per request:

- Same float time. The constant timeout makes deadlines non-decreasing in queue order. Each is
  `now + timeout_s`, the float simpy computes for `env.timeout(timeout_s)` (`now + delay`), and
  the timer is armed with delay timeout_s when an entry arrives with no timer pending. Re-armed
  at a passed deadline t (t >= timeout_s, since the clock starts at 0) for a deadline
  d <= t + timeout_s <= 2 t, the delay `d - t` is exact (Sterbenz) and so is `t + (d - t) == d`;
  `_arm` checks it anyway.
- Same decision. An entry is dead once its request is done, on a later attempt or out of that
  instance's bootstrap queue, and none of these reverts for the same attempt, so dropping it
  early decides what its own timer's check would have decided at the deadline. Live entries
  are checked at their deadline, as before.
- Same order among the timeouts. Entries of one deadline are handled in queue order (the
  creation order of their timers) in one callback, so what an abort schedules for that time
  runs after all of them, as it did after the last of those timers.
- Same idleness. While some entry's deadline is ahead, a timer is pending (for the earliest
  live entry, else for the last deadline), so the time-series sampler and the rebalancer, which
  stop when nothing else is scheduled, and a stuck run's end time see what they saw.
- Not kept: simpy orders same-time events by creation. A re-armed timer was created at the
  passed deadline, not when its request entered bootstrap, so an event created between those
  two moments for exactly the same float time as the deadline now runs before the abort
  (before: after it). tests/sim/test_bootstrap_timeouts.py compares against one timer per
  request on runs where timeouts fire.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import simpy

from pdsim.sim.state import SimRequest


class BootstrapSide(Protocol):
    """The prefill instance a request waits at (pdsim.sim.prefill.PrefillInstance)."""

    def in_bootstrap(self, sr: SimRequest, attempt: int) -> bool:
        """`sr`, on this attempt, still waits in this instance's bootstrap queue."""

    def bootstrap_timed_out(self, sr: SimRequest) -> None:
        """Fail `sr`: its bootstrap took longer than the timeout."""


class BootstrapTimeouts:
    """The bootstrap deadlines of every prefill instance of one simulation (timeout_s > 0)."""

    def __init__(self, env: simpy.Environment, timeout_s: float) -> None:
        self.env = env
        self.timeout_s = timeout_s
        self.entries: deque[tuple[float, BootstrapSide, SimRequest, int]] = deque()
        self.last_deadline_s = 0.0
        self.armed = False  # a timer is pending (at most one)
        self.fired = 0  # timer callbacks run (for tests and benchmarks)

    def add(self, inst: BootstrapSide, sr: SimRequest) -> None:
        """`sr` entered `inst`'s bootstrap queue now."""
        deadline_s = self.env.now + self.timeout_s
        self.entries.append((deadline_s, inst, sr, sr.attempt))
        self.last_deadline_s = deadline_s
        if not self.armed:
            self.armed = True
            self.env.timeout(self.timeout_s).callbacks.append(self._fire)

    def _fire(self, _event: simpy.Event) -> None:
        self.fired += 1
        now = self.env.now
        entries = self.entries
        while entries:
            deadline_s, inst, sr, attempt = entries[0]
            if not inst.in_bootstrap(sr, attempt):
                entries.popleft()
            elif deadline_s > now:
                self._arm(deadline_s)
                return
            else:
                entries.popleft()
                inst.bootstrap_timed_out(sr)
        if self.last_deadline_s > now:
            self._arm(self.last_deadline_s)
        else:
            self.armed = False

    def _arm(self, deadline_s: float) -> None:
        now = self.env.now
        delay_s = deadline_s - now
        if now + delay_s != deadline_s:  # cannot happen (module docstring): not the old float
            raise RuntimeError(f"bootstrap timer: {now!r} + {delay_s!r} != deadline {deadline_s!r}")
        self.env.timeout(delay_s).callbacks.append(self._fire)
