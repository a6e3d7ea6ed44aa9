"""Skip-ahead (several decode iterations per simpy event) gives exactly the step-by-step results.

Each scenario runs twice, `skip_ahead=True` and `False`, and compares every trace column (token
times included), the time series and the per-instance statistics for equality, plus the event
count (the point of skipping). Step times have a context term so that iterations differ.
"""

from __future__ import annotations

import bisect
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from librt.vecs import vec
from roofline_cases import ROOFLINE_DECODE_ARGS, ROOFLINE_DECODE_CASES
from simkit import make_config, make_requests, synthetic

from pdsim.config import PerfConfig
from pdsim.perf import (
    LinearModel,
    MeasuredModel,
    RooflineModel,
    StepOverheadModel,
    build_latency_model,
)
from pdsim.perf.catalog import load_hardware, load_model
from pdsim.perf.steps.decode import CallStep
from pdsim.policy.router_policy import HEALTH_ONLY_ROUTING
from pdsim.sim import simulate
from pdsim.sim import span as span_module
from pdsim.sim.instance import InstanceBase
from pdsim.sim.pagegrowth import PageGrowth
from pdsim.sim.span import Span, hop_delay
from pdsim.sim.spantimes import SpanTimes, span_times
from pdsim.sim.steptime import StepSeries
from pdsim.workload.request import Workload

CTX_PERF = dict(prefill_base_s=0.02, prefill_per_token_s=1e-4, decode_base_s=0.01, decode_per_seq_s=1.3e-4,
                decode_per_ctx_token_s=3.7e-7)
BUSY = dict(
    prefill=2, decode=2, colocated=2, prefix_cache=True, chunk_size_tokens=256, max_prefill_tokens=512,
    kv_capacity_tokens=3000, page_size_tokens=16,
)
SCENARIOS: dict[str, dict[str, Any]] = {
    "disaggregated": dict(cluster=BUSY),
    "retraction": dict(cluster={**BUSY, "kv_capacity_tokens": 1600}, policy=dict(decode_reserved_tokens=2)),
    "prealloc_waits": dict(cluster={**BUSY, "kv_capacity_tokens": 1600}),
    "faults": dict(cluster=BUSY, policy=dict(decode_reserved_tokens=4), faults=dict(
        transfer_failure_prob=0.05, crash_instance="decode:1", crash_at_s=7.3, retry_failed=True)),
    "crash_no_retry": dict(cluster=BUSY, faults=dict(crash_instance="decode:0", crash_at_s=5.05)),
    "colocated_mixed": dict(cluster={**BUSY, "mode": "colocated", "kv_capacity_tokens": 2400}),
    "colocated_priority": dict(cluster={**BUSY, "mode": "colocated", "colocated_schedule": "prefill_priority"}),
    "colocated_cache_aware": dict(cluster={**BUSY, "mode": "colocated", "colocated": 3, "kv_capacity_tokens": 2400},
                                  policy=dict(routing="cache_aware")),
    "colocated_crash": dict(cluster={**BUSY, "mode": "colocated"}, faults=dict(crash_instance="colocated:1", crash_at_s=4.2)),
    "least_loaded_max_time": dict(cluster=BUSY, policy=dict(routing="least_loaded"), max_sim_time_s=9.0),
}


def _workload(n: int = 160) -> Workload:
    """simkit's synthetic prompts (shared prefixes) with outputs long enough to skip over."""
    base = synthetic(n, seed=11, rate_rps=8)
    outputs = np.random.default_rng([11, 1]).integers(1, 240, n)
    return replace(base, output_tokens=outputs.astype(np.int64))


def _run(scenario: dict[str, Any], skip: bool) -> Any:
    cfg = make_config(perf=CTX_PERF, record_token_times=True, timeseries_interval_s=0.37, skip_ahead=skip, **scenario)
    return simulate(cfg, _workload())


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_skip_ahead_matches_step_by_step(name: str) -> None:
    fast, ref = _run(SCENARIOS[name], True), _run(SCENARIOS[name], False)
    pd.testing.assert_frame_equal(fast.trace, ref.trace, check_exact=True)
    pd.testing.assert_frame_equal(fast.timeseries, ref.timeseries, check_exact=True)
    assert fast.instance_stats == ref.instance_stats
    assert fast.sim_time_s == ref.sim_time_s
    assert fast.events < ref.events


