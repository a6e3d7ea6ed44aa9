"""The simulated clock: simpy's Environment, with the simulator's own events in a compiled queue.

simpy's `Environment.now` is a Python property: read from compiled code it runs an interpreted
frame, ~870 instructions, and the simulator reads the time ~40 times per request. The
`EventQueue` keeps the time natively (`clock_s`, set with simpy's `_now` each time it takes the
next event), and `now_s(events)` reads it in a few instructions; it is always a float (simpy
starts its clock at the int 0).

`Tick` is the simulator's own timeout and wake-up event. simpy builds a `Timeout` in Python
(`__init__`, then `Environment.schedule`): ~4,800 instructions, ~12 times per request. A Tick is
built in compiled code with the key `env.timeout` / `Event.succeed` would have given it:
(now + delay, NORMAL, the next event id). The environment's id counter (`_eid`, an
`itertools.count` in simpy) is an `EventIds`, which simpy's `schedule` draws from with `next()`
and a Tick natively.

`SimEnvironment` is a simpy Environment (a subclass, as simpy's RealtimeEnvironment is) whose
`step` takes the next event from two queues: simpy's heap of (time, priority, id, event) tuples,
which keeps every simpy event (processes starting and ending, conditions, `env.timeout`), and the
`EventQueue`, a heap of Ticks compared by their native (time, id) fields. Comparing two Ticks
costs a fraction of comparing two simpy tuples, which was ~13% of a request's instructions. The
next event is the smaller key of the two heads, so events are processed in exactly the order of
one simpy heap holding them all, ties included; a popped Tick's callbacks run as simpy's step
runs an event's, and a process that yields a Tick (`Process._resume`, or its compiled copy in
process.py) reads its `callbacks` and `_value` as it reads a Timeout's. Waits that combine events
(`all_of`, `any_of`) keep simpy's own events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeAlias

import simpy
from mypy_extensions import i64, mypyc_attr
from simpy.core import EmptySchedule, Environment, SimTime, StopSimulation

NORMAL: Final = 1  # simpy.events.NORMAL: the priority of timeouts and succeeded events


def now_s(events: EventQueue) -> float:
    """The simulated time now (`env.now`), as the queue set it when it took the current event."""
    return events.clock_s


class Tick:
    """An event of the simulator's queue (see the module's docstring): `Tick(cb).at(events,
    delay_s)` is `env.timeout(delay_s)` with `cb` as its callback; an unscheduled Tick is an
    event that `at(events, 0.0)` later succeeds, as `Event.succeed` does."""

    callbacks: list[Callable[[Any], object]] | None  # (None once processed: simpy's mark)
    _ok: bool
    _value: object
    time_s: float  # its key in the queue, set when scheduled
    event_id: int

    def __init__(self, callback: Callable[[Any], object] | None = None) -> None:
        self.callbacks = [] if callback is None else [callback]
        self._ok = True
        self._value = None
        self.time_s = 0.0
        self.event_id = -1

    def precedes(self, other: Tick) -> bool:
        """This Tick's key (time, NORMAL, id) sorts before `other`'s: simpy's order."""
        return self.time_s < other.time_s or (self.time_s == other.time_s and self.event_id < other.event_id)

    def at(self, events: EventQueue, delay_s: float) -> Tick:
        """Schedule this event `delay_s` from now; returns it (to be yielded by a process)."""
        if delay_s < 0:
            raise ValueError(f"negative delay {delay_s}")
        events.push(events.clock_s + delay_s, events.ids.take(), self)
        return self


class EventIds:
    """simpy's event-id counter (`Environment._eid`, an `itertools.count` there), held natively:
    simpy's `schedule` takes an id with `next()`, a Tick with `take()`, without a Python call."""

    def __init__(self) -> None:
        self.next_id = 0

    def __iter__(self) -> EventIds:
        return self

    def __next__(self) -> object:  # (object: mypyc's iterator slot wants a boxed result)
        return self.take()

    def take(self) -> int:
        """The next id."""
        event_id = self.next_id
        self.next_id += 1
        return event_id


