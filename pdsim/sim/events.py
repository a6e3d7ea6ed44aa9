"""The simulator's events on simpy: the one module that uses simpy's internals (simpy 4.1.2).

Everything else in pdsim, pdreal and analysis talks to simpy through its public API and the names
below (tests/sim/test_simpy_private.py fails on any other module reading a simpy internal). The
internals used here, all simpy 4.1.2's, checked when this module is imported:
`Environment._queue` (its heap of (time, priority, id, event) tuples), `_eid` (its id counter),
`_now`, `_active_proc`; `Process._generator`, `_resume`, `_target`; `Event._ok`, `_value`,
`_defused`; `StopSimulation.callback`; `EmptySchedule`; an unbound `Environment.step`.

Why: the simulator schedules ~40 events a request, and simpy builds and orders them in
interpreted code. Here, compiled:
- `Tick`, the simulator's timeout and wake-up event, takes the key `env.timeout` / `succeed`
  would give it, (now + delay, NORMAL, next id), in a heap of its own (`EventQueue`) compared by
  native fields; `SimEnvironment.step` takes the smaller head of that heap and simpy's, so
  events run in exactly the order of one simpy heap holding them all, ties included.
- The time is kept natively (`now_s(events)`; simpy's `now` is a Python property, ~870
  instructions) and always a float (simpy's clock starts at the int 0).
- `start(env, generator)` is `env.process`, its resume loop (simpy's `Process._resume`) compiled
  as `Resume`; `rearm` moves a sleeping process to a later Tick (what `interrupt` leads to);
  `run_until` is `env.run(until=event)` with its loop compiled, and raises `NoEventsLeft`.
Waits that combine events (`all_of`, `any_of`) stay simpy's own events.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, Final, TypeAlias

import simpy
from mypy_extensions import i64, mypyc_attr
from simpy.core import EmptySchedule, Environment, SimTime, StopSimulation

SIMPY_VERSION: Final = "4.1.2"  # the simpy whose internals this module reads (pinned in pyproject)
NORMAL: Final = 1  # simpy.events.NORMAL: the priority of timeouts and succeeded events


def check_simpy_version(installed: str) -> None:
    """Refuse any simpy but the one whose internals this module was written against."""
    if installed != SIMPY_VERSION:
        raise ImportError(f"pdsim.sim.events reads simpy {SIMPY_VERSION}'s internals; simpy {installed} is installed")


check_simpy_version(str(getattr(simpy, "__version__", "of unknown version")))


@mypyc_attr(native_class=False)
class NoEventsLeft(RuntimeError):
    """`run_until`'s event never fired and no event is left to process (simpy's RuntimeError)."""


def now_s(events: EventQueue) -> float:
    """The simulated time now (`env.now`), as the queue set it when it took the current event."""
    return events.clock_s


class Tick:
    """An event of the simulator's queue: `Tick(cb).at(events, delay_s)` is `env.timeout(delay_s)`
    with `cb` as its callback; an unscheduled Tick is an event that `at(events, 0.0)` later
    succeeds, as `Event.succeed` does. simpy reads its `callbacks`, `_ok` and `_value` as a
    Timeout's (a plain simpy Process may yield it)."""

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
        """The next id (an event scheduled later sorts after this one at the same time)."""
        event_id = self.next_id
        self.next_id += 1
        return event_id


