"""Expert parallelism and attention DP in `pdsim frontier` / `pdsim plan` (issue 40): labels,
which layouts an MoE or a dense model gets and why the others are dropped, the cluster a
deployment becomes, a tiny measured frontier over DP/EP layouts, and the planner over layouts."""

from __future__ import annotations

import logging

import pytest

from pdsim.config import Config
from pdsim.parallel import Parallel
from pdsim.search.deployments import (
    Deployment,
    Layout,
    Side,
    deployment_config,
    enumerate_deployments,
    fitting_layouts,
    frontier_deployments,
    layout_problem,
    parse_label,
)
from pdsim.search.frontier import run_ladder, running_capacity
from pdsim.search.frontier_task import measure_point
from pdsim.search.plan_task import format_plan, plan_to_dict
from pdsim.search.planner import candidate_config, plan, plan_layouts
from pdsim.search.rows import gpus_of

# DP layouts need the NCCL all-gather / reduce-scatter tables of the 0.5.14 sets
MOE_B200 = ("model=qwen3_30b_a3b", "hardware=b200", "perf=measured", "perf.engine_version=0.5.14")
TP1_DP8_EP8, TP8_EP8 = Layout(1, 8, 8), Layout(8, 1, 8)


def test_old_labels_parse_and_print_as_before() -> None:
    for label in ("co-tp4x4", "pd-tp4x2-tp8x1", "co-tp2x8@fp8.kvfp8"):
        assert parse_label(label).label == label
    assert (Layout(4).token, Layout(4).text, Layout(4).gpus) == ("tp4", "TP4", 4)
    assert parse_label("pd-tp4x2-tp8x1").text == "PD 2xTP4 + 1xTP8"


def test_dp_and_ep_labels_round_trip() -> None:
    dep = parse_label("pd-tp8ep8x1-tp1dp8ep8x2")
    assert dep == Deployment("disaggregated", prefill=Side(TP8_EP8, 1), decode=Side(TP1_DP8_EP8, 2))
    assert (dep.label, dep.text, dep.gpus) == ("pd-tp8ep8x1-tp1dp8ep8x2", "PD 1xTP8/EP8 + 2xTP1xDP8/EP8", 24)
    co = parse_label("co-tp2dp4x2@fp8")
    assert (co.colocated, co.label, co.text, co.gpus) == (Side(Layout(2, 4), 2), "co-tp2dp4x2@fp8",
                                                          "colocated 2xTP2xDP4 fp8", 16)
    assert TP1_DP8_EP8.parallel == Parallel(1, 8, 8) and TP1_DP8_EP8.token == "tp1dp8ep8"
    assert parse_label("co-tp1dp1ep1x2").label == "co-tp1x2"  # explicit 1s are the plain layout
    for bad in ("co-tp1ep8dp8x2", "co-dp8x2", "co-tp1dp8ep8", "co-tp1dp0x2", "pd-tp8ep8x1-tp1dp8ep0x2"):
        with pytest.raises(ValueError, match=f"frontier: deployment label '{bad}'"):
            parse_label(bad)


def test_moe_layouts_on_16_b200_kept_and_dropped(compose_config) -> None:
    cfg = compose_config(*MOE_B200)
    kept = fitting_layouts(cfg, [1, 2, 4, 8], 16, dp_options=[1, 8], ep_options=[1, 8])
    assert kept == [Layout(1), Layout(1, 8), TP1_DP8_EP8, Layout(2), Layout(2, 8), Layout(2, 8, 8),
                    Layout(4), Layout(8), TP8_EP8]
    # the other 7 of the 16 combinations, and why
    for layout, why in ((Layout(1, 1, 8), "moe_ep 8 does not divide the instance's 1 GPUs"),
                        (Layout(2, 1, 8), "moe_ep 8 does not divide the instance's 2 GPUs"),
                        (Layout(4, 1, 8), "moe_ep 8 does not divide the instance's 4 GPUs"),
                        (Layout(4, 8), "needs 32 GPUs, over frontier.gpus=16"),
                        (Layout(4, 8, 8), "needs 32 GPUs, over frontier.gpus=16"),
                        (Layout(8, 8), "needs 64 GPUs, over frontier.gpus=16"),
                        (Layout(8, 8, 8), "needs 64 GPUs, over frontier.gpus=16")):
        assert layout_problem(cfg, layout, 16).startswith(why), layout
    assert "more than one node" in layout_problem(cfg, Layout(16), 32)  # TP stays in a node,
    assert layout_problem(cfg, Layout(4, 8), 32) == ""  # DP ranks may span nodes
    deps = enumerate_deployments(kept, 16)
    # 9 colocated; splits of 16 over the 7 layouts of at most 8 GPUs (the 16-GPU ones fill it alone)
    assert sum(d.mode == "colocated" for d in deps) == 9 and len(deps) == 9 + 91
    assert "pd-tp8ep8x1-tp1dp8ep8x1" in [d.label for d in deps]


