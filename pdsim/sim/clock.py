"""The simulated clock, read and scheduled on the cheap way.

simpy's `Environment.now` is a Python property: read from compiled code it runs an interpreted
frame, ~870 instructions, and the simulator reads it ~50 times per request. `now_s` reads the
attribute behind it (simpy 4.1's `_now`, as `span.rearm` uses its Process internals; pyproject
pins simpy) in ~260. Compiled, the value is always a float (simpy starts its clock at the int 0,
which the compiled return converts); the pure-Python sources return it as simpy holds it.

`Tick` is the simulator's own timeout and wake-up event. simpy builds a `Timeout` in Python
(`__init__`, then `Environment.schedule`): ~4,800 instructions, ~12 times per request. A Tick
is built in compiled code and pushed onto simpy 4.1's event queue (`_queue`, `_eid`) with the
key `env.timeout` / `Event.succeed` would have given it: (now + delay, NORMAL, next event id).
simpy's own loop then processes it like any event: `Environment.step` reads its `callbacks` and
`_ok`, a process that yields it (`Process._resume`) its `callbacks` and `_value`, and
`span.rearm` its `callbacks`. So the order of events, the clock and every result are those of
simpy's timeouts. Waits that combine events (`all_of`, `any_of`) keep simpy's own events.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from heapq import heappush
from typing import Any, Final, TypeAlias

import simpy

NORMAL: Final = 1  # simpy.events.NORMAL: the priority of timeouts and succeeded events


def now_s(env: simpy.Environment) -> float:
    """env.now (a float once compiled)."""
    return env._now


class EventQueue:
    """simpy 4.1's event queue of one Environment (`_queue`, `_eid`), held natively: where
    Ticks go (a Tick reads three attributes of the Environment's instance dict otherwise)."""

    def __init__(self, env: simpy.Environment) -> None:
        if not isinstance(getattr(env, "_queue", None), list) or not hasattr(env, "_eid"):
            raise RuntimeError("pdsim's Ticks need simpy 4.1's Environment._queue and _eid")
        self.env = env
        self.heap: list[Any] = env._queue
        self.ids: Any = env._eid

    def push(self, time_s: float, event_id: int, event: Tick) -> None:
        """Schedule `event` with the key (time_s, NORMAL, event_id)."""
        heappush(self.heap, (time_s, NORMAL, event_id, event))


class Tick:
    """An event of simpy's queue (see the module's docstring): `Tick(cb).at(events, delay_s)` is
    `env.timeout(delay_s)` with `cb` as its callback; an unscheduled Tick is an event that
    `at(events, 0.0)` later succeeds, as `Event.succeed` does."""

    callbacks: list[Callable[[Any], object]] | None  # (None once processed: simpy's mark)
    _ok: bool
    _value: object

    def __init__(self, callback: Callable[[Any], object] | None = None) -> None:
        self.callbacks = [] if callback is None else [callback]
        self._ok = True
        self._value = None

    def at(self, events: EventQueue, delay_s: float) -> Tick:
        """Schedule this event `delay_s` from now; returns it (to be yielded by a process)."""
        if delay_s < 0:
            raise ValueError(f"negative delay {delay_s}")
        heappush(events.heap, (now_s(events.env) + delay_s, NORMAL, next(events.ids), self))
        return self


Wait: TypeAlias = "simpy.Event | Tick"  # what the simulator's processes yield


def timeout(events: EventQueue, delay_s: float) -> Tick:
    """`env.timeout(delay_s)`, for a process to yield."""
    return Tick().at(events, delay_s)


def start(env: simpy.Environment, process: Generator[Wait, Any, Any]) -> simpy.Process:
    """`env.process(process)` for a generator that yields Ticks too (simpy's annotation says
    Events; its loop takes anything with an Event's `callbacks`, `_ok` and `_value`)."""
    return env.process(process)  # type: ignore[arg-type]
