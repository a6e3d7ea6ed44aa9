"""Bootstrap timeouts of every prefill instance: one deadline queue, at most one pending event.

A request that enters a prefill instance's bootstrap queue fails ("bootstrap_timeout ...") if it
is still there faults.bootstrap_timeout_s later. Almost every request leaves within
milliseconds, so one simpy timer per request (what this replaces) kept thousands of useless
timers in simpy's event heap (~9,600 at 320 req/s), making every push and pop deeper.

`BootstrapTimeouts` keeps one entry per request in arrival order and one event in the heap:
the timer of the earliest entry whose request is still in bootstrap. Entries whose request left
(or ended, or was re-attempted) are dropped without ever entering the heap. When requests wait
in bootstrap for long (an overloaded decode side) the earliest live entry often leaves before
its deadline and about one event per request is still popped, as before, but never more than
one is pending.

Every output is what one timer per request gave, because each entry reserves, when it is made,
the heap key its own timer had: simpy orders events by (time, priority, id), a timer gets
time `now + delay` and the next id of the environment's counter. An entry takes that id from
the environment's counter (`events.ids`, events.EventIds, so later events get the ids they had
too) and that time (`now + timeout_s`, the same float addition). Its event is pushed with that
key onto the environment's queue (`env.events`, events.EventQueue) only once the entries before
it are settled: still before anything that sorts after it was popped, so the pop order of
everything is unchanged, ties at the same float time included. (simpy has no public call that
takes an id from its counter: pdsim.sim.events, the simpy adapter, holds it.)

- Same decision: an entry is dead once its request is done, on a later attempt or out of that
  instance's bootstrap queue, and none of these reverts for the same attempt, so dropping it
  early decides what its timer's check would have decided. A live entry is checked when its
  event is popped, exactly when its timer was.
- Same idleness: while the old world still had a timer pending (up to the last entry's key) an
  event stays pending (the earliest live entry's, else the last entry's key), so the
  time-series sampler and the rebalancer, which stop when nothing else is scheduled, and a stuck
  run's end time see what they saw.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

from pdsim.sim.events import SimEnvironment, Tick, now_s
from pdsim.sim.state import SimRequest


class BootstrapSide(Protocol):
    """The prefill instance a request waits at (pdsim.sim.prefill.PrefillInstance)."""

    def in_bootstrap(self, sr: SimRequest, attempt: int) -> bool:
        """`sr`, on this attempt, still waits in this instance's bootstrap queue."""

    def bootstrap_timed_out(self, sr: SimRequest) -> None:
        """Fail `sr`: its bootstrap took longer than the timeout."""


Entry = tuple[float, int, BootstrapSide, SimRequest, int]  # deadline_s, event id, instance, request, attempt


class BootstrapTimeouts:
    """The bootstrap deadlines of every prefill instance of one simulation (timeout_s > 0)."""

    def __init__(self, env: SimEnvironment, timeout_s: float) -> None:
        self.events = env.events
        self.timeout_s = float(timeout_s)
        self.entries: deque[Entry] = deque()
        self.last_deadline_s = 0.0  # the key of the newest entry
        self.last_id = -1
        self.armed_id = -1  # the id of the pending event; -1: none pending
        self.fired = 0  # events popped (tests and benchmarks)

    def add(self, inst: BootstrapSide, sr: SimRequest) -> None:
        """`sr` entered `inst`'s bootstrap queue now."""
        deadline_s = now_s(self.events) + self.timeout_s
        eid = self.events.ids.take()
        self.entries.append((deadline_s, eid, inst, sr, sr.attempt))
        self.last_deadline_s, self.last_id = deadline_s, eid
        if self.armed_id < 0:
            self._push(deadline_s, eid)

    def _fire(self, _event: Tick) -> None:
        self.fired += 1
        entries = self.entries
        if entries and entries[0][1] == self.armed_id:  # else the last entry's key (idleness)
            _, _, inst, sr, attempt = entries.popleft()
            if inst.in_bootstrap(sr, attempt):
                inst.bootstrap_timed_out(sr)
        fired_id, self.armed_id = self.armed_id, -1
        while entries:
            deadline_s, eid, inst, sr, attempt = entries[0]
            if inst.in_bootstrap(sr, attempt):
                self._push(deadline_s, eid)
                return
            entries.popleft()
        if self.last_id > fired_id:
            self._push(self.last_deadline_s, self.last_id)

    def _push(self, deadline_s: float, eid: int) -> None:
        """Schedule the event with the key (deadline_s, NORMAL, eid) that entry's timer had."""
        self.events.push(deadline_s, eid, Tick(self._fire))
        self.armed_id = eid