def test_dp_and_ep_need_a_perf_model_that_expresses_them(compose_config, caplog) -> None:
    cfg = compose_config("model=qwen3_30b_a3b", "hardware=b200", "perf=roofline")
    assert "models tensor parallelism only" in layout_problem(cfg, TP8_EP8, 16)
    with caplog.at_level(logging.INFO, logger="pdsim.search.deployments"):
        kept = fitting_layouts(cfg, [8], 16, dp_options=[1, 2], ep_options=[1, 8])
    assert kept == [Layout(8)] and "no DP / EP layout fits, plain TP only" in caplog.text


def test_a_dense_model_never_gets_ep(compose_config) -> None:
    cfg = compose_config("model=llama3_8b", "hardware=b200", "perf=measured", "perf.engine_version=0.5.14",
                         "frontier.dp_options=[1,8]", "frontier.ep_options=[1,8]")
    deps = frontier_deployments(cfg)
    assert deps and all(side.layout.moe_ep == 1 for d in deps for side in d.sides)
    assert any(side.layout.dp == 8 for d in deps for side in d.sides)
    assert "needs an MoE model; llama3_8b is dense" in layout_problem(cfg, TP8_EP8, 16)
    labelled = compose_config("model=llama3_8b", "hardware=b200", "frontier.deployments=[co-tp8ep8x2]")
    with pytest.raises(ValueError, match=r"EP option in \[8\] fits llama3_8b .*needs an MoE model"):
        frontier_deployments(labelled)


def test_a_deployment_sets_each_sides_dp_and_ep(compose_config) -> None:
    cfg = deployment_config(compose_config(*MOE_B200), parse_label("pd-tp8ep8x1-tp1dp8ep8x1"))
    c = cfg.cluster
    assert (c.prefill_tp, c.prefill_dp, c.prefill_moe_ep, c.decode_tp, c.decode_dp, c.decode_moe_ep) == (8, 1, 8, 1, 8, 8)
    assert c.parallel("decode") == Parallel(1, 8, 8) and gpus_of(cfg) == 16
    co = deployment_config(cfg, parse_label("co-tp1dp8ep8x2")).cluster
    assert (co.mode, co.colocated, co.colocated_tp, co.colocated_dp, co.colocated_moe_ep) == ("colocated", 2, 1, 8, 8)


def test_the_moe_exchange_is_searched_per_side(compose_config, caplog) -> None:
    """a2a_options try DeepEP against all-gather on the DP x EP layouts only; the label carries it
    (tp1dp8ep8deepep), the deployment sets that side's cluster field, and a table set without
    DeepEP drops the layout with the reason."""
    deep = Layout(1, 8, 8, "deepep")
    dep = parse_label("pd-tp1dp8ep8x1-tp1dp8ep8deepepx1")
    assert (dep.decode, dep.label, dep.text) == (Side(deep, 1), "pd-tp1dp8ep8x1-tp1dp8ep8deepepx1",
                                                 "PD 1xTP1xDP8/EP8 + 1xTP1xDP8/EP8 deepep")
    for bad in ("co-tp8ep8deepepx1", "co-tp1dp8deepepx1", "co-tp1dp8ep8nvlsx1"):  # no DP x EP; no such exchange
        with pytest.raises(ValueError, match=f"frontier: deployment label '{bad}'"):
            parse_label(bad)
    cfg = compose_config(*MOE_B200)
    kept = fitting_layouts(cfg, [1, 8], 16, dp_options=[1, 8], ep_options=[1, 8], a2a_options=["", "deepep"])
    assert kept == [Layout(1), Layout(1, 8), TP1_DP8_EP8, deep, Layout(8), TP8_EP8]
    c = deployment_config(cfg, dep).cluster
    assert (c.prefill_moe_a2a, c.decode_moe_a2a) == ("", "deepep")
    assert c.parallel("decode") == Parallel(1, 8, 8, "deepep")
    trtllm = compose_config("model=qwen3_30b_a3b", "hardware=b200", "perf=measured_trtllm")
    with caplog.at_level(logging.INFO, logger="pdsim.search.deployments"):
        kept = fitting_layouts(trtllm, [1], 16, dp_options=[8], ep_options=[8], a2a_options=["", "deepep"])
    assert kept == [TP1_DP8_EP8] and "TP1xDP8/EP8 deepep skipped" in caplog.text
    assert "table set b200_sxm_trtllm_1.3.0rc20 has no deepep_moe or deepep_a2a" in caplog.text
    with pytest.raises(ValueError, match=r"x MoE exchange in \['deepep'\] fits qwen3_30b_a3b"):
        fitting_layouts(trtllm, [1], 16, dp_options=[8], ep_options=[8], a2a_options=["deepep"])
    with pytest.raises(ValueError, match=r"plan: a2a_options \['nccl'\] not in \['', 'allgather', 'deepep'\]"):
        fitting_layouts(cfg, [1], 16, "plan.gpus", dp_options=[8], ep_options=[8], a2a_options=["nccl"])


