"""Tiny scenarios whose whole timelines are computed by hand (see simkit for the constants).

Constants: control-plane hop L = 1 ms, prefill = 0.1 s + 1 ms/token, decode iteration = 10 ms,
1000 KV bytes/token over a 1e9 B/s NIC (10-token page = 10 us), no link latency, no aux bytes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from simkit import make_config, make_requests, rounded, timeline

from pdsim.config import validate_values
from pdsim.perf import catalog
from pdsim.sim import simulate

PD_FIELDS = (
    "route_s", "bootstrap_enter_s", "prealloc_enter_s", "prealloc_leave_s", "bootstrap_leave_s",
    "prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s", "inflight_leave_s",
    "transfer_queue_leave_s", "running_enter_s", "first_token_s", "last_token_s", "finish_s",
)


def test_one_request_timeline() -> None:
    res = simulate(make_config(), make_requests([(0.0, 100, 4)]))
    prefill_end = 0.003 + 0.1 + 0.001 * 100
    xfer_end = prefill_end + 100 * 1000 / 1e9
    assert timeline(res.trace, 0, PD_FIELDS) == rounded([
        ("route_s", 0.0),
        ("bootstrap_enter_s", 0.001),  # one hop to the prefill side
        ("prealloc_enter_s", 0.001),  # and, at once, to the decode side
        ("prealloc_leave_s", 0.002),  # bootstrap lookup (first contact), then pre-allocated
        ("bootstrap_leave_s", 0.003),  # TransferInfo reached the prefill side
        ("prefill_start_s", 0.003),
        ("prefill_end_s", prefill_end),
        ("transfer_start_s", prefill_end),
        ("transfer_end_s", xfer_end),
        ("inflight_leave_s", xfer_end),
        ("transfer_queue_leave_s", xfer_end),
        ("running_enter_s", xfer_end),
        ("first_token_s", xfer_end),
        ("last_token_s", xfer_end + 3 * 0.01),  # 3 decode iterations for tokens 2..4
        ("finish_s", xfer_end + 3 * 0.01),
    ])
    row = res.trace.iloc[0]
    assert (row.status, row.transfer_bytes, row.output_tokens) == ("finished", 100_000, 4)


def test_a_linear_attention_state_travels_with_the_last_chunk() -> None:
    # Qwen3.5's 45 Gated DeltaNet layers: 192,061,440 state bytes per request (decode TP1) go with
    # the last KV chunk, beside its 15 full-attention layers' KV (2 heads x 256 x 2 x 2 B = 30,720
    # B/token): 100 tokens -> 3,072,000 + 192,061,440 bytes, at the NIC's 1e9 B/s
    cfg = replace(make_config(), model=catalog.load_model("qwen35_397b_a17b"))
    res = simulate(cfg, make_requests([(0.0, 100, 4)]))
    row = res.trace.iloc[0]
    assert row.transfer_bytes == 100 * 30_720 + 192_061_440
    assert row.transfer_end_s - row.transfer_start_s == pytest.approx((100 * 30_720 + 192_061_440) / 1e9)


def test_token_delivery_moves_the_token_times_to_the_client() -> None:
    base = simulate(make_config(record_token_times=True), make_requests([(0.0, 100, 4)])).trace.iloc[0]
    res = simulate(make_config({"token_delivery_s": 0.002}, record_token_times=True), make_requests([(0.0, 100, 4)]))
    row = res.trace.iloc[0]
    xfer_end = 0.003 + 0.1 + 0.001 * 100 + 100 * 1000 / 1e9
    assert abs(row.first_token_s - (xfer_end + 0.002)) < 1e-12
    assert abs(row.last_token_s - (xfer_end + 0.03 + 0.002)) < 1e-12 and row.finish_s == row.last_token_s
    assert [round(t - b, 12) for t, b in zip(row.token_times_s, base.token_times_s, strict=True)] == [0.002] * 4
    assert row.prefill_end_s == base.prefill_end_s  # only what the client sees moves


def test_the_frontend_tokenizes_prompts_one_at_a_time_in_arrival_order() -> None:
    # 0.1 ms a prompt token: the 100- and 200-token prompts arriving together at t=0 are routed at
    # 0.01 and 0.01 + 0.02 = 0.03 (one tokenizer thread); the one at t=1 finds it idle: 1.0 + 0.01
    cfg = make_config({"tokenize_s_per_token": 1e-4})
    requests = [(0.0, 100, 2), (0.0, 200, 2), (1.0, 100, 2)]
    trace = simulate(cfg, make_requests(requests)).trace.sort_values("request_id")
    assert [round(r - a, 12) for a, r in zip(trace.arrival_s, trace.route_s, strict=True)] == [0.01, 0.03, 0.01]
    base = simulate(make_config(), make_requests(requests)).trace.sort_values("request_id").iloc[2]
    alone = trace.iloc[2]  # the rest of its path is the untokenized run's, 10 ms later
    assert alone.first_token_s - base.first_token_s == pytest.approx(0.01, abs=1e-12)
    assert alone.finish_s - base.finish_s == pytest.approx(0.01, abs=1e-12)


@pytest.mark.parametrize(("threads", "waits"), [(2, [0.01, 0.02, 0.02]), (0, [0.01, 0.02, 0.01])])
def test_tokenizer_threads_take_prompts_side_by_side(threads: int, waits: list[float]) -> None:
    # three prompts at t=0 of 100, 200, 100 tokens at 0.1 ms a token. Two threads: the first two
    # start at once, the third waits for the first thread (0.01) and ends at 0.02; no queue (0):
    # each prompt takes only its own time
    cfg = make_config({"tokenize_s_per_token": 1e-4, "tokenize_threads": threads})
    trace = simulate(cfg, make_requests([(0.0, 100, 2), (0.0, 200, 2), (0.0, 100, 2)])).trace.sort_values("request_id")
    assert [round(r - a, 12) for a, r in zip(trace.arrival_s, trace.route_s, strict=True)] == waits


def test_a_prompt_still_in_the_tokenizer_at_the_time_limit_is_accounted_for() -> None:
    # 100 tokens at 0.1 ms a token: routed at 0.01 s, after the 5 ms limit; it fails with the
    # limit's reason, no instance ever saw it, and the run's invariants hold
    cfg = make_config({"tokenize_s_per_token": 1e-4}, max_sim_time_s=0.005)
    row = simulate(cfg, make_requests([(0.0, 100, 2)])).trace.iloc[0]
    assert row.status == "failed" and row.failure_reason == "unfinished at max_sim_time_s=0.005"


@pytest.mark.parametrize("field", ["tokenize_s_per_token", "tokenize_threads"])
def test_negative_tokenizer_settings_are_refused_by_name(field: str) -> None:
    with pytest.raises(ValueError, match=rf"cluster: field '{field}' must be >= 0, got -1"):
        validate_values(make_config({field: -1}))


def test_two_transfers_share_the_decode_nic_max_min() -> None:
    cfg = make_config(cluster=dict(prefill=2), perf=dict(prefill_per_token_s=0.0))
    res = simulate(cfg, make_requests([(0.0, 100, 2), (0.0, 200, 2)]))
    # Both prefills end at 0.103; 100 kB and 200 kB then share decode:0's 1e9 B/s NIC at 5e8 each.
    # The small one ends after 100 kB / 5e8 = 0.2 ms; the big one has 100 kB left at full rate.
    fields = ("prefill_end_s", "transfer_end_s", "decode_waiting_enter_s", "running_enter_s", "last_token_s")
    assert timeline(res.trace, 0, fields) == rounded([
        ("prefill_end_s", 0.103), ("transfer_end_s", 0.1032), ("decode_waiting_enter_s", 0.1032),
        ("running_enter_s", 0.1032), ("last_token_s", 0.1132),
    ])
    assert timeline(res.trace, 1, fields) == rounded([
        ("prefill_end_s", 0.103), ("transfer_end_s", 0.1033), ("decode_waiting_enter_s", 0.1033),
        ("running_enter_s", 0.1132),  # joins at the next iteration boundary of decode:0
        ("last_token_s", 0.1232),
    ])
    assert list(res.trace.prefill_instance) == [0, 1] and list(res.trace.decode_instance) == [0, 0]


def test_small_decode_pool_makes_prealloc_wait() -> None:
    # 150 decode tokens: r0 holds 100 and reserves its output; r1 (104 needed) waits for r0 to end.
    cfg = make_config(cluster=dict(kv_capacity_tokens=150))
    res = simulate(cfg, make_requests([(0.0, 100, 4), (0.0, 100, 4)]))
    r0_finish = 0.2031 + 0.03
    assert timeline(res.trace, 0, ("prealloc_leave_s", "finish_s")) == rounded(
        [("prealloc_leave_s", 0.002), ("finish_s", r0_finish)]
    )
    assert timeline(res.trace, 1, PD_FIELDS[2:]) == rounded([
        ("prealloc_enter_s", 0.001),
        ("prealloc_leave_s", r0_finish),
        ("bootstrap_leave_s", r0_finish + 0.001),
        ("prefill_start_s", r0_finish + 0.001),
        ("prefill_end_s", r0_finish + 0.201),
        ("transfer_start_s", r0_finish + 0.201),
        ("transfer_end_s", r0_finish + 0.2011),
        ("inflight_leave_s", r0_finish + 0.2011),
        ("transfer_queue_leave_s", r0_finish + 0.2011),
        ("running_enter_s", r0_finish + 0.2011),
        ("first_token_s", r0_finish + 0.2011),
        ("last_token_s", r0_finish + 0.2311),
        ("finish_s", r0_finish + 0.2311),
    ])


def test_retraction_and_resume() -> None:
    # 100 decode tokens, reserve 1 token per request: both (10 in, 50 out) are admitted at once.
    # They run together from 0.12302; before iteration 41 each holds 50 tokens = 5 pages and the
    # pool is full: r1 (same progress, higher id) is retracted, r0 finishes alone, then r1 is
    # resumed (50 tokens reloaded at 1e-6 s/token) and decodes its last 9 tokens.
    cfg = make_config(cluster=dict(kv_capacity_tokens=100), policy=dict(decode_reserved_tokens=1))
    res = simulate(cfg, make_requests([(0.0, 10, 50), (0.0, 10, 50)]))
    start = 0.003 + 0.1 + 0.001 * 20 + 2 * 10_000 / 1e9  # one prefill batch, two 10 kB transfers share
    r0_end = start + 49 * 0.01
    fields = ("running_enter_s", "last_token_s")
    assert timeline(res.trace, 0, fields) == rounded([("running_enter_s", start), ("last_token_s", r0_end)])
    assert timeline(res.trace, 1, fields) == rounded(
        [("running_enter_s", start), ("last_token_s", r0_end + 50 * 1e-6 + 9 * 0.01)]
    )
    assert list(res.trace.num_retractions) == [0, 1]
    assert res.instance_stats["decode:0"]["retractions"] == 1


def test_chunked_prefill_sends_pages_per_chunk() -> None:
    cfg = make_config(cluster=dict(chunk_size_tokens=100))
    res = simulate(cfg, make_requests([(0.0, 255, 2)]))
    # chunks of 100, 100, 55 tokens: 0.2, 0.2, 0.155 s; pages sent 10, 10, 6 (last page partial)
    assert timeline(res.trace, 0, ("prefill_start_s", "transfer_start_s", "prefill_end_s", "transfer_end_s")) == rounded([
        ("prefill_start_s", 0.003), ("transfer_start_s", 0.203), ("prefill_end_s", 0.558),
        ("transfer_end_s", 0.558 + 60_000 / 1e9),
    ])
    assert res.trace.transfer_bytes[0] == 26 * 10 * 1000


def test_colocated_one_request() -> None:
    cfg = make_config(cluster=dict(mode="colocated"))
    res = simulate(cfg, make_requests([(0.0, 100, 4)]))
    fields = ("prefill_waiting_enter_s", "prefill_start_s", "first_token_s", "last_token_s", "finish_s")
    assert timeline(res.trace, 0, fields) == rounded([
        ("prefill_waiting_enter_s", 0.001), ("prefill_start_s", 0.001), ("first_token_s", 0.201),
        ("last_token_s", 0.231), ("finish_s", 0.231),
    ])
    row = res.trace.iloc[0]
    assert (row["mode"], row.prefill_instance, row.decode_instance, row.transfer_bytes) == ("colocated", 0, 0, 0)


def test_colocated_mixed_batch_shares_the_iteration() -> None:
    # r1 arrives while r0 decodes: its prefill chunk rides in r0's decode iterations.
    cfg = make_config(cluster=dict(mode="colocated"))
    res = simulate(cfg, make_requests([(0.0, 100, 3), (0.205, 50, 2)]))
    # r0: prefill 0.001-0.201, decode 0.201-0.211; r1 waits from 0.206, joins the 0.211 iteration
    # (mixed: 0.1 + 0.05 prefill, decode adds no per-seq cost) -> first token 0.361.
    assert timeline(res.trace, 0, ("first_token_s", "last_token_s")) == rounded(
        [("first_token_s", 0.201), ("last_token_s", 0.361)]
    )
    assert timeline(res.trace, 1, ("prefill_start_s", "first_token_s", "last_token_s")) == rounded(
        [("prefill_start_s", 0.211), ("first_token_s", 0.361), ("last_token_s", 0.371)]
    )


def test_prefix_cache_hit_skips_compute() -> None:
    cfg = make_config(cluster=dict(prefix_cache=True, page_size_tokens=16, kv_capacity_tokens=1024))
    hashes = [[1, 2, 3], [1, 2, 9]]
    res = simulate(cfg, make_requests([(0.0, 200, 2), (1.0, 200, 2)], hashes, block_tokens=64))
    assert list(res.trace.cached_prefix_tokens) == [0, 128]
    # the pair is already connected (no bootstrap lookup): TransferInfo back at 1.002;
    # r1 computes 200 - 128 = 72 tokens: prefill 0.1 + 0.072 s
    assert timeline(res.trace, 1, ("prefill_start_s", "prefill_end_s")) == rounded(
        [("prefill_start_s", 1.002), ("prefill_end_s", 1.174)]
    )


def test_layerwise_transfer_overlaps_the_prefill_forward() -> None:
    # 100 kB over a 4e5 B/s NIC takes 0.25 s. Without overlap it starts at prefill end (0.203);
    # with layer-wise overlap it starts with the forward (0.003) and ends at 0.253.
    slow = dict(nic_gbps=0.0032)
    fields = ("transfer_start_s", "prefill_end_s", "transfer_end_s", "first_token_s")
    plain = simulate(make_config(hardware=slow), make_requests([(0.0, 100, 2)]))
    assert timeline(plain.trace, 0, fields) == rounded(
        [("transfer_start_s", 0.203), ("prefill_end_s", 0.203), ("transfer_end_s", 0.453), ("first_token_s", 0.453)]
    )
    overlap = simulate(make_config(hardware=slow, cluster=dict(layerwise_transfer=True)), make_requests([(0.0, 100, 2)]))
    assert timeline(overlap.trace, 0, fields) == rounded(
        [("transfer_start_s", 0.003), ("prefill_end_s", 0.203), ("transfer_end_s", 0.253), ("first_token_s", 0.253)]
    )
    # a fast link cannot finish before the forward that produces the KV ends
    fast = simulate(make_config(cluster=dict(layerwise_transfer=True)), make_requests([(0.0, 100, 2)]))
    assert timeline(fast.trace, 0, ("transfer_end_s",)) == [("transfer_end_s", 0.203)]
