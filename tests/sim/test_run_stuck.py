"""pdsim.sim.run tells a stuck simulation apart by the adapter's exception type, not its message."""

from __future__ import annotations

from typing import Any

import pytest
import simpy
from simkit import make_config, make_requests

from pdsim.sim.cluster import Simulation
from pdsim.sim.run import SimulationStuck, _run


class NeverDone(simpy.Event):
    """A `done` event that ignores `succeed`: the run ends with no event left and `done` unfired."""

    def succeed(self, value: Any = None) -> NeverDone:
        return self


def test_no_event_left_before_done_is_a_stuck_simulation() -> None:
    sim = Simulation(make_config(), make_requests([(0.0, 100, 4), (0.5, 100, 4)]))
    sim.done = NeverDone(sim.env)
    with pytest.raises(SimulationStuck, match=r"stuck at t=[0-9.]+ s: 0 of 2 requests never reached a terminal"):
        _run(sim)


def test_another_runtime_error_is_not_taken_for_a_stuck_run() -> None:
    """A RuntimeError whose message says "until" (what run.py used to search for) passes through."""
    sim = Simulation(make_config(), make_requests([(0.0, 100, 4)]))

    def fail(_event: Any) -> None:
        raise RuntimeError('the "until" word in a bug of a callback')

    sim.env.timeout(0.0).callbacks.append(fail)
    with pytest.raises(RuntimeError, match="bug of a callback"):
        _run(sim)
