"""The knobs compat=distserve sets, each on a tiny hand-computed timeline (simkit constants:
control hop 1 ms, prefill 0.1 s + 1 ms/token, decode iteration 10 ms, 10 us per 10-token page)."""

from __future__ import annotations

import pytest
from simkit import make_config, make_requests, rounded, timeline

from pdsim import metrics
from pdsim.perf import FittedModel, LinearModel, StepOverheadModel
from pdsim.sim import simulate
from pdsim.sim.steptime import StepSeries

FIELDS = ("prefill_start_s", "prefill_end_s", "transfer_end_s", "running_enter_s", "first_token_s", "last_token_s")


def test_prefill_end_handoff_with_no_transfer_and_no_prefill_token() -> None:
    cfg = make_config(cluster=dict(kv_handoff="prefill_end", transfer_backend="none", prefill_emits_token=False),
                      record_token_times=True)
    res = simulate(cfg, make_requests([(0.0, 100, 4)]))
    end = 0.001 + 0.1 + 0.1  # one hop, then the prefill at once (no bootstrap wait)
    assert timeline(res.trace, 0, FIELDS) == rounded([
        ("prefill_start_s", 0.001), ("prefill_end_s", end), ("transfer_end_s", end),
        ("running_enter_s", end),  # the decode side takes it at once: it was idle
        ("first_token_s", end + 0.01),  # the prefill made no token: 4 decode iterations
        ("last_token_s", end + 0.04),
    ])
    row = res.trace.iloc[0]
    assert row.transfer_bytes == 0 and len(row.token_times_s) == 4
    assert metrics.ttft_s(res.trace, "prefill_end").iloc[0] == pytest.approx(end)
    assert metrics.tpot_s(res.trace, "distserve").iloc[0] == pytest.approx(0.01)


def test_prefill_end_handoff_joins_at_the_next_decode_boundary() -> None:
    # r0 (10 tokens) decodes from 0.111 in 10 ms iterations; r1 (95 tokens) waits for the prefill
    # side, ends its prefill at 0.306 mid-iteration and joins at the boundary 0.311.
    cfg = make_config(cluster=dict(kv_handoff="prefill_end", transfer_backend="none", prefill_emits_token=False))
    res = simulate(cfg, make_requests([(0.0, 10, 30), (0.0005, 95, 2)]))
    assert timeline(res.trace, 0, ("prefill_end_s", "running_enter_s")) == rounded(
        [("prefill_end_s", 0.111), ("running_enter_s", 0.111)])
    assert timeline(res.trace, 1, ("prefill_start_s", "prefill_end_s", "running_enter_s", "last_token_s")) == rounded([
        ("prefill_start_s", 0.111), ("prefill_end_s", 0.306), ("running_enter_s", 0.311), ("last_token_s", 0.331),
    ])


def test_colocated_prefill_without_token_runs_output_len_iterations() -> None:
    cfg = make_config(cluster=dict(mode="colocated", colocated_schedule="prefill_priority", prefill_emits_token=False))
    res = simulate(cfg, make_requests([(0.0, 100, 3)]))
    end = 0.001 + 0.2
    assert timeline(res.trace, 0, ("prefill_end_s", "first_token_s", "last_token_s")) == rounded(
        [("prefill_end_s", end), ("first_token_s", end + 0.01), ("last_token_s", end + 0.03)])


def test_step_overhead_per_context_token_and_decode_offset() -> None:
    inner = LinearModel(prefill_base_s=0.1, prefill_per_token_s=0.001, decode_base_s=0.01,
                        decode_per_seq_s=0.0, decode_per_ctx_token_s=1e-5)
    m = StepOverheadModel(inner, 0.003, 0.002, per_context_token_s=1e-7, decode_context_offset_tokens=1)
    # prefill of 100 new after 20 cached: 0.1 + 0.001 * 100 + 3 ms + 120 context tokens * 1e-7
    assert m.prefill_time_s([(100, 20)]) == pytest.approx(0.203 + 1.2e-5)
    # decode of 4 sequences over 1000 KV tokens: the inner term reads 1004, the overhead 1000
    assert m.decode_time_s(4, 1000) == pytest.approx(0.01 + 1e-5 * 1004 + 0.002 + 1e-4)
    steps = m.decode_step(4).steps(1000, 3)  # the compiled step agrees bit for bit
    assert list(steps) == [m.decode_time_s(4, c) for c in (1000, 1004, 1008)]


def test_fitted_batch_floor_is_optional() -> None:
    kw = dict(prefill_ms=(0.0, 0.0, 0.0), decode_small_ms=(10.0, 0.0, 1.0), decode_large_ms=(0.0, 0.0, 1.0),
              batch_threshold=4)
    assert FittedModel(**kw).decode_time_s(4, 0) == pytest.approx(0.013)  # floored at batch 3
    assert FittedModel(**kw, batch_floor=False).decode_time_s(4, 0) == pytest.approx(0.004)


def test_fitted_step_series_is_bit_identical_to_the_scalar_call() -> None:
    """Decode spans take a fitted model's steps from its decode_step (FittedStep): small and large
    batches, with and without the floor, wrapped in DistServe's overheads, equal decode_time_s
    bit for bit, read from a span or as an array."""
    kw = dict(prefill_ms=(1.0, 0.01, 1e-6), decode_small_ms=(12.3, 1.7e-4, 0.31), decode_large_ms=(3.1, 2.9e-4, 0.27),
              batch_threshold=9)
    for model in (FittedModel(**kw), FittedModel(**kw, batch_floor=False)):
        for inner in (model, StepOverheadModel(model, 0.003, 0.002, per_context_token_s=1e-7,
                                               decode_context_offset_tokens=1)):
            for n in (1, 8, 9, 40):
                ref = [inner.decode_time_s(n, 777 + n * i) for i in range(200)]
                assert list(inner.decode_step(n).steps(777, 200)) == ref
                times = StepSeries(inner).span(n, 777, 200, 0.0)
                assert [times.step(i) for i in range(200)] == ref
    floored, plain = FittedModel(**kw).decode_step(40), FittedModel(**kw, batch_floor=False).decode_step(40)
    assert floored.time_s(0) > plain.time_s(0) and floored.time_s(1000) > plain.time_s(1000)


def test_least_requests_routing_counts_requests_not_tokens() -> None:
    # at 0.2 ms each prefill instance holds one request: 500 tokens on 0, 10 on 1. Counting
    # requests ties (lower id wins: 0); counting tokens picks 1.
    reqs = [(0.0, 500, 2), (0.0001, 10, 2), (0.0002, 10, 2)]
    by_count = simulate(make_config(cluster=dict(prefill=2), policy=dict(routing="least_requests")), make_requests(reqs))
    by_tokens = simulate(make_config(cluster=dict(prefill=2), policy=dict(routing="least_loaded")), make_requests(reqs))
    assert list(by_count.trace.prefill_instance) == [0, 1, 0]
    assert list(by_tokens.trace.prefill_instance) == [0, 1, 1]
