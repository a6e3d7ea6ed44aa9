"""P:D rebalancing during a run (pdsim/sim/scaling.py): moves, exact timing, determinism."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from simkit import make_config, make_requests

from pdsim.sim import simulate
from pdsim.workload.request import Workload, make_workload

# sample every 1 s, decide over the last 5 s, 2 s warm-up, 5 s cooldown; decode pressure from KV only
SCALE = dict(
    scaling="rebalance", scaling_interval_s=1.0, scaling_window_s=5.0, scaling_min_samples=3,
    scaling_prefill_queue_tokens=2000, scaling_decode_queue_requests=1000, scaling_warmup_s=2.0,
    scaling_cooldown_s=5.0,
)
SHIFT_S = 20.0


def shift_workload(seed: int = 0) -> tuple[Workload, int]:
    """Decode-heavy for 20 s (4 rps, 20 -> 150 tokens), then prefill-heavy until 60 s (2 rps,
    800 -> 2 tokens). Returns the workload and the number of first-phase requests."""
    rng = np.random.default_rng(seed)
    a1 = np.cumsum(rng.exponential(1 / 4.0, 80))
    a1 = a1[a1 < SHIFT_S]
    a2 = SHIFT_S + np.cumsum(rng.exponential(1 / 2.0, 80))
    a2 = a2[a2 < 60.0]
    inputs = np.concatenate([np.full(len(a1), 20), np.full(len(a2), 800)])
    outputs = np.concatenate([np.full(len(a1), 150), np.full(len(a2), 2)])
    return make_workload("shift", np.concatenate([a1, a2]), inputs, outputs), len(a1)


def shift_config(policy: dict | None = None, **top: object):
    cluster = dict(prefill=1, decode=3, kv_capacity_tokens=10000, prealloc_slots=2)
    return make_config(cluster=cluster, policy=policy, **top)


def ttft(trace: pd.DataFrame) -> pd.Series:
    return trace["first_token_s"] - trace["arrival_s"]


def test_rebalancer_moves_decode_to_prefill_after_the_shift() -> None:
    wl, n1 = shift_workload()
    off = simulate(shift_config(), wl)
    on = simulate(shift_config(SCALE), wl)  # simulate checks the invariants (retired instances too)
    assert off.scaling_events == []
    events = on.scaling_events
    assert events and all(e["from_role"] == "decode" and e["to_role"] == "prefill" for e in events)
    assert events[0]["decided_s"] > SHIFT_S
    for e in events:
        assert e["time_s"] == pytest.approx(e["drained_s"] + SCALE["scaling_warmup_s"])
        assert e["decided_s"] <= e["drained_s"]
    for prev, nxt in zip(events, events[1:], strict=False):
        assert nxt["decided_s"] >= prev["time_s"] + SCALE["scaling_cooldown_s"]
    assert (on.trace.status == "finished").all() and len(on.trace) == len(wl)
    # the new prefill instances served, the retired decode ones stopped
    assert on.instance_stats["prefill:1"]["iterations"] > 0
    assert on.instance_stats[events[0]["donor"]]["alive"] is False
    assert ttft(on.trace)[n1:].mean() < 0.5 * ttft(off.trace)[n1:].mean()
    assert ttft(on.trace)[:n1].mean() == pytest.approx(ttft(off.trace)[:n1].mean())


def test_exact_move_time_interval_drain_warmup() -> None:
    """2P1D, decode-heavy at t = 1 s (the first sample): prefill:0 (least loaded, still
    prefilling request 2) drains, its last transfer ends, then warm-up, then decode:1 serves.

    Request 0 decodes from 0.5034 s (prefill 0.003 .. 0.503, 0.4 ms transfer), one 10 ms
    iteration after another. Request 2 arrives at 0.6 s (round robin: prefill:0): dispatch and
    handshake 1 ms each, so decode:0 pre-allocates at its next iteration boundary, 0.6034 s; the
    TransferInfo takes 1 ms, the prefill runs 0.6044 .. 1.3044 s (0.1 + 600 * 0.001) and the
    600 KB transfer 0.6 ms: the drain ends at 1.305 s and decode:1 is ready 0.5 s later, at 1.805 s.
    """
    policy = dict(
        scaling="rebalance", scaling_interval_s=1.0, scaling_window_s=1.0, scaling_min_samples=1,
        scaling_decode_kv_fraction=0.1, scaling_decode_queue_requests=1000, scaling_warmup_s=0.5,
        scaling_cooldown_s=100.0,
    )
    cfg = make_config(cluster=dict(prefill=2, decode=1, kv_capacity_tokens=3000), policy=policy)
    wl = make_requests([(0.0, 400, 500), (0.5, 900, 2), (0.6, 600, 2)])
    result = simulate(cfg, wl)
    [event] = result.scaling_events
    assert (event["from_role"], event["to_role"], event["donor"], event["new"]) == (
        "prefill", "decode", "prefill:0", "decode:1")
    assert (event["donor_id"], event["new_id"]) == (0, 1)
    assert event["decided_s"] == pytest.approx(1.0)
    assert event["drained_s"] == pytest.approx(1.305)
    assert event["time_s"] == pytest.approx(1.805)
    r2 = result.trace.set_index("request_id").loc[2]
    assert r2["transfer_end_s"] == pytest.approx(event["drained_s"])
    assert (result.trace.status == "finished").all()


def test_no_move_before_min_samples() -> None:
    """Same run, but three samples needed: the move is decided at t = 3 s, when prefill:0 is
    already idle (drained at once), and the new instance is ready after the warm-up."""
    policy = dict(
        scaling="rebalance", scaling_interval_s=1.0, scaling_window_s=10.0, scaling_min_samples=3,
        scaling_decode_kv_fraction=0.1, scaling_decode_queue_requests=1000, scaling_warmup_s=0.5,
        scaling_cooldown_s=100.0,
    )
    cfg = make_config(cluster=dict(prefill=2, decode=1, kv_capacity_tokens=3000), policy=policy)
    wl = make_requests([(0.0, 400, 500), (0.5, 900, 2), (0.6, 600, 2)])
    events = simulate(cfg, wl).scaling_events
    assert [(e["decided_s"], e["drained_s"], e["time_s"]) for e in events] == [pytest.approx((3.0, 3.0, 3.5))]


def test_scaling_is_deterministic() -> None:
    wl, _ = shift_workload(seed=3)
    a = simulate(shift_config(SCALE, timeseries_interval_s=1.0), wl)
    b = simulate(shift_config(SCALE, timeseries_interval_s=1.0), wl)
    assert a.scaling_events == b.scaling_events and a.scaling_events
    pd.testing.assert_frame_equal(a.trace, b.trace)
    pd.testing.assert_frame_equal(a.timeseries, b.timeseries)
    # the new instance shows up in the time series from its start on
    new = a.timeseries[a.timeseries.instance == a.scaling_events[0]["new"]]
    assert not new.empty and new.time_s.min() >= a.scaling_events[0]["time_s"]


@pytest.mark.parametrize(("change", "needle"), [
    (dict(cluster=dict(prefill_tp=1, decode_tp=2)), "the same layout on both sides, got prefill TP1, decode TP2"),
    (dict(policy=dict(scaling="elastic")), "policy: field 'scaling'"),
    (dict(cluster=dict(mode="colocated")), "cluster.mode=disaggregated"),
    (dict(policy=dict(scaling="rebalance", scaling_low=2.0)), "low < high"),
])
def test_bad_scaling_config_is_rejected(change: dict, needle: str) -> None:
    policy = {"scaling": "rebalance", **change.get("policy", {})}
    cfg = make_config(cluster=change.get("cluster"), policy=policy)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        simulate(cfg, make_requests([(0.0, 10, 2)]))


def test_scaling_same_with_and_without_skip_ahead() -> None:
    wl, _ = shift_workload(seed=1)
    fast = simulate(shift_config(SCALE), wl)
    step = simulate(shift_config(SCALE, skip_ahead=False), wl)
    assert fast.scaling_events == step.scaling_events and fast.scaling_events
    pd.testing.assert_frame_equal(fast.trace, step.trace)