def test_scenarios_exercise_what_they_name() -> None:
    t = _run(SCENARIOS["retraction"], True).trace
    assert t.num_retractions.sum() > 0
    t = _run(SCENARIOS["faults"], True).trace
    assert (t.status == "failed").any() and (t.status == "finished").any() and t.cached_prefix_tokens.sum() > 0
    t = _run(SCENARIOS["prealloc_waits"], True).trace
    assert ((t.prealloc_leave_s - t.prealloc_enter_s) > 0.1).sum() > 10
    t = _run(SCENARIOS["colocated_mixed"], True).trace
    assert t.num_retractions.sum() > 0


def test_skip_ahead_hand_timeline_long_output() -> None:
    # one request, 200 tokens, constant 10 ms iterations: a single span reaches the last token
    cfg = make_config()
    res = simulate(cfg, make_requests([(0.0, 100, 200)]))
    row = res.trace.iloc[0]
    t = row.first_token_s
    for _ in range(199):
        t += 0.01
    assert row.last_token_s == t
    assert res.events < 40


def test_step_series_is_bit_identical_to_the_model() -> None:
    linear = LinearModel(**{k: v for k, v in CTX_PERF.items()})
    from simkit import TINY_HW, TINY_MODEL

    roofline = RooflineModel(TINY_MODEL, TINY_HW, tp=1, overhead_per_seq_s=1e-5)
    wrapped = StepOverheadModel(linear, 0.001, 0.0023)
    scaled = StepOverheadModel(linear, 0.001, 0.0023, prefill_scale=1.1, decode_scale=1.37)  # served slowdown
    for model in (linear, roofline, wrapped, scaled):
        steps = list(StepSeries(model).step_model(7).steps(12345, 300))
        ref = [model.decode_time_s(7, 12345 + 7 * i) for i in range(300)]
        assert steps == ref
        if model is not roofline:  # (roofline's mixed step sums with `sum`, compensated from Python 3.12 on)
            assert model.mixed_time_s([], 7, 12345) == model.decode_time_s(7, 12345)
    t, expected = 0.123, [0.123]
    for s in ref:
        t += s
        expected.append(t)
    assert span_times(vec[float](ref), 0.123, 0.0).bounds(0, len(ref)) == expected


class _Uncompiled:
    """A latency model without a compiled decode step (as the table model): the linear one's
    steps, called once per iteration (CallStep)."""

    name = "uncompiled"

    def __init__(self, inner: LinearModel) -> None:
        self.inner = inner
        self.prefill_time_s = inner.prefill_time_s
        self.decode_time_s = inner.decode_time_s
        self.mixed_time_s = inner.mixed_time_s

    def decode_step(self, num_seqs: int) -> CallStep:
        return CallStep(num_seqs, self.decode_time_s)

    def prefill_timer(self) -> Any:
        return self.prefill_time_s


@pytest.mark.parametrize("k", [1, 2, 5, 96, 300, 1024])
@pytest.mark.parametrize("extra_s", [0.0, 0.0123])
def test_span_times_are_the_models_steps_and_simpys_clock(k: int, extra_s: float) -> None:
    # spans of steps cheap to recompute are filled when read (DecodeStep.add_up), other steps'
    # come from arrays: every read gives the bits of decode_time_s and of simpy's clock
    from simkit import TINY_HW, TINY_MODEL

    plain = LinearModel(**CTX_PERF)
    table = StepSeries(_Uncompiled(plain))  # a model called once a step: its spans are arrays
    roofline = RooflineModel(TINY_MODEL, TINY_HW, tp=1, overhead_per_seq_s=1e-5)
    for model in (plain, StepOverheadModel(plain, 0.001, 0.0023), table, roofline,
                  StepOverheadModel(roofline, 0.001, 0.0023, decode_scale=1.37, per_context_token_s=1e-7,
                                    decode_context_offset_tokens=3)):
        series = model if isinstance(model, StepSeries) else StepSeries(model)
        model = series.latency
        times = series.span(7, 12345, k, 3.21, extra_s)
        assert isinstance(series.step_model(7), CallStep) == (series is table)
        ref = [model.decode_time_s(7, 12345 + 7 * i) for i in range(k)]
        ref[0] += extra_s
        t, expected = 3.21, [3.21]
        for s in ref:
            t += s
            expected.append(t)
        assert [times.step(i) for i in range(k)] == ref
        assert times.bounds(0, k) == expected and all(type(b) is float for b in times.bounds(1, k))
        _assert_walks(series.span(7, 12345, k, 3.21, extra_s), 3.21, ref)


