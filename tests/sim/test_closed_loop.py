"""Closed-loop load in the simulator: C clients, each sending its next request when its previous
one ends (pdsim.workload.closed_loop). Constants of the tiny cluster: tests/sim/simkit.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from simkit import make_config, make_requests, rounded, synthetic, timeline

from pdsim.config import Config
from pdsim.metrics import Slo, summarize
from pdsim.policy.route_choice import routing_policy_names
from pdsim.sim import simulate
from pdsim.workload.closed_loop import closed_loop_of
from pdsim.workload.errors import WorkloadError

FIELDS = ("arrival_s", "route_s", "bootstrap_leave_s", "prefill_end_s", "transfer_end_s", "first_token_s",
          "finish_s")


def closed(cfg: Config, concurrency: int, **fields: Any) -> Config:
    return replace(cfg, scenario=replace(cfg.scenario, concurrency=concurrency, **fields))


def in_flight_max(trace: Any) -> int:
    """The most requests between their send and their end at any moment (ends before sends at
    equal times: a client's next request leaves when its previous one has ended)."""
    events = sorted([(t, -1) for t in trace.finish_s] + [(t, 1) for t in trace.arrival_s])
    return int(np.max(np.cumsum([step for _, step in events])))


def test_two_clients_hand_computed_timeline() -> None:
    # C=2, four requests of (100 in, 4 out), think 0.5 s. Wave 1 at t=0: both prefilled in one
    # batch (0.1 + 0.2 s from 0.003), 100 kB each over one 1e9 B/s NIC shared (0.2 ms), three
    # 10 ms iterations: both end at 0.3332. Each client thinks 0.5 s and sends at 0.8332; the
    # second wave's bootstrap takes 2 hops, not 3 (the decode side has met this prefill server).
    cfg = closed(make_config(), 2, client_think_s=0.5)
    res = simulate(cfg, make_requests([(0.0, 100, 4)] * 4))
    for rid in (0, 1):
        assert timeline(res.trace, rid, FIELDS) == rounded([
            ("arrival_s", 0.0), ("route_s", 0.0), ("bootstrap_leave_s", 0.003), ("prefill_end_s", 0.303),
            ("transfer_end_s", 0.3032), ("first_token_s", 0.3032), ("finish_s", 0.3332)])
    for rid in (2, 3):
        assert timeline(res.trace, rid, FIELDS) == rounded([
            ("arrival_s", 0.8332), ("route_s", 0.8332), ("bootstrap_leave_s", 0.8352), ("prefill_end_s", 1.1352),
            ("transfer_end_s", 1.1354), ("first_token_s", 1.1354), ("finish_s", 1.1654)])


def test_a_ramp_spreads_the_first_wave() -> None:
    # C=2, ramp 0.4 s: client 0 sends at 0, client 1 at 0.2 (i * ramp / C). Alone, a request
    # takes 0.2331 s (prefill 0.2 s from 0.003, transfer, three 10 ms steps); the second one's
    # prefill (from 0.203) runs while the first decodes on the other side, so it is alone too.
    cfg = closed(make_config(), 2, client_ramp_s=0.4)
    trace = simulate(cfg, make_requests([(0.0, 100, 4)] * 2)).trace.sort_values("arrival_s")
    assert list(trace.arrival_s.round(9)) == [0.0, 0.2]
    assert [round(e - a, 9) for a, e in zip(trace.arrival_s, trace.finish_s, strict=True)] == [0.2331, 0.2331]


def test_a_trace_keeps_its_order_and_lengths_not_its_times() -> None:
    rows = [(0.0, 100, 4), (5.0, 30, 2), (9.0, 50, 3)]
    res = simulate(closed(make_config(), 1), make_requests(rows))
    trace = res.trace.sort_values("request_id")
    assert list(trace.input_tokens) == [100, 30, 50] and list(trace.output_tokens) == [4, 2, 3]
    ends = trace.finish_s.to_numpy()
    assert list(trace.arrival_s) == [0.0, ends[0], ends[1]]  # one client: each sent when the last ended


def test_next_request_leaves_when_the_client_has_the_response() -> None:
    # the client sees the end token_delivery_s after the instance made it (the trace's finish_s)
    cfg = closed(make_config(dict(token_delivery_s=0.002)), 1, client_think_s=0.25)
    trace = simulate(cfg, make_requests([(0.0, 100, 4)] * 2)).trace.sort_values("request_id")
    assert trace.finish_s.iloc[0] == pytest.approx(0.2331 + 0.002)
    assert trace.arrival_s.iloc[1] == pytest.approx(trace.finish_s.iloc[0] + 0.25)


def test_duration_stops_sending_and_accounts_for_what_was_sent() -> None:
    # wave 1 ends at 0.3332 (< 0.5: both clients send again), wave 2 at 0.3332 + 0.3322 (>= 0.5: stop)
    cfg = closed(make_config(), 2, duration_s=0.5)
    res = simulate(cfg, make_requests([(0.0, 100, 4)] * 10))
    assert len(res.trace) == 4 and set(res.trace.status) == {"finished"}
    assert sorted(res.trace.arrival_s.round(9)) == [0.0, 0.0, 0.3332, 0.3332]
    assert res.trace.finish_s.max() == pytest.approx(0.6654)


def test_warmup_barrier_holds_the_clients_until_every_warmup_request_ended() -> None:
    # C=2, W=3, five requests of (100 in, 4 out). Wave 1 (r0, r1) ends at 0.3332; client A sends
    # r2 then, client B finds the 3 warm-up requests sent and waits. r2 runs alone (0.2321: its
    # bootstrap takes 2 hops) to 0.5653; then both clients send r3 and r4 at once (AIPerf's
    # profiling phase), which end together at 0.5653 + 0.3322. Without the barrier client B
    # sends r3 at 0.3332 and r4 follows r2.
    rows = [(0.0, 100, 4)] * 5
    trace = simulate(closed(make_config(), 2, warmup_requests=3, warmup_barrier=True), make_requests(rows)).trace
    trace = trace.sort_values("request_id")
    assert list(trace.arrival_s.round(9)) == [0.0, 0.0, 0.3332, 0.5653, 0.5653]
    assert list(trace.finish_s.round(9)) == [0.3332, 0.3332, 0.5653, 0.8975, 0.8975]
    free = simulate(closed(make_config(), 2, warmup_requests=3), make_requests(rows)).trace.sort_values("request_id")
    assert list(free.arrival_s.round(9)) == [0.0, 0.0, 0.3332, 0.3332, 0.6654]
    loop = summarize(trace, Slo(1.0, 0.1), loop=closed_loop_of(closed(make_config(), 2, warmup_requests=3,
                                                                        warmup_barrier=True).scenario))
    # the whole profiling phase counts: r3 and r4, from their send to their end
    window = loop["closed_loop"]
    assert window["counted_requests"] == 2
    assert (window["window_start_s"], window["window_end_s"]) == pytest.approx((0.5653, 0.8975))


@pytest.mark.parametrize("mode", ["disaggregated", "colocated_mixed", "colocated_prefill_priority"])
@pytest.mark.parametrize("routing", ["round_robin", "least_loaded", "cache_aware", "kv_centric"])
def test_in_flight_never_exceeds_concurrency(mode: str, routing: str) -> None:
    assert routing in routing_policy_names()
    cluster: dict[str, Any] = dict(prefill=2, decode=2, colocated=2, prefix_cache=True, kv_capacity_tokens=4000,
                                   page_size_tokens=16)
    if mode != "disaggregated":
        cluster.update(mode="colocated", colocated_schedule=mode.removeprefix("colocated_"))
    cfg = closed(make_config(cluster, policy=dict(routing=routing)), 5)
    res = simulate(cfg, synthetic(150, seed=3))
    trace = res.trace
    assert len(trace) == 150 and set(trace.status) == {"finished"}
    assert in_flight_max(trace) == 5
    # every send after the first wave happens at some request's end (no think time)
    later = np.sort(trace.arrival_s.to_numpy())[5:]
    assert np.isin(later, trace.finish_s.to_numpy()).all()
    if routing == "cache_aware":
        assert trace.cached_prefix_tokens.sum() > 0  # the prefix cache works under the loop


def test_warmup_barrier_keeps_concurrency_on_a_larger_run() -> None:
    # 150 requests of random lengths, C=5, W=12: never more than 5 in flight (no client sends
    # twice across the barrier), and the profiling phase's 5 first sends leave together when
    # the last warm-up request has ended
    cfg = closed(make_config(dict(prefill=2, decode=2, kv_capacity_tokens=4000)), 5, warmup_requests=12,
                 warmup_barrier=True)
    trace = simulate(cfg, synthetic(150, seed=3)).trace
    assert len(trace) == 150 and set(trace.status) == {"finished"}
    assert in_flight_max(trace) == 5
    order = trace.sort_values("arrival_s")
    sends, ends = order.arrival_s.to_numpy(), order.finish_s.to_numpy()
    assert (sends[12:17] == ends[:12].max()).all() and sends[17] > sends[16]


def test_littles_law_over_the_steady_state() -> None:
    think_s, c = 0.05, 6
    cfg = closed(make_config(dict(prefill=2, decode=2, kv_capacity_tokens=4000)), c, client_think_s=think_s)
    trace = simulate(cfg, synthetic(1500, seed=7)).trace
    summary = summarize(trace, Slo(1.0, 0.1), loop=closed_loop_of(cfg.scenario), gpus=4)
    loop = summary["closed_loop"]
    assert loop["steady_state_reached"] and loop["counted_requests"] > 1300
    little_rps = c / (summary["e2e_s"]["mean"] + think_s)
    assert summary["throughput_rps"] == pytest.approx(little_rps, rel=0.01)
    assert summary["output_tokens_per_s_per_gpu"] == pytest.approx(summary["output_tokens_per_s"] / 4)


def test_open_loop_is_unchanged_by_the_new_fields() -> None:
    rows = [(0.0, 100, 4), (0.05, 30, 2)]
    base = simulate(make_config(), make_requests(rows)).trace
    assert list(base.arrival_s) == [0.0, 0.05]


@pytest.mark.parametrize(("field", "value", "message"), [
    ("concurrency", -1, "must be >= 0, got -1"),
    ("client_think_s", -0.5, "must be >= 0, got -0.5"),
    ("client_ramp_s", -1.0, "must be >= 0, got -1.0"),
    ("warmup_requests", -2, "must be >= 0 (or -1 = concurrency), got -2"),
])
def test_bad_closed_loop_fields_name_the_field(field: str, value: float, message: str) -> None:
    cfg = make_config()
    fields = {"concurrency": 2, field: value}
    with pytest.raises(WorkloadError) as err:
        closed_loop_of(replace(cfg.scenario, **fields))
    assert str(err.value) == f"scenario tiny: field {field!r}: {message}"
