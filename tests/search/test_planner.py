"""The planner's arithmetic with a closed-form goodput oracle, and one tiny end-to-end plan."""

from __future__ import annotations

import math

import pytest

from pdsim.config import Config
from pdsim.search.plan_task import format_plan, plan_to_dict
from pdsim.search.planner import (
    MIN_LIFETIMES,
    Candidate,
    ProbeSize,
    RoleGoodput,
    disaggregated_candidates,
    fitting_tps,
    fleet_lone_s,
    helper_counts,
    plan,
    simulated_goodput,
    small_probes,
)

# one instance's goodput (req/s) by TP: prefill is the scarce side, TP4 is the best per GPU
PREFILL = {1: 1.0, 2: 2.2, 4: 5.0, 8: 8.0}
DECODE = {1: 3.0, 2: 6.0, 4: 12.0, 8: 20.0}
COLOCATED = {1: 0.5, 2: 1.1, 4: 2.4, 8: 5.0}
COLOCATED_STUB = COLOCATED


def stub(calls: list[Config]):
    """Goodput = the slower side (disaggregated) or the sum (colocated), linear in counts."""

    def evaluate(cfg: Config, start_rps: float) -> float:
        calls.append(cfg)
        c = cfg.cluster
        if c.mode == "colocated":
            return c.colocated * COLOCATED[c.colocated_tp]
        return min(c.prefill * PREFILL[c.prefill_tp], c.decode * DECODE[c.decode_tp])

    return evaluate


@pytest.fixture
def cfg(compose_config) -> Config:
    return compose_config("scenario=rag", "model=llama3_8b", "hardware=h100", "plan.gpus=16", "plan.verify_top=2",
                          "plan.helper_instances=4")


def test_candidates_balance_rates_within_budget() -> None:
    roles = [RoleGoodput("prefill", 4, 5.0), RoleGoodput("decode", 4, 12.0)]
    cands = disaggregated_candidates(roles, 16)
    # decode takes what the prefill side leaves; the estimate is the slower side
    assert [(c.prefill, c.decode, c.estimate_rps) for c in cands] == [(3, 1, 12.0), (2, 2, 10.0), (1, 3, 5.0)]
    assert all(c.gpus == 16 for c in cands)
    assert disaggregated_candidates(roles, 7) == []  # no room for one instance of each


def test_plan_picks_best_split_and_reports_gain(cfg: Config) -> None:
    calls: list[Config] = []
    result = plan(cfg, stub(calls))
    # roles: 4 TPs x (prefill, decode, colocated) measured on one instance each
    assert len(result.roles) == 12
    measured = {(r.role, r.tp): r.goodput_rps for r in result.roles}
    assert measured[("prefill", 4)] == 5.0 and measured[("decode", 1)] == 3.0
    # 16 GPUs: the best splits reach 12 req/s (e.g. 3P(TP4) + 4 decode GPUs, 12P(TP1) + 4D(TP1));
    # equal goodput and GPUs break ties on the smaller TPs
    best = result.best
    assert (best.prefill, best.prefill_tp, best.decode, best.decode_tp) == (12, 1, 4, 1)
    assert best.goodput_rps == pytest.approx(12.0) and best.gpus == 16
    # colocated: 16 x 0.5, 8 x 1.1, 4 x 2.4, 2 x 5.0 -> 2 x TP8 = 10
    assert result.best_colocated == Candidate("colocated", 10.0, colocated=2, colocated_tp=8, goodput_rps=10.0)
    assert result.gain == pytest.approx(1.2)
    # 12 role runs, one decode re-run with 8 prefill helpers (4 x 8 req/s < 2 x 20 req/s), then
    # the full fleets: 2 disaggregated + 2 colocated
    assert len(calls) == 17
    decode_runs = [(c.cluster.prefill, c.cluster.decode_tp) for c in calls[:13] if c.cluster.decode == 1
                   and c.cluster.mode == "disaggregated"]
    assert decode_runs[:2] == [(4, 8), (8, 8)] and {h for h, _ in decode_runs[2:]} == {8}
    assert all(c.scenario.num_requests == 1000 for c in calls)  # plan.num_requests=0: the oracle sizes probes
    text = format_plan(result, cfg)
    assert "recommendation: 12P(TP1) 4D(TP1) on 16 GPUs" in text and "gain x1.20" in text
    assert plan_to_dict(result)["recommendation"]["gpus"] == best.gpus


def test_tp_options_that_do_not_fit_are_skipped(compose_config) -> None:
    # 70B in bf16 (131 GiB) needs at least 2 A800s; TP above the budget is skipped too
    big = compose_config("model=llama3_70b", "hardware=a800", "plan.gpus=16")
    assert fitting_tps(big) == [2, 4, 8]
    assert fitting_tps(compose_config("model=llama3_70b", "hardware=a800", "plan.gpus=4")) == [2, 4]
    with pytest.raises(ValueError, match="plan.gpus=1"):
        fitting_tps(compose_config("model=llama3_70b", "hardware=a800", "plan.gpus=1"))


