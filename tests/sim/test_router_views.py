"""Routers whose policies read only health get health-only views: the same decisions, cheaper."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
from test_skip_ahead import SCENARIOS, _run

from pdsim.policy.router import RouterPolicy
from pdsim.sim.router import Router


@pytest.mark.parametrize(("routing", "admission", "health_only"), [
    ("round_robin", "accept_all", True), ("random", "token_bucket", True),
    ("round_robin", "threshold", False), ("least_loaded", "accept_all", False), ("power_of_two", "accept_all", False),
])
def test_reads_load_names_the_policies_that_read_only_health(routing: str, admission: str, health_only: bool) -> None:
    policy = RouterPolicy(routing, admission, None, None, None)  # type: ignore[arg-type]
    assert policy.reads_load is not health_only


@pytest.mark.parametrize(("name", "routing"), [
    ("faults", "round_robin"), ("colocated_crash", "random"), ("crash_no_retry", "round_robin"),
])
def test_health_only_views_route_like_full_views(name: str, routing: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Crashes flip health mid-run: the health-only router must follow them exactly."""
    scenario: dict[str, Any] = {**SCENARIOS[name], "policy": {**SCENARIOS[name].get("policy", {}), "routing": routing}}
    if routing == "random":
        scenario["policy"]["admission"] = "token_bucket"
        scenario["policy"]["token_bucket_rps"] = 6.0
        scenario["policy"]["token_bucket_burst"] = 4
    fast = _run(scenario, True)
    original = Router.__init__

    def full_views(self: Router, *args: Any) -> None:
        original(self, *args)
        assert self.health_only
        self.health_only = False

    monkeypatch.setattr(Router, "__init__", full_views)
    ref = _run(scenario, True)
    pd.testing.assert_frame_equal(fast.trace, ref.trace, check_exact=True)
    pd.testing.assert_frame_equal(fast.timeseries, ref.timeseries, check_exact=True)
    assert (fast.trace.status != "finished").any() and (fast.trace.status == "finished").any()