class EventQueue:
    """The Ticks of one SimEnvironment, a binary heap by (time_s, event_id) beside simpy's own
    heap, and the clock. (heapq would compare two Ticks through Python's rich comparison, ~150
    instructions; this heap compares their native fields.)"""

    def __init__(self, env: SimEnvironment) -> None:
        if not isinstance(getattr(env, "_queue", None), list) or not isinstance(getattr(env, "_eid", None), EventIds):
            raise RuntimeError(f"pdsim.sim.events needs simpy {SIMPY_VERSION}'s Environment._queue and _eid")
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

    def pending(self) -> int:
        """Events scheduled and not yet processed, in both queues."""
        return len(self.ticks) + len(self.simpy_heap)

    def scheduled(self) -> int:
        """Events scheduled so far, Ticks and simpy's (the id the next one will get)."""
        return self.ids.next_id

    def is_active(self, process: simpy.Process) -> bool:
        """`process` is the one running now (`env.active_process`, without its Python frame)."""
        return self.env._active_proc is process

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
        """simpy's `Environment.run(until=event)` with its loop compiled (simpy's interpreted
        loop looks `self.step` up each event, ~1% of a run). The same steps, ended the same way:
        `until`'s StopSimulation callback, or `NoEventsLeft` (simpy's RuntimeError) when no
        event is left and `until` never fired."""
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
            raise NoEventsLeft(
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


class Resume:
    """`Process._resume` of one process, compiled: called with the event the process waited on,
    it runs the generator up to its next wait. simpy 4.1.2's loop step for step
    (tests/sim/test_process.py compares random worlds of processes started both ways): send the
    event's value (throw a copy of a failed event's exception), register on the next event, and
    when the generator ends succeed or fail the process. One difference, invisible to the
    simulation: simpy cuts its own frame out of a failed process's traceback; this adds none."""

    def __init__(self, process: simpy.Process) -> None:
        self.process = process
        self.env: Any = process.env
        self.generator: Any = process._generator

    def __call__(self, event: Any) -> None:
        env, process, generator = self.env, self.process, self.generator
        env._active_proc = process
        while True:
            try:
                if isinstance(event, Tick):  # (a Tick never fails)
                    tick: Tick = event
                    value = tick._value  # (send(None) is next(): the generator's own slot, no method lookup)
                    event = next(generator) if value is None else generator.send(value)
                elif event._ok:
                    event = generator.send(event._value)
                else:
                    event = generator.throw(_failure(event))
            except StopIteration as stop:
                event = None
                process._ok = True
                process._value = stop.args[0] if len(stop.args) else None
                env.schedule(process)
                break
            except BaseException as exc:  # noqa: BLE001 (simpy's: the process fails with it)
                event = None
                process._ok = False
                process._value = exc
                env.schedule(process)
                break
            if _wait_on(event, self):
                break
        process._target = event
        env._active_proc = None


def _failure(event: Any) -> BaseException:
    """The exception to throw into a process whose event failed: simpy's exclusive copy, caused
    by the event's own (the event is defused: its failure is handled)."""
    event._defused = True
    failure: Any = event._value
    exc: BaseException = type(failure)(*failure.args)
    exc.__cause__ = failure
    return exc


def _wait_on(event: Any, resume: Resume) -> bool:
    """Register `resume` on the event a process yielded; False when it has fired already (the
    loop goes on with its value). A yield that is no event is simpy's RuntimeError."""
    if isinstance(event, Tick):
        tick: Tick = event
        callbacks = tick.callbacks
    else:
        try:
            callbacks = event.callbacks
        except AttributeError:
            raise RuntimeError(f'Invalid yield value "{event}"') from None
    if callbacks is None:
        return False
    callbacks.append(resume)
    return True


def start(env: simpy.Environment, generator: Generator[Wait, Any, Any]) -> simpy.Process:
    """`env.process(generator)` for a generator that yields Ticks too, resumed by a `Resume`.
    The process is a plain `simpy.Process` (`target`, `is_alive`, `interrupt` work); its first
    step is simpy's `Initialize`, whose callback becomes the Resume too."""
    process = env.process(generator)  # type: ignore[arg-type]  # (simpy's annotation says Events)
    resume: Any = Resume(process)
    process._resume = resume  # type: ignore[method-assign]
    process._target.callbacks = [resume]  # (its Initialize's: simpy's resume, bound before)
    return process


def rearm(process: simpy.Process, events: EventQueue, delay_s: float) -> None:
    """Wake `process`, which sleeps on a timeout, after delay_s instead: a new Tick takes over
    its callback. This is what `process.interrupt()` leads to (the sleeper catches the Interrupt
    and yields a new timeout) without the Interruption event and the exception."""
    resume = process._resume
    process._target.callbacks.remove(resume)
    wake: Any = Tick(resume).at(events, delay_s)
    process._target = wake