def _summed(start_s: float, steps: list[float]) -> list[float]:
    """b_0 = start_s, b_{i+1} = b_i + steps[i], one addition at a time (simpy's clock)."""
    out = [start_s]
    for s in steps:
        out.append(out[-1] + s)
    return out


def _assert_walks(times: SpanTimes, start_s: float, ref: list[float]) -> None:
    """A fresh span's end, reads and sums against its steps `ref`, summed one at a time (simpy's
    clock): the end first (as a span is planned), reads in time order, then backwards, then past
    the end; the last boundary before a time from several boundaries before it."""
    k, t, expected = len(ref), start_s, [start_s]
    for s in ref:
        t += s
        expected.append(t)
    assert Span(times, None, k).end_s == expected[-1]
    for now_s in (start_s, expected[min(k, 3)], expected[k // 2] + 1e-9, expected[k] - 1e-9, start_s - 0.2, 1e9):
        j = times.first_at_or_after(now_s)
        assert j == bisect.bisect_left(expected, now_s)
        assert [times.bound(i) for i in range(k + 1)] == expected
        for first in (0, 1, 2, k // 3, k - 2):  # (called from a boundary before now_s, one left)
            if 0 <= first < k - 1 and (first == 0 or expected[first] < now_s):
                assert times.last_before(now_s, first, k - 1) == max(first, min(j - 1, k - 1))
    for first in (0, 1, k // 2, k):
        total = 0.5
        for s in ref[first:]:
            total += s
        assert times.add_steps(0.5, first, k) == total and type(times.add_steps(0.5, first, k)) is float


@pytest.mark.parametrize(ROOFLINE_DECODE_ARGS, ROOFLINE_DECODE_CASES)
def test_roofline_span_times_are_its_steps_bit_for_bit(model_name: str, tp: int, mfu: float, mbu: float) -> None:
    # the span adds up the model's steps in one loop (RooflineStep._walk, its divisions by powers
    # of two made one multiplication where they can be): the same bits as one step at a time
    # (tests/perf/test_steps.py holds each step to the general roofline step)
    model = RooflineModel(load_model(model_name), load_hardware("h100"), tp=tp, mfu=mfu, mbu=mbu,
                          overhead_per_seq_s=1e-5)
    series = StepSeries(model)
    for n, ctx0, extra_s in ((1, 17, 0.0), (7, 12345, 0.0123), (64, 64 * 3000 + 5, 0.0), (300, 300 * 900, 0.0)):
        times = series.span(n, ctx0, 400, 1.5, extra_s)
        ref = [model.decode_time_s(n, ctx0 + n * i) for i in range(400)]
        ref[0] += extra_s
        assert [times.step(i) for i in range(400)] == ref
        assert times.bounds(0, 400) == _summed(1.5, ref)
        _assert_walks(series.span(n, ctx0, 400, 1.5, extra_s), 1.5, ref)


MEASURED = PerfConfig(kind="measured", engine="sglang", overhead_s=0.0015, overhead_per_seq_s=2e-5)


@pytest.mark.parametrize("model_name,hardware,tp", [
    ("llama3_8b", "h100", 1), ("llama3_70b", "h100", 8), ("deepseek_v3", "h100", 8), ("qwen3_30b_a3b", "h100", 2),
    ("llama3_70b", "a800", 8),  # tables scaled from the A100's: a ratio per context, no compiled step
])
def test_measured_span_times_are_decode_time_s_bit_for_bit(model_name: str, hardware: str, tp: int) -> None:
    # TableStep repeats LogGrid.at_second operation for operation: contexts below one token per
    # sequence, inside the table, past its last tick; plain and under a StepOverheadModel
    model = build_latency_model(MEASURED, load_model(model_name), load_hardware(hardware), tp)
    assert isinstance(model, MeasuredModel)
    wrapped = StepOverheadModel(model, 0.001, 0.0023, decode_scale=1.37, per_context_token_s=1e-7,
                                decode_context_offset_tokens=3)
    for latency in (model, wrapped):
        series = StepSeries(latency)
        for n, ctx0, extra_s in ((1, 0, 0.0), (3, 2, 0.0), (7, 12345, 0.0123), (64, 64 * 3000 + 5, 0.0),
                                 (300, 300 * 900, 0.0), (2, 2 * 400_000, 0.0)):
            k = 300
            times = series.span(n, ctx0, k, 1.5, extra_s)
            if latency is model:
                assert isinstance(series.step_model(n), CallStep) == (hardware == "a800")
            ref = [latency.decode_time_s(n, ctx0 + n * i) for i in range(k)]
            ref[0] += extra_s
            assert [times.step(i) for i in range(k)] == ref
            assert times.bounds(0, k) == _summed(1.5, ref)
            _assert_walks(series.span(n, ctx0, k, 1.5, extra_s), 1.5, ref)
            if not extra_s:  # (the array path, DecodeStep.steps: the same bits)
                assert list(series.step_model(n).steps(ctx0, 4)) == ref[:4]
            assert latency.mixed_time_s((), n, ctx0) == latency.decode_time_s(n, ctx0)


@pytest.mark.source_core
def test_truncated_spans_rearm_instead_of_interrupting(monkeypatch: pytest.MonkeyPatch) -> None:
    # requests reaching a busy decode instance cut its spans short: the sleeping process is
    # re-armed (no simpy Interrupt), with the step path's results (test above)
    rearms: list[float] = []
    real = span_module.rearm

    def counted(process: Any, events: Any, delay_s: float) -> None:
        rearms.append(delay_s)
        real(process, events, delay_s)

    monkeypatch.setattr(span_module, "rearm", counted)
    monkeypatch.setattr(span_module.simpy.Process, "interrupt", None)  # (would raise if called)
    _run(SCENARIOS["disaggregated"], True)
    assert len(rearms) > 50 and min(rearms) >= 0.0


def test_hop_delay_and_page_growth() -> None:
    for now, target in [(0.001, 0.0123), (1e-9, 3.3), (12345.678, 12345.6781), (0.0, 0.5), (7.0, 7.0)]:
        t, hops, lands = now, 0, False
        while not lands:
            delay, lands = hop_delay(t, target)
            t, hops = t + delay, hops + 1
        assert t == target and hops <= 2
    # page 4; KV lengths 8 (0 mod 4), 7 and 11 (3 mod 4): growth at i=1 (x2), 4 (x1), 5 (x2), 8 (x1)...
    growth = PageGrowth.of([8, 7, 11], 4)
    assert [growth.pages(j) for j in range(10)] == [0, 2, 2, 2, 3, 5, 5, 5, 6, 8]
    assert [growth.first_over(free, 10) for free in (0, 2, 3, 4, 8, 9)] == [1, 4, 5, 5, 10, 10]


@pytest.mark.source_core
@pytest.mark.parametrize("name", ["faults", "retraction", "colocated_cache_aware", "colocated_crash"])
def test_cached_router_views_equal_fresh_ones(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Instances cache their router view between changes; every read must equal a rebuilt one."""
    cached = InstanceBase.view
    reads = []

    def audited(self: InstanceBase) -> Any:
        view = cached(self)
        assert view == self.build_view(), f"{self.name} at t={self.env.now}"
        reads.append(view)
        return view

    monkeypatch.setattr(InstanceBase, "view", audited)
    scenario = SCENARIOS[name]
    policy = scenario.get("policy", {})
    if policy.get("routing", "round_robin") in HEALTH_ONLY_ROUTING:  # a router that reads the views
        scenario = {**scenario, "policy": {**policy, "routing": "least_loaded"}}
    _run(scenario, True)
    assert len(reads) > 100
