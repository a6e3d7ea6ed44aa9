"""Faults: crash mid-transfer (with and without retry), failed transfers, timeouts, rejections."""

from __future__ import annotations

import pytest
from simkit import make_config, make_requests, rounded, timeline

from pdsim.sim import simulate
from pdsim.sim.faults import detection_time_s
from pdsim.sim.transfer import KVPoll, KVPollError, advance_poll

SLOW_NIC = dict(nic_gbps=0.008)  # 1e6 B/s: a 100-token prompt (100 kB) takes 0.1 s to move
CRASH = dict(crash_instance="decode:0", crash_at_s=0.25, heartbeat_interval_s=1.0, heartbeat_misses=3)


def test_detection_time_counts_missed_beats() -> None:
    assert detection_time_s(0.25, 1.0, 3) == 3.0
    assert detection_time_s(2.5, 1.0, 2) == 4.0
    with pytest.raises(ValueError, match="heartbeat_misses"):
        detection_time_s(1.0, 1.0, 0)


def test_crash_mid_transfer_fails_the_transfer_then_detection_fails_the_rest() -> None:
    cfg = make_config(hardware=SLOW_NIC, faults=CRASH)
    res = simulate(cfg, make_requests([(0.0, 100, 4), (0.5, 100, 4)]))
    t = res.trace
    # r0's KV was on the wire (0.203 -> 0.303): the write to the dead peer fails at the crash.
    assert timeline(t, 0, ("transfer_start_s", "finish_s")) == rounded([("transfer_start_s", 0.203), ("finish_s", 0.25)])
    assert t.failure_reason[0] == "transfer_failed: decode:0 crashed during the transfer"
    # r1 is routed to decode:0 before the crash is detected and waits in bootstrap until 3.0 s.
    assert timeline(t, 1, ("bootstrap_enter_s", "finish_s")) == rounded([("bootstrap_enter_s", 0.501), ("finish_s", 3.0)])
    assert t.failure_reason[1] == "instance_crashed: decode:0 (detected at 3 s)"
    assert list(t.status) == ["failed", "failed"]
    assert res.instance_stats["decode:0"]["alive"] is False


def test_crash_with_retry_moves_requests_to_a_healthy_decode() -> None:
    cfg = make_config(
        cluster=dict(decode=2), hardware=SLOW_NIC, policy=dict(routing="least_loaded"),
        faults={**CRASH, "retry_failed": True, "max_retries": 2},
    )
    res = simulate(cfg, make_requests([(0.0, 100, 4), (0.5, 100, 4)]))
    t = res.trace
    fields = ("route_s", "prealloc_leave_s", "prefill_start_s", "prefill_end_s", "transfer_end_s", "finish_s")
    # r0 retries at 0.25 onto decode:0 again (not yet detected), so decode:0 counts it as queued
    # and least-loaded sends r1 (0.5) to decode:1: first contact (lookup) then the usual path.
    assert timeline(t, 1, fields) == rounded([
        ("route_s", 0.5), ("prealloc_leave_s", 0.502), ("prefill_start_s", 0.503),
        ("prefill_end_s", 0.703), ("transfer_end_s", 0.803), ("finish_s", 0.833),
    ])
    # At detection (3.0) r0 retries again, onto decode:1, whose link to prefill:0 is already up.
    assert timeline(t, 0, fields) == rounded([
        ("route_s", 3.0), ("prealloc_leave_s", 3.001), ("prefill_start_s", 3.002),
        ("prefill_end_s", 3.202), ("transfer_end_s", 3.302), ("finish_s", 3.332),
    ])
    assert list(t.status) == ["finished", "finished"]
    assert list(t.decode_instance) == [1, 1]


def test_transfer_failure_probability_one_fails_everything_with_reason() -> None:
    cfg = make_config(faults=dict(transfer_failure_prob=1.0))
    res = simulate(cfg, make_requests([(0.0, 100, 4), (0.1, 50, 4)]))
    assert list(res.trace.status) == ["failed", "failed"]
    assert set(res.trace.failure_reason) == {"transfer_failed: prefill:0 -> decode:0"}
    assert timeline(res.trace, 0, ("transfer_end_s", "finish_s")) == rounded([("transfer_end_s", 0.2031), ("finish_s", 0.2031)])


def test_bootstrap_timeout_when_decode_never_preallocates() -> None:
    # decode pool fits r0 (the long one) but its output keeps r1 waiting past the timeout.
    cfg = make_config(cluster=dict(kv_capacity_tokens=150), faults=dict(bootstrap_timeout_s=0.1))
    res = simulate(cfg, make_requests([(0.0, 100, 40), (0.0, 100, 4)]))
    assert list(res.trace.status) == ["finished", "failed"]
    assert res.trace.failure_reason[1].startswith("bootstrap_timeout")
    assert res.trace.finish_s[1] == pytest.approx(0.101)


def test_prompt_longer_than_the_pool_is_failed_not_lost() -> None:
    cfg = make_config(cluster=dict(kv_capacity_tokens=100))
    res = simulate(cfg, make_requests([(0.0, 500, 4), (0.0, 20, 4)]))
    assert list(res.trace.status) == ["failed", "finished"]
    assert "exceed" in res.trace.failure_reason[0]


def test_kvpoll_is_monotone_and_terminal_is_sticky() -> None:
    assert advance_poll(KVPoll.Bootstrapping, KVPoll.Transferring, 1) == KVPoll.Transferring
    assert advance_poll(KVPoll.Transferring, KVPoll.Failed, 1) == KVPoll.Failed
    assert advance_poll(KVPoll.Success, KVPoll.Failed, 1) == KVPoll.Success
    assert advance_poll(KVPoll.Failed, KVPoll.Failed, 1) == KVPoll.Failed
    with pytest.raises(KVPollError, match="request 7"):
        advance_poll(KVPoll.Transferring, KVPoll.WaitingForInput, 7)
    with pytest.raises(KVPollError, match="terminal"):
        advance_poll(KVPoll.Failed, KVPoll.Success, 7)
    assert [int(p) for p in KVPoll] == [0, 1, 2, 3, 4]
