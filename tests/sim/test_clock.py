"""pdsim.sim.clock: Ticks are simpy timeouts and succeeded events, in the same order."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy

from pdsim.sim.clock import EventQueue, Tick, now_s, start, timeout
from pdsim.sim.span import rearm


def test_ticks_and_simpy_timeouts_interleave_by_time_then_creation() -> None:
    env = simpy.Environment()
    events = EventQueue(env)
    log: list[tuple[str, float]] = []

    def note(name: str) -> Any:
        return lambda _e: log.append((name, now_s(env)))

    Tick(note("tick 2.0")).at(events, 2.0)
    env.timeout(1.0).callbacks.append(note("simpy 1.0"))
    Tick(note("tick 1.0")).at(events, 1.0)
    env.timeout(2.0).callbacks.append(note("simpy 2.0"))
    env.run()
    assert log == [("simpy 1.0", 1.0), ("tick 1.0", 1.0), ("tick 2.0", 2.0), ("simpy 2.0", 2.0)]


def test_a_tick_takes_the_event_id_simpy_would_have_given() -> None:
    env = simpy.Environment()
    env.timeout(0.5)
    tick = timeout(EventQueue(env), 0.25)
    key = next(entry for entry in env._queue if entry[3] is tick)
    assert key[:3] == (0.25, 1, 1)  # (now + delay, NORMAL, the second event id)
    assert next(env._eid) == 2


def test_a_process_sleeps_on_ticks_and_wakes_on_a_succeeded_one() -> None:
    env = simpy.Environment()
    events = EventQueue(env)
    wake = Tick()
    seen: list[float] = []

    def sleeper() -> Generator[Any, Any, None]:
        yield timeout(events, 1.5)
        seen.append(now_s(env))
        yield wake
        seen.append(now_s(env))

    def waker(_e: Any) -> None:
        wake.at(events, 0.0)  # as Event.succeed: processed now, after what is already due now

    start(env, sleeper())
    Tick(waker).at(events, 4.0)
    env.run()
    assert seen == [1.5, 4.0]
    assert wake.callbacks is None  # processed: simpy's mark


def test_rearm_moves_a_sleeping_process_to_a_new_tick() -> None:
    env = simpy.Environment()
    events = EventQueue(env)
    seen: list[float] = []

    def sleeper() -> Generator[Any, Any, None]:
        yield timeout(events, 10.0)
        seen.append(now_s(env))

    process = start(env, sleeper())
    Tick(lambda _e: rearm(process, events, 2.0)).at(events, 1.0)
    env.run()
    assert seen == [3.0]
    assert now_s(env) == 10.0  # the abandoned tick still pops, with no callback left


def test_a_negative_delay_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match="negative delay -0.5"):
        timeout(EventQueue(simpy.Environment()), -0.5)


def test_an_environment_without_simpys_queue_is_refused() -> None:
    class Bare:
        _now = 0.0

    with pytest.raises(RuntimeError, match="simpy 4.1's Environment._queue and _eid"):
        EventQueue(Bare())  # type: ignore[arg-type]
