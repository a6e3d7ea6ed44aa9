"""pdsim.sim.events.start: a started process runs as a plain simpy Process does, its resume compiled."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import pytest
import simpy

from pdsim.sim.events import Resume, SimEnvironment, Tick, now_s, start, timeout

Starter = Callable[[SimEnvironment, Generator[Any, Any, Any]], simpy.Process]


def _plain(env: SimEnvironment, generator: Generator[Any, Any, Any]) -> simpy.Process:
    return env.process(generator)


def test_start_gives_the_process_a_resume_that_waits_on_its_ticks() -> None:
    env = SimEnvironment()
    seen: list[Any] = []

    def sleeper() -> Generator[Any, Any, str]:
        seen.append(env.active_process)
        yield timeout(env.events, 2.0)
        seen.append(env.active_process)
        return "done"

    process = start(env, sleeper())
    assert isinstance(process, simpy.Process) and isinstance(process._resume, Resume)
    assert process.target.callbacks == [process._resume]  # (its Initialize: the first step is compiled too)
    env.run(until=1.0)
    target = process.target
    assert isinstance(target, Tick) and target.time_s == 2.0
    assert target.callbacks == [process._resume]  # (the Resume itself: Interruption and rearm remove it)
    assert process.is_alive and env.active_process is None
    env.run()
    assert seen == [process, process] and env.active_process is None
    assert not process.is_alive and process.value == "done" and process.target is None


def test_a_waiter_gets_the_return_value_and_a_failure_as_simpy_gives_them() -> None:
    env = SimEnvironment()
    log: list[tuple[float, str]] = []

    def worker(fail: bool) -> Generator[Any, Any, int]:
        yield timeout(env.events, 3.0)
        if fail:
            raise ValueError("boom at 3")
        return 7

    def waiter() -> Generator[Any, Any, None]:
        value = yield start(env, worker(False))
        log.append((now_s(env.events), f"value {value}"))
        failing = start(env, worker(True))
        try:
            yield failing
        except ValueError as exc:  # simpy's exclusive copy, caused by the process's own exception
            assert exc is not failing.value and exc.__cause__ is failing.value
            log.append((now_s(env.events), f"caught {exc}"))

    start(env, waiter())
    env.run()
    assert log == [(3.0, "value 7"), (6.0, "caught boom at 3")]


def test_an_unwaited_failure_stops_the_run_with_the_processes_exception() -> None:
    env = SimEnvironment()

    def crasher() -> Generator[Any, Any, None]:
        yield timeout(env.events, 1.0)
        raise KeyError("rid 12")

    start(env, crasher())
    with pytest.raises(KeyError, match="rid 12"):
        env.run()
    assert now_s(env.events) == 1.0


def test_an_interrupt_reaches_a_process_sleeping_on_a_tick() -> None:
    env = SimEnvironment()
    log: list[tuple[float, str]] = []

    def sleeper() -> Generator[Any, Any, None]:
        try:
            yield timeout(env.events, 10.0)
            log.append((now_s(env.events), "woke"))
        except simpy.Interrupt as interrupt:
            log.append((now_s(env.events), f"interrupted: {interrupt.cause}"))
            yield timeout(env.events, 1.0)
            log.append((now_s(env.events), "slept again"))

    process = start(env, sleeper())
    Tick(lambda _e: process.interrupt("scale in")).at(env.events, 4.0)
    env.run()
    assert log == [(4.0, "interrupted: scale in"), (5.0, "slept again")]  # (the t=10 Tick resumes nothing)
    assert now_s(env.events) == 10.0


def test_a_fired_event_goes_on_at_once_and_a_non_event_is_simpys_error() -> None:
    env = SimEnvironment()
    log: list[tuple[float, Any]] = []
    fired = env.event().succeed("early")

    def process() -> Generator[Any, Any, None]:
        yield timeout(env.events, 1.0)
        log.append((now_s(env.events), (yield fired)))  # processed by now: no wait
        yield 42

    start(env, process())
    with pytest.raises(RuntimeError, match='Invalid yield value "42"'):
        env.run()
    assert log == [(1.0, "early")]


def _random_world(env: SimEnvironment, begin: Starter, seed: int) -> list[tuple[float, str, Any]]:
    """Processes that sleep on Ticks and simpy timeouts, wait on each other, on all_of/any_of
    (of simpy events: a Tick is no condition's member),
    fail, catch failures and interrupt each other, with many ties; returns the log it fills."""
    rng = np.random.default_rng(seed)
    log: list[tuple[float, str, Any]] = []
    processes: list[simpy.Process] = []

    def worker(index: int, steps: int) -> Generator[Any, Any, int]:  # (waits only on earlier ones)
        name = f"p{index}"
        total = 0
        for step in range(steps):
            kind, delay_s = int(rng.integers(0, 7)), float(rng.integers(0, 4)) * 0.5
            if kind == 6 and rng.random() < 0.25:
                raise ValueError(f"{name} died at step {step}")  # (its waiters catch it)
            try:
                if kind == 0:
                    value = yield timeout(env.events, delay_s)
                elif kind == 1:
                    value = yield env.timeout(delay_s, value=step)
                elif kind == 2:
                    value = yield env.all_of([env.timeout(delay_s), env.timeout(delay_s / 2)])
                    value = len(value.todict())
                elif kind == 3 and index:
                    value = yield processes[int(rng.integers(0, index))]
                elif kind == 4 and processes:
                    other = processes[int(rng.integers(0, len(processes)))]
                    if other.is_alive and other is not env.active_process and other.target is not None:
                        other.interrupt(name)
                    value = yield timeout(env.events, delay_s)
                else:
                    if rng.random() < 0.3:
                        raise ValueError(f"{name} failed at step {step}")
                    value = yield env.any_of([env.timeout(delay_s), env.timeout(delay_s + 0.5)])
                    value = len(value.todict())
            except simpy.Interrupt as interrupt:
                value = f"interrupted by {interrupt.cause}"
            except ValueError as exc:
                value = f"caught {exc}"
            log.append((now_s(env.events), name, value))
            total += step
        return total

    def ended(process: simpy.Process, name: str) -> None:
        log.append((now_s(env.events), name, f"ended: {process.value!r}"))
        process._defused = True  # type: ignore[attr-defined]  # (a death nobody waits on)

    for i in range(12):
        process = begin(env, worker(i, int(rng.integers(3, 15))))
        process.callbacks.append(lambda p, i=i: ended(p, f"p{i}"))
        processes.append(process)
    return log


@pytest.mark.parametrize("seed", range(6))
def test_started_processes_run_exactly_as_simpys_in_a_random_world(seed: int) -> None:
    logs = []
    for begin in (_plain, start):
        env = SimEnvironment()
        log = _random_world(env, begin, seed)
        env.run()
        logs.append((log, next(env._eid)))
    kinds = " ".join(str(entry[2]) for entry in logs[0][0])
    assert len(logs[0][0]) > 20 and "interrupted" in kinds and "died" in kinds
    assert logs[1] == logs[0]