def test_tiny_measured_frontier_over_dp_and_ep(compose_config) -> None:
    cfg = compose_config("scenario=frontier_1k1k", *MOE_B200, "frontier.gpus=8", "frontier.tp_options=[1,8]",
                         "frontier.dp_options=[1,8]", "frontier.ep_options=[8]", "frontier.modes=[colocated]",
                         "frontier.max_concurrency=4", "frontier.min_counted_requests=8", "frontier.rounds=2",
                         "scenario.input.value=128", "scenario.output.value=32")
    deps = frontier_deployments(cfg)
    assert [d.label for d in deps] == ["co-tp1dp8ep8x1", "co-tp8ep8x1"]
    for dep in deps:
        rows = run_ladder(cfg, dep, measure_point, capacity=running_capacity(cfg, dep))
        assert [r["concurrency"] for r in rows] == [1, 2, 4]
        lay = dep.sides[0].layout
        for r in rows:
            assert (r["gpus"], r["colocated_tp"], r["colocated_dp"], r["colocated_moe_ep"]) == (8, lay.tp, lay.dp, 8)
            assert r["steady_state_reached"] and r["output_tokens_per_s_per_gpu"] > 0
        assert rows[0]["deployment_text"] == f"colocated 1x{lay.text}"


# one instance's goodput (req/s) by role and layout: TP8/EP8 prefills best, TP1xDP8/EP8 decodes best
ROLE_RPS = {"prefill": {TP8_EP8: 10.0, TP1_DP8_EP8: 4.0}, "decode": {TP8_EP8: 5.0, TP1_DP8_EP8: 12.0},
            "colocated": {TP8_EP8: 3.0, TP1_DP8_EP8: 4.0}}


def stub(fleet: Config, start_rps: float) -> float:
    """Goodput = the slower side (disaggregated) or the sum (colocated), linear in counts."""
    c = fleet.cluster

    def rps(side: str) -> float:
        p = c.parallel(side)
        return ROLE_RPS[side][Layout(p.tp, p.dp, p.moe_ep)]

    if c.mode == "colocated":
        return c.colocated * rps("colocated")
    return min(c.prefill * rps("prefill"), c.decode * rps("decode"))


def test_plan_searches_layouts_per_side(compose_config) -> None:
    cfg = compose_config("scenario=rag", *MOE_B200, "plan.gpus=16", "plan.tp_options=[1,8]", "plan.dp_options=[1,8]",
                         "plan.ep_options=[8]", "plan.verify_top=2")
    assert plan_layouts(cfg) == [TP1_DP8_EP8, TP8_EP8]  # TP1/EP8 splits 1 GPU 8 ways; TP8xDP8 needs 64
    result = plan(cfg, stub)
    assert {(r.role, r.layout): r.goodput_rps for r in result.roles} == {
        (role, lay): g for role, by in ROLE_RPS.items() for lay, g in by.items()}
    best = result.best
    assert best.label == "1P(TP8/EP8) 1D(TP1xDP8/EP8)" and best.gpus == 16 and best.goodput_rps == 10.0
    assert result.best_colocated.label == "colocated x2 (TP1xDP8/EP8)" and result.gain == pytest.approx(10.0 / 8.0)
    c = candidate_config(cfg, best).cluster
    assert (c.prefill_tp, c.prefill_dp, c.prefill_moe_ep, c.decode_tp, c.decode_dp, c.decode_moe_ep) == (8, 1, 8, 1, 8, 8)
    text = format_plan(result, cfg)
    assert "recommendation: 1P(TP8/EP8) 1D(TP1xDP8/EP8) on 16 GPUs" in text
    assert "best per-GPU layout for decode: TP1xDP8/EP8 (1.5 req/s per GPU)" in text
    rec = plan_to_dict(result)["recommendation"]
    assert (rec["decode_dp"], rec["decode_moe_ep"], rec["gpus"]) == (8, 8, 16)
