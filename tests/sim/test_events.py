"""pdsim.sim.events, the simpy adapter: Ticks are simpy timeouts and succeeded events, in the same
order; the adapter's other calls against what simpy itself does (its Process: test_process.py)."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import pytest
import simpy
from simpy.core import EmptySchedule

from pdsim.sim.events import (
    SIMPY_VERSION,
    EventQueue,
    NoEventsLeft,
    SimEnvironment,
    Tick,
    check_simpy_version,
    now_s,
    rearm,
    start,
    timeout,
)


def test_the_environment_is_simpys() -> None:
    assert issubclass(SimEnvironment, simpy.Environment), (
        f"SimEnvironment's bases are {SimEnvironment.__mro__}: the core was compiled without simpy's types "
        "(simpy belongs in pyproject's build-system requires)")


def test_ticks_and_simpy_timeouts_interleave_by_time_then_creation() -> None:
    env = SimEnvironment()
    log: list[tuple[str, float]] = []

    def note(name: str) -> Any:
        return lambda _e: log.append((name, now_s(env.events)))

    Tick(note("tick 2.0")).at(env.events, 2.0)
    env.timeout(1.0).callbacks.append(note("simpy 1.0"))
    Tick(note("tick 1.0")).at(env.events, 1.0)
    env.timeout(2.0).callbacks.append(note("simpy 2.0"))
    env.run()
    assert log == [("simpy 1.0", 1.0), ("tick 1.0", 1.0), ("tick 2.0", 2.0), ("simpy 2.0", 2.0)]


def test_a_tick_takes_the_event_id_simpy_would_have_given() -> None:
    env = SimEnvironment()
    env.timeout(0.5)
    tick = timeout(env.events, 0.25)
    assert (tick.time_s, tick.event_id) == (0.25, 1)  # (now + delay, the second event id)
    assert env.events.scheduled() == 2
    assert env.peek() == 0.25


def test_an_urgent_simpy_event_at_the_same_time_goes_before_earlier_ticks() -> None:
    """A process started at t=1 by a Tick's callback (simpy's Initialize: URGENT, id 2) runs
    before the Tick with id 1 also due at t=1, as in one simpy heap."""
    env = SimEnvironment()
    log: list[str] = []

    def process() -> Generator[Any, Any, None]:
        log.append("process")
        yield from ()

    Tick(lambda _e: (log.append("tick 0"), env.process(process()))).at(env.events, 1.0)
    Tick(lambda _e: log.append("tick 1")).at(env.events, 1.0)
    env.run()
    assert log == ["tick 0", "process", "tick 1"]


def _cascade(env: simpy.Environment, schedule: Callable[[int, float, Callable[[Any], None]], None],
             seed: int, n_events: int) -> list[tuple[int, float]]:
    """Events that schedule 1-2 more each (up to n_events), at delays with many ties; the processing order."""
    rng = np.random.default_rng([seed, 12])
    log: list[tuple[int, float]] = []
    made = [0]

    def fire(label: int) -> Callable[[Any], None]:
        def callback(_e: Any) -> None:
            log.append((label, float(env.now)))
            for _ in range(int(rng.choice((1, 1, 2)))):
                if made[0] < n_events:
                    made[0] += 1
                    schedule(made[0], float(rng.choice((0.0, 0.0, 0.5, 1.0, 1.5))), fire(made[0]))
        return callback

    for _ in range(8):
        made[0] += 1
        schedule(made[0], float(rng.choice((0.0, 1.0, 2.0))), fire(made[0]))
    env.run()
    return log


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ticks_mixed_with_simpy_timeouts_keep_the_order_of_simpy_alone(seed: int) -> None:
    plain = simpy.Environment()

    def simpy_only(_label: int, delay_s: float, callback: Callable[[Any], None]) -> None:
        plain.timeout(delay_s).callbacks.append(callback)

    mixed = SimEnvironment()

    def half_ticks(label: int, delay_s: float, callback: Callable[[Any], None]) -> None:
        if label % 3:
            Tick(callback).at(mixed.events, delay_s)
        else:
            mixed.timeout(delay_s).callbacks.append(callback)

    expected = _cascade(plain, simpy_only, seed, 400)
    assert len(expected) == 400
    assert _cascade(mixed, half_ticks, seed, 400) == expected


def test_a_process_sleeps_on_ticks_and_wakes_on_a_succeeded_one() -> None:
    env = SimEnvironment()
    wake = Tick()
    seen: list[float] = []

    def sleeper() -> Generator[Any, Any, None]:
        yield timeout(env.events, 1.5)
        seen.append(now_s(env.events))
        yield wake
        seen.append(now_s(env.events))

    def waker(_e: Any) -> None:
        wake.at(env.events, 0.0)  # as Event.succeed: processed now, after what is already due now

    start(env, sleeper())
    Tick(waker).at(env.events, 4.0)
    env.run()
    assert seen == [1.5, 4.0]
    assert wake.callbacks is None  # processed: simpy's mark


def test_rearm_moves_a_sleeping_process_to_a_new_tick() -> None:
    env = SimEnvironment()
    seen: list[float] = []

    def sleeper() -> Generator[Any, Any, None]:
        yield timeout(env.events, 10.0)
        seen.append(now_s(env.events))

    process = start(env, sleeper())
    Tick(lambda _e: rearm(process, env.events, 2.0)).at(env.events, 1.0)
    env.run()
    assert seen == [3.0]
    assert now_s(env.events) == 10.0  # the abandoned tick still pops, with no callback left


def test_run_until_a_simpy_event_stops_between_ticks_and_resumes() -> None:
    env = SimEnvironment()
    log: list[float] = []
    for delay_s in (1.0, 2.0, 3.0):
        Tick(lambda _e: log.append(now_s(env.events))).at(env.events, delay_s)
    env.run(until=2.0)  # (simpy's URGENT stop event at 2.0 goes before the Tick due then)
    assert (now_s(env.events), log) == (2.0, [1.0])
    env.run()
    assert log == [1.0, 2.0, 3.0]


def _until_world(env: SimEnvironment, log: list[tuple[str, float]]) -> simpy.Event:
    """Ticks, simpy timeouts and a process, and a simpy event that a Tick succeeds at t=2."""
    done = env.event()

    def note(name: str) -> Callable[[Any], object]:
        return lambda _e: log.append((name, now_s(env.events)))

    def process() -> Generator[Any, Any, None]:
        yield timeout(env.events, 1.5)
        note("process")(None)
        yield env.timeout(1.0)
        note("process, after the stop")(None)

    for delay_s in (1.0, 2.0, 3.0):
        Tick(note(f"tick {delay_s}")).at(env.events, delay_s)
    env.timeout(2.0).callbacks.append(note("simpy 2.0"))
    Tick(lambda _e: done.succeed("stopped")).at(env.events, 2.0)
    env.process(process())
    return done


def test_run_until_is_simpys_run_until_an_event() -> None:
    # the compiled loop takes the same steps and stops on the same event as simpy's run
    runs = []
    for compiled in (False, True):
        env, log = SimEnvironment(), []
        done = _until_world(env, log)
        if compiled:
            env.events.run_until(done)
        else:
            env.run(until=done)
        runs.append((log, now_s(env.events), env.peek()))
    assert runs[0] == runs[1]
    assert runs[1][0] == [("tick 1.0", 1.0), ("process", 1.5), ("tick 2.0", 2.0), ("simpy 2.0", 2.0)]
    assert runs[1][1] == 2.0  # (stopped at the succeeded event; the rest still queued, the same in both)


def test_run_until_an_event_that_never_fires_raises_no_events_left() -> None:
    assert issubclass(NoEventsLeft, RuntimeError)  # (simpy's run raises a RuntimeError there)
    env = SimEnvironment()
    timeout(env.events, 1.0)
    never = env.event()
    with pytest.raises(NoEventsLeft, match='No scheduled events left but "until" event was not triggered'):
        env.events.run_until(never)
    assert now_s(env.events) == 1.0
    processed = env.timeout(0.5)
    env.run()
    env.events.run_until(processed)  # (processed already: returns at once, as simpy's run)
    assert now_s(env.events) == 1.5


def test_peek_and_step_see_both_queues_and_an_empty_one_is_simpys() -> None:
    env = SimEnvironment()
    assert env.peek() == float("inf")
    with pytest.raises(EmptySchedule):
        env.step()
    env.timeout(0.75)
    assert env.peek() == 0.75
    timeout(env.events, 0.5)
    assert env.peek() == 0.5
    env.step()
    assert (now_s(env.events), env.peek()) == (0.5, 0.75)


def test_a_negative_delay_is_refused_with_its_value() -> None:
    with pytest.raises(ValueError, match="negative delay -0.5"):
        timeout(SimEnvironment().events, -0.5)


def test_an_environment_without_simpys_queue_is_refused() -> None:
    bare = SimEnvironment.__new__(SimEnvironment)  # (never initialised: no _queue, no _eid)
    with pytest.raises(RuntimeError, match="simpy 4.1.2.s Environment._queue and _eid"):
        EventQueue(bare)


def test_the_installed_simpy_is_the_pinned_one_and_another_is_refused() -> None:
    assert simpy.__version__ == SIMPY_VERSION == "4.1.2"
    check_simpy_version(simpy.__version__)
    with pytest.raises(ImportError, match=r"^pdsim.sim.events reads simpy 4.1.2's internals; simpy 4.2.0 is installed$"):
        check_simpy_version("4.2.0")


def test_is_active_is_true_only_inside_the_process_itself() -> None:
    env = SimEnvironment()
    seen: list[tuple[str, float, bool]] = []
    processes: list[simpy.Process] = []

    def worker(name: str) -> Generator[Any, Any, None]:
        seen.append((name, now_s(env.events), env.events.is_active(processes[0])))
        yield timeout(env.events, 1.0)
        seen.append((name, now_s(env.events), env.events.is_active(processes[0])))

    processes.append(start(env, worker("a")))
    processes.append(start(env, worker("b")))
    Tick(lambda _e: seen.append(("tick", now_s(env.events), env.events.is_active(processes[0])))).at(env.events, 0.5)
    env.run()
    assert seen == [("a", 0.0, True), ("b", 0.0, False), ("tick", 0.5, False), ("a", 1.0, True), ("b", 1.0, False)]
    assert env.active_process is None and not env.events.is_active(processes[0])


def _counted_world(env: simpy.Environment, wait: Callable[[float], Any],
                   begin: Callable[[Generator[Any, Any, Any]], simpy.Process]) -> list[int]:
    """A timeout, a process that sleeps twice and one that waits on it; pending counts as it runs."""
    def sleeper() -> Generator[Any, Any, int]:
        yield wait(1.0)
        yield wait(0.5)
        return 3

    def waiter(other: simpy.Process) -> Generator[Any, Any, None]:
        yield other

    env.timeout(2.0)
    sleeper_process = begin(sleeper())
    begin(waiter(sleeper_process))
    pending = []
    while env.peek() < float("inf"):
        pending.append(len(env._queue) if type(env) is simpy.Environment else env.events.pending())  # type: ignore[attr-defined]
        env.step()
    return pending


def test_scheduled_and_pending_count_what_plain_simpy_counts() -> None:
    # ids: timeout 0 (t=2); each Initialize 1, 2; the sleeper's waits 3 (t=1), 4 (t=1.5), its
    # end 5 (t=1.5), the waiter's end 6; pending before each step: 0 1 2, 0 2 3, 0 3, 0 4, 0 5, 0 6, 0
    plain = simpy.Environment()
    plain_pending = _counted_world(plain, plain.timeout, plain.process)
    env = SimEnvironment()
    pending = _counted_world(env, lambda delay_s: timeout(env.events, delay_s), lambda gen: start(env, gen))
    assert env.events.scheduled() == next(plain._eid) == 7  # type: ignore[attr-defined]
    assert pending == plain_pending == [3, 3, 2, 2, 2, 2, 1]
    assert env.events.pending() == 0 and now_s(env.events) == 2.0
