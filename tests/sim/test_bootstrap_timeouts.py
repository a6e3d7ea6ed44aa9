"""Bootstrap timeouts (pdsim.sim.deadlines): one deadline queue, outputs of one timer per request.

The comparisons patch the cluster's BootstrapTimeouts with the reference (source_core: where the
core runs compiled they run on its sources, tests/foundation/test_compiled.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
from simkit import make_config, make_requests, rounded, synthetic, timeline

import pdsim.sim.cluster as cluster
from pdsim.sim import simulate
from pdsim.sim.cluster import Simulation
from pdsim.sim.deadlines import BootstrapSide
from pdsim.sim.state import SimRequest
from pdsim.workload.request import Workload, make_workload


class OneTimerPerRequest:
    """The reference: what pdsim did before deadlines.py, one simpy timer per request."""

    def __init__(self, env: Any, timeout_s: float) -> None:
        self.env, self.timeout_s = env, timeout_s

    def add(self, inst: BootstrapSide, sr: SimRequest) -> None:
        attempt = sr.attempt

        def fire(_event: Any) -> None:
            if inst.in_bootstrap(sr, attempt):
                inst.bootstrap_timed_out(sr)

        self.env.timeout(self.timeout_s).callbacks.append(fire)


def test_a_request_stuck_in_bootstrap_fails_at_exactly_entry_plus_timeout() -> None:
    # Decode KV holds 150 tokens: r0 (100 + 40) takes 14 of its 15 pages until it finishes at
    # 0.5931 (0.001 hop, 0.001 handshake, 0.001 TransferInfo, prefill 0.1 + 0.1, transfer
    # 0.0001, 39 decode steps of 0.01). r1 (0.0) cannot pre-allocate before then: it entered
    # bootstrap at 0.001 and fails at 0.001 + 0.5. r2 (0.2) waits too but leaves bootstrap at
    # 0.5941, before its deadline 0.701; r3 (1.0) never waits.
    cfg = make_config(cluster=dict(kv_capacity_tokens=150), faults=dict(bootstrap_timeout_s=0.5))
    res = simulate(cfg, make_requests([(0.0, 100, 40), (0.0, 100, 4), (0.2, 100, 4), (1.0, 50, 4)]))
    t = res.trace
    assert list(t.status) == ["finished", "failed", "finished", "finished"]
    assert t.failure_reason[1] == "bootstrap_timeout after 0.5 s on prefill:0"
    assert t.bootstrap_enter_s[1] == 0.001 and t.finish_s[1] == 0.001 + 0.5  # the very float
    assert timeline(t, 0, ("bootstrap_leave_s", "finish_s")) == rounded([("bootstrap_leave_s", 0.003), ("finish_s", 0.5931)])
    assert timeline(t, 2, ("bootstrap_enter_s", "bootstrap_leave_s", "finish_s")) == rounded([
        ("bootstrap_enter_s", 0.201), ("bootstrap_leave_s", 0.5941), ("finish_s", 0.8242)])
    assert timeline(t, 3, ("bootstrap_enter_s", "bootstrap_leave_s")) == rounded([
        ("bootstrap_enter_s", 1.001), ("bootstrap_leave_s", 1.002)])


def _both(monkeypatch: pytest.MonkeyPatch, cfg: Any, workload: Workload) -> tuple[Any, Any]:
    new = simulate(cfg, workload)
    with monkeypatch.context() as m:
        m.setattr(cluster, "BootstrapTimeouts", OneTimerPerRequest)
        old = simulate(cfg, workload)
    return new, old


def _assert_same(new: Any, old: Any) -> None:
    pd.testing.assert_frame_equal(new.trace, old.trace, check_exact=True)
    pd.testing.assert_frame_equal(new.timeseries, old.timeseries, check_exact=True)
    assert new.instance_stats == old.instance_stats
    assert new.events == old.events  # each entry took the event id its timer took


@pytest.mark.source_core
def test_a_timeout_tied_with_a_bootstrap_exit_keeps_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    # Arrivals every 0.1 s and 1 ms hops: a deadline (entry + 1.0) falls on the very float time
    # at which other requests leave bootstrap. One timer per request ran the timeout first (it
    # was created first); a timer created only when the one before it fired would not.
    n = 100
    wl = make_workload("tenths", np.arange(n, dtype=float) / 10, np.full(n, 200, np.int64), np.full(n, 50, np.int64))
    cfg = make_config(cluster=dict(prefill=2, decode=2), policy=dict(routing="round_robin"),
                      faults=dict(bootstrap_timeout_s=1.0, retry_failed=True, max_retries=2))
    new, old = _both(monkeypatch, cfg, wl)
    _assert_same(new, old)
    t = new.trace
    timed_out = t[t.failure_reason.str.startswith("bootstrap_timeout")]
    assert len(timed_out) == 8
    assert timed_out.finish_s.isin(t.bootstrap_leave_s).sum() >= 1  # the tie is there


@pytest.mark.source_core
@pytest.mark.parametrize("timeout_s", [0.05, 0.3, 2.0])
def test_many_timeouts_with_retries_crash_and_sampling_match_one_timer_per_request(
    monkeypatch: pytest.MonkeyPatch, timeout_s: float
) -> None:
    cfg = make_config(
        cluster=dict(prefill=3, decode=2, kv_capacity_tokens=400), policy=dict(routing="round_robin"),
        faults=dict(bootstrap_timeout_s=timeout_s, retry_failed=True, max_retries=2, crash_instance="decode:0",
                    crash_at_s=1.0, heartbeat_interval_s=0.5, heartbeat_misses=2),
        timeseries_interval_s=0.1,
    )
    new, old = _both(monkeypatch, cfg, synthetic(200, 2, rate_rps=150.0))
    _assert_same(new, old)
    assert new.trace.failure_reason.str.startswith("bootstrap_timeout").sum() > 20


@pytest.mark.source_core
def test_pending_events_stay_few_with_many_requests_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    # 50 req/s with the default 30 s timeout: one timer per request keeps ~1,500 pending. Each
    # request leaves bootstrap within ~70 ms, so the queue's timer fires once over the run.
    cfg = make_config(cluster=dict(prefill=4, decode=4, kv_capacity_tokens=5000), faults=dict(bootstrap_timeout_s=30.0),
                      perf=dict(prefill_base_s=0.01, prefill_per_token_s=0.0001))
    wl = synthetic(1500, 3, rate_rps=50.0)

    def heap_sizes() -> tuple[list[int], Simulation]:
        sim = Simulation(cfg, wl)
        sizes = []
        for t_s in range(5, 35, 5):
            sim.env.run(until=float(t_s))
            sizes.append(sim.events.pending())
        sim.env.run(until=sim.done)
        assert sim.terminal == 1500
        return sizes, sim

    new, sim = heap_sizes()
    with monkeypatch.context() as m:
        m.setattr(cluster, "BootstrapTimeouts", OneTimerPerRequest)
        old, _ = heap_sizes()
    assert max(new) < 40
    assert old[-1] > 1400  # at 30 s: every request so far
    assert sim.prefill[0].timeouts.fired == 1  # events popped over the whole run
