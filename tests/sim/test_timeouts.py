"""pdsim.sim.timeouts.timeout is simpy's env.timeout, entry for entry (it uses simpy's internals)."""

from __future__ import annotations

import pytest
import simpy
from simpy.events import Timeout

from pdsim.sim.timeouts import timeout


def _entries(env: simpy.Environment) -> list[tuple[float, int, int, str, float, object, bool, int]]:
    return [(t, prio, eid, type(ev).__name__, ev._delay, ev._value, ev._ok, len(ev.callbacks))
            for t, prio, eid, ev in sorted(env._queue)]


def test_timeout_schedules_what_env_timeout_schedules() -> None:
    ours, theirs = simpy.Environment(initial_time=1.25), simpy.Environment(initial_time=1.25)
    for delay in (0.0, 0.5, 3.0, 0.5, 1e-9):
        mine = timeout(ours, delay)
        ref = theirs.timeout(delay)
        assert type(mine) is Timeout and mine.env is ours
        assert (mine.triggered, mine.processed, mine.ok, mine.value) == (ref.triggered, ref.processed, ref.ok, ref.value)
    assert _entries(ours) == _entries(theirs)
    assert [e[:3] for e in _entries(ours)] == [(1.25, 1, 0), (1.25 + 1e-9, 1, 4), (1.75, 1, 1), (1.75, 1, 3),
                                              (4.25, 1, 2)]


def test_processes_wake_at_the_same_times_in_the_same_order() -> None:
    def run(make: object) -> list[tuple[float, str]]:
        env, woke = simpy.Environment(), []

        def sleeper(name: str, delays: list[float]):  # type: ignore[no-untyped-def]
            for d in delays:
                yield make(env, d)  # type: ignore[operator]
                woke.append((env.now, name))

        env.process(sleeper("a", [0.1, 0.2, 0.0, 0.3]))
        env.process(sleeper("b", [0.3, 0.0, 0.3]))
        ev = make(env, 0.25)  # type: ignore[operator]
        ev.callbacks.append(lambda _e: woke.append((env.now, "callback")))
        env.run()
        return woke

    got = run(timeout)
    assert got == run(lambda env, d: env.timeout(d))
    assert got == [(0.1, "a"), (0.25, "callback"), (0.3, "b"), (0.3, "b"), (0.30000000000000004, "a"),
                   (0.30000000000000004, "a"), (0.6, "b"), (0.6000000000000001, "a")]


def test_negative_delay_is_refused_as_simpy_refuses_it() -> None:
    with pytest.raises(ValueError, match="Negative delay -0.5"):
        timeout(simpy.Environment(), -0.5)
    with pytest.raises(ValueError, match="Negative delay -0.5"):
        simpy.Environment().timeout(-0.5)
