"""Routers whose policies read only health get health-only views: the same decisions, cheaper."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from test_scaling_sim import SCALE, shift_config, shift_workload
from test_skip_ahead import SCENARIOS, _run

from pdsim.policy.admission import AdmissionParams
from pdsim.policy.router_policy import RouterPolicy
from pdsim.sim import SimResult, simulate
from pdsim.sim.router import Router


@pytest.mark.parametrize(("routing", "admission", "health_only"), [
    ("round_robin", "accept_all", True), ("random", "token_bucket", True),
    ("round_robin", "threshold", False), ("least_loaded", "accept_all", False), ("power_of_two", "accept_all", False),
])
def test_reads_load_names_the_policies_that_read_only_health(routing: str, admission: str, health_only: bool) -> None:
    policy = RouterPolicy(routing, admission, AdmissionParams(), np.random.default_rng(0), np.random.default_rng(1))
    assert policy.reads_load is not health_only


def _with_and_without_health_views(run: Callable[[], SimResult], monkeypatch: pytest.MonkeyPatch) -> tuple[SimResult, SimResult]:
    fast = run()
    original = Router.__init__

    def full_views(self: Router, *args: Any) -> None:
        original(self, *args)
        assert self.health_only
        self.health_only = False

    monkeypatch.setattr(Router, "__init__", full_views)
    ref = run()
    pd.testing.assert_frame_equal(fast.trace, ref.trace, check_exact=True)
    pd.testing.assert_frame_equal(fast.timeseries, ref.timeseries, check_exact=True)
    return fast, ref


@pytest.mark.parametrize(("name", "routing"), [
    ("faults", "round_robin"), ("colocated_crash", "random"), ("crash_no_retry", "round_robin"),
])
@pytest.mark.source_core
def test_health_only_views_follow_crashes(name: str, routing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A crash detected mid-run makes an instance unroutable: both routers must see it at once."""
    scenario: dict[str, Any] = {**SCENARIOS[name], "policy": {**SCENARIOS[name].get("policy", {}), "routing": routing}}
    if routing == "random":
        scenario["policy"].update(admission="token_bucket", token_bucket_rps=6.0, token_bucket_burst=4)
    fast, _ = _with_and_without_health_views(lambda: _run(scenario, True), monkeypatch)
    assert (fast.trace.status != "finished").any() and (fast.trace.status == "finished").any()


@pytest.mark.source_core
def test_health_only_views_follow_drains_and_new_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rebalancing drains instances and adds new ones during the run."""
    workload, _ = shift_workload()
    fast, ref = _with_and_without_health_views(lambda: simulate(shift_config(SCALE), workload), monkeypatch)
    assert len(fast.scaling_events) >= 2 and fast.scaling_events == ref.scaling_events