def test_end_to_end_plan_on_a_tiny_workload(compose_config) -> None:
    small = compose_config("scenario=rag", "perf=linear", "plan.gpus=3", "plan.tp_options=[1]", "plan.num_requests=40",
                           "plan.verify_top=1", "plan.helper_instances=1", "search.max_probes=6", "search.rel_tol=0.3")
    result = plan(small)
    assert result.best is not None and result.best.gpus <= 3
    assert result.best.goodput_rps > 0 and result.best_colocated.goodput_rps > 0
    assert not math.isnan(result.gain)


def test_recommendation_is_the_best_fleet_of_either_mode(cfg: Config, monkeypatch) -> None:
    monkeypatch.setitem(COLOCATED_STUB, 8, 7.0)  # colocated TP8: 2 x 7 = 14 > 12 disaggregated
    result = plan(cfg, stub([]))
    assert result.best.mode == "colocated" and result.best.goodput_rps == pytest.approx(14.0)
    assert result.best_disaggregated.goodput_rps == pytest.approx(12.0)
    assert result.gain == pytest.approx(12.0 / 14.0)
    text = format_plan(result, cfg)
    assert "recommendation: colocated x2 (TP8) on 16 GPUs, goodput 14 req/s (colocated)" in text


def test_probes_are_sized_per_fleet_and_rate_within_bounds() -> None:
    auto, fixed = ProbeSize(0, 100, 4000), ProbeSize(300, 100, 4000)
    # a 1 s lone request at 10 req/s: 20 lifetimes of arrivals = 200 requests
    assert auto.requests(10.0, 1.0) == 200 and auto.requests(0.5, 1.0) == 100 and auto.requests(1e4, 1.0) == 4000
    assert not auto.too_small(10.0, 1.0) and auto.too_small(1e4, 1.0)  # the cap binds: flagged
    assert fixed.requests(10.0, 1.0) == 300 and fixed.too_small(100.0, 1.0) and not fixed.too_small(10.0, 1.0)


def test_small_probes_are_flagged(compose_config) -> None:
    # 300 requests at 100 req/s arrive within 3 s; a lone request takes 1 s: 3 < 20 lifetimes
    forced = compose_config("plan.num_requests=300", "cluster.decode_tp=4")
    parts = {1: (0.5, 0.5), 2: (0.5, 0.5), 4: (0.5, 0.5)}.__getitem__
    measured = [("decode TP4", forced, 100.0), ("decode TP2", forced, 0.36)]
    assert small_probes(forced, measured, parts) == ["decode TP4"]
    auto = compose_config("cluster.decode_tp=4")  # sized: 2000 requests at 100 req/s
    assert small_probes(auto, measured, parts) == []
    assert small_probes(auto, [("decode TP4", auto, 1000.0)], parts) == ["decode TP4"]  # over max_requests


def test_goodput_probes_get_their_sizes(compose_config, monkeypatch) -> None:
    """The default oracle hands every probe ceil(20 x lone latency x rate) requests."""
    from pdsim.search import task

    cfg = compose_config("scenario=rag", "model=llama3_70b", "hardware=h100", "cluster.prefill_tp=4",
                         "cluster.decode_tp=8", "search.max_probes=6")
    sizes: list[tuple[float, int]] = []

    def fake_run(probe: Config, progress: bool = False):
        rate = probe.scenario.rate_rps
        sizes.append((rate, probe.scenario.num_requests))
        return type("Out", (), {"summary": {"attainment": {"both": 1.0 if rate < 5 else 0.0},
                                            "meets_slo_target": rate < 5}})()

    monkeypatch.setattr(task, "run_simulation", fake_run)
    assert simulated_goodput(cfg, 1.0) == 4.0
    lone = fleet_lone_s(cfg)
    assert 1.0 < lone < 10.0  # ~3000-token prompt, ~150 tokens out, on H100s
    assert sizes and all(n == min(cfg.plan.max_requests, max(100, math.ceil(MIN_LIFETIMES * lone * r))) for r, n in sizes)


@pytest.mark.slow
def test_default_70b_plan_on_16_h100_reaches_steady_state(compose_config) -> None:
    """The issue's case: the default probe sizes leave no goodput measured on too small a probe."""
    cfg = compose_config("scenario=rag", "model=llama3_70b", "hardware=h100", "plan.gpus=16")
    result = plan(cfg)
    assert result.small_probes == () and result.best is not None
    decode_tp8 = next(r for r in result.roles if (r.role, r.tp) == ("decode", 8))
    assert decode_tp8.goodput_rps < 200  # 300-request probes claimed 10,000 req/s


def test_helpers_enough_after_the_last_doubling_do_not_warn(compose_config, caplog) -> None:
    """One decode instance at 62 req/s needs 32 prefill helpers at 7 req/s: three doublings of 4."""
    cfg = compose_config("plan.helper_instances=4")

    def evaluate(fleet: Config, start_rps: float) -> float:
        return 7.0 if fleet.cluster.prefill == 1 else 62.0

    helpers, g = helper_counts(cfg, 8, evaluate)
    assert helpers == {"prefill": 4, "decode": 32} and g == {"prefill": 7.0, "decode": 62.0}
    assert "helpers still within" not in caplog.text