class EventQueue:
    """The Ticks of one SimEnvironment, a binary heap by (time_s, event_id) beside simpy's own
    heap, and the clock. (heapq would compare two Ticks through Python's rich comparison, ~150
    instructions; this heap compares their native fields.)"""

    def __init__(self, env: SimEnvironment) -> None:
        if not isinstance(getattr(env, "_queue", None), list) or not isinstance(getattr(env, "_eid", None), EventIds):
            raise RuntimeError("pdsim's clock needs simpy 4.1's Environment._queue and _eid")
        self.env = env
        self.simpy_heap: list[Any] = env._queue
        ids: Any = env._eid
        self.ids: EventIds = ids
        self.ticks: list[Tick] = []
        self.clock_s = float(env._now)  # env._now, kept natively (set with it in step)

    def push(self, time_s: float, event_id: int, tick: Tick) -> None:
        """Schedule `tick` with the key (time_s, NORMAL, event_id)."""
        tick.time_s = time_s
        tick.event_id = event_id
        ticks = self.ticks
        ticks.append(tick)
        i: i64 = len(ticks) - 1
        while i > 0:  # sift up
            parent: i64 = (i - 1) >> 1
            above = ticks[parent]
            if not tick.precedes(above):
                break
            ticks[i] = above
            i = parent
        ticks[i] = tick

    def _pop(self) -> Tick:
        """Remove and return the first Tick (there is one)."""
        ticks = self.ticks
        first = ticks[0]
        last = ticks.pop()
        n: i64 = len(ticks)
        if n:
            i: i64 = 0
            child: i64 = 1
            while child < n:  # sift `last` down from the root
                below = ticks[child]
                if child + 1 < n:
                    right = ticks[child + 1]
                    if right.precedes(below):
                        below, child = right, child + 1
                if not below.precedes(last):
                    break
                ticks[i] = below
                i = child
                child = 2 * i + 1
            ticks[i] = last
        return first

    def _tick_is_next(self) -> bool:
        """The next event is a Tick: the Ticks' head sorts before simpy's (or simpy's is empty)."""
        heap = self.simpy_heap
        return bool(self.ticks) and (not heap or _before(self.ticks[0], heap[0]))

    def peek_s(self) -> float:
        """The time of the next event, of either queue (inf: none)."""
        if self._tick_is_next():
            return self.ticks[0].time_s
        return float(self.simpy_heap[0][0]) if self.simpy_heap else float("inf")

    def step(self) -> None:
        """Process the next event: a Tick here, else simpy's `Environment.step`."""
        if self._tick_is_next():
            tick = self._pop()
            self.clock_s = tick.time_s
            self.env._now = tick.time_s
            callbacks = tick.callbacks
            assert callbacks is not None, f"a Tick was scheduled twice (time {tick.time_s})"
            tick.callbacks = None
            for callback in callbacks:  # (never simpy's StopSimulation: a Tick is no `until`)
                callback(tick)
            return
        if self.simpy_heap:
            self.clock_s = float(self.simpy_heap[0][0])  # what simpy's step sets env._now to
        Environment.step(self.env)

    def run_until(self, until: simpy.Event) -> None:
        """simpy's `Environment.run(until=event)` with its loop compiled: a native `step` call
        an event, where simpy's interpreted loop looks `self.step` up each time (~1% of a
        run). The same steps, ended the same way: `until`'s StopSimulation callback, or simpy's
        RuntimeError when no event is left and `until` never fired."""
        event: Any = until  # (simpy types `callbacks` as a list; None once processed)
        callbacks = event.callbacks
        if callbacks is None:  # (processed already)
            return
        callbacks.append(StopSimulation.callback)
        try:
            while True:
                self.step()
        except StopSimulation:
            return
        except EmptySchedule:
            raise RuntimeError(
                f'No scheduled events left but "until" event was not triggered: {until}'
            ) from None


def _before(tick: Tick, entry: tuple[Any, ...]) -> bool:
    """`tick`'s key (time_s, NORMAL, event_id) sorts before simpy's queue entry (time, priority,
    id, event)."""
    time_s = float(entry[0])
    if tick.time_s != time_s:
        return tick.time_s < time_s
    priority: int = entry[1]
    if priority != NORMAL:
        return NORMAL < priority
    event_id: int = entry[2]
    return tick.event_id < event_id


@mypyc_attr(native_class=False)
class SimEnvironment(Environment):
    """simpy's Environment whose `step` and `peek` also see the simulator's Ticks (`events`).

    Its `step` is the queue's own compiled method, bound to the instance: simpy's `run` calls
    `self.step()` once per event, and finds it there without another call in between."""

    def __init__(self, initial_time: SimTime = 0) -> None:
        super().__init__(initial_time)
        self._eid = EventIds()  # type: ignore[assignment]  # (before any event takes an id)
        self.events = EventQueue(self)
        self.step = self.events.step  # type: ignore[method-assign]

    def peek(self) -> SimTime:
        return self.events.peek_s()


Wait: TypeAlias = "simpy.Event | Tick"  # what the simulator's processes yield


def timeout(events: EventQueue, delay_s: float) -> Tick:
    """`env.timeout(delay_s)`, for a process to yield."""
    return Tick().at(events, delay_s)
