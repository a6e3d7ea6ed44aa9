"""`pdsim frontier`: deployments, sizing, the concurrency ladder, Pareto frontier, best at target."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from pdsim.config import Config
from pdsim.search.deployments import (
    Deployment,
    Layout,
    Side,
    deployment_config,
    enumerate_deployments,
    fitting_layouts,
    frontier_deployments,
    parse_label,
)
from pdsim.search.frontier import (
    Y_AT,
    X,
    Y,
    best_at_target,
    mark_frontier,
    pareto_mask,
    ranking_at_target,
    requests_for,
    run_ladder,
    running_capacity,
)
from pdsim.search.frontier_task import best_summary, format_best


def test_sixteen_gpus_of_tp_2_4_8_give_3_colocated_and_21_pd_deployments() -> None:
    deps = enumerate_deployments([Layout(2), Layout(4), Layout(8)], 16)
    colocated = [d for d in deps if d.mode == "colocated"]
    assert [d.label for d in colocated] == ["co-tp2x8", "co-tp4x4", "co-tp8x2"]
    pd_ = [d for d in deps if d.mode == "disaggregated"]
    assert len(pd_) == 21 and all(d.gpus == 16 for d in deps)
    assert "pd-tp4x2-tp8x1" in [d.label for d in pd_] and "pd-tp2x7-tp2x1" in [d.label for d in pd_]
    assert len({d.label for d in deps}) == len(deps)
    assert [d.mode for d in enumerate_deployments([Layout(4)], 16, ["disaggregated"])] == ["disaggregated"] * 3


def test_labels_round_trip_and_bad_labels_fail_in_one_line() -> None:
    dep = Deployment("disaggregated", prefill=Side(Layout(4), 2), decode=Side(Layout(8), 1))
    assert dep.label == "pd-tp4x2-tp8x1" and dep.text == "PD 2xTP4 + 1xTP8"
    assert parse_label(dep.label) == dep and parse_label("co-tp2x8").text == "colocated 8xTP2"
    assert dep.batch_instances == 1 and parse_label("co-tp2x8").batch_instances == 8
    for bad in ("co-tp4", "pd-tp4x2", "xx-tp1x1", "co-tp0x4", "pd-tp4x2-tp8x0"):
        with pytest.raises(ValueError, match="frontier: deployment label"):
            parse_label(bad)


def test_70b_fits_tp2_and_up_on_h100_and_configs_take_the_shape(compose_config) -> None:
    cfg = compose_config("model=llama3_70b", "hardware=h100")
    assert fitting_layouts(cfg, [1, 2, 4, 8, 16], 16) == [Layout(2), Layout(4), Layout(8)]
    c = deployment_config(cfg, parse_label("pd-tp4x2-tp8x1")).cluster
    assert (c.mode, c.prefill, c.prefill_tp, c.decode, c.decode_tp) == ("disaggregated", 2, 4, 1, 8)
    c = deployment_config(cfg, parse_label("co-tp2x8")).cluster
    assert (c.mode, c.colocated, c.colocated_tp) == ("colocated", 8, 2)
    with pytest.raises(ValueError, match="no TP option"):
        fitting_layouts(cfg, [1], 16)


def test_each_point_sends_a_warmup_round_and_rounds_more(compose_config) -> None:
    fcfg = compose_config("frontier.rounds=3", "frontier.min_counted_requests=32").frontier
    assert requests_for(1, fcfg) == 1 + 32  # a lone client still averages over 32 requests
    assert requests_for(64, fcfg) == 64 + 3 * 64


def stub_measure(seen: list[Config], capacity_tok_s: float = 4000.0) -> Any:
    """Throughput grows with clients until the fleet saturates; per-user speed falls."""

    def measure(cfg: Config) -> dict[str, Any]:
        seen.append(cfg)
        c = cfg.scenario.concurrency
        total = min(100.0 * c, capacity_tok_s)
        return {"concurrency": c, Y: total / 16, X: total / c, "steady_state_reached": True, "meets_slo": True,
                "gpus": 16}

    return measure


def test_ladder_doubles_from_one_client_per_batch_instance_until_saturated(compose_config) -> None:
    cfg = compose_config("model=llama3_70b", "frontier.min_gain=0.03")
    seen: list[Config] = []
    rows = run_ladder(cfg, parse_label("co-tp4x4"), stub_measure(seen))
    # 4, 8, ..., 64 clients: 64 saturates (6400 > 4000 tok/s), 128 gains nothing and stops the ladder
    assert [r["concurrency"] for r in rows] == [4, 8, 16, 32, 64, 128]
    assert [c.scenario.num_requests for c in seen] == [requests_for(c, cfg.frontier) for c in (4, 8, 16, 32, 64, 128)]
    assert all(c.cluster.colocated == 4 and c.scenario.warmup_requests == -1 and not c.progress for c in seen)
    assert rows[0]["deployment"] == "co-tp4x4" and rows[0]["family"] == "colocated"
    short = run_ladder(compose_config("frontier.max_concurrency=10"), parse_label("co-tp4x4"), stub_measure([]))
    assert [r["concurrency"] for r in short] == [4, 8]
    capped = run_ladder(cfg, parse_label("co-tp4x4"), stub_measure([]), capacity=20)
    assert [r["concurrency"] for r in capped] == [4, 8, 16, 32]  # one point at or past the capacity
    slow = compose_config("frontier.min_tokens_per_s_per_user=70")  # 64 clients: 4000/64 = 62.5 tok/s each
    assert [r["concurrency"] for r in run_ladder(slow, parse_label("co-tp4x4"), stub_measure([]))] == [4, 8, 16, 32, 64]


def test_pareto_mask_keeps_undominated_points_once() -> None:
    x = np.array([10.0, 20.0, 30.0, 20.0, 5.0, 30.0])
    y = np.array([100.0, 80.0, 50.0, 70.0, 90.0, 50.0])
    # (20, 70) is dominated by (20, 80), (5, 90) by (10, 100); the second (30, 50) is a duplicate
    assert pareto_mask(x, y).tolist() == [True, True, True, False, False, False]


def frame() -> pd.DataFrame:
    rows = [  # family, deployment, C, tok/s/user, tok/s/GPU, steady, meets SLO
        ("colocated", "co-tp4x4", 4, 90.0, 100.0, True, True),
        ("colocated", "co-tp4x4", 64, 40.0, 600.0, True, True),
        ("colocated", "co-tp8x2", 2, 95.0, 80.0, True, True),
        ("disaggregated", "pd-tp4x2-tp8x1", 8, 70.0, 400.0, True, True),
        ("disaggregated", "pd-tp4x2-tp8x1", 16, 60.0, 700.0, True, False),  # misses the SLO
        ("disaggregated", "pd-tp2x4-tp8x1", 8, 80.0, 900.0, False, True),  # not steady
        ("disaggregated", "pd-tp2x4-tp8x1", 4, 55.0, 450.0, True, True),
    ]
    cols = ["family", "deployment", "concurrency", X, Y, "steady_state_reached", "meets_slo"]
    out = pd.DataFrame(rows, columns=cols)
    out["gpus"] = 16
    out["deployment_text"] = out["deployment"]
    return out


def test_frontiers_per_family_skip_unsteady_points_and_slo_misses() -> None:
    marked = mark_frontier(frame())
    on = marked[marked["on_frontier"]]
    assert sorted(zip(on["deployment"], on["concurrency"], strict=True)) == [
        ("co-tp4x4", 4), ("co-tp4x4", 64), ("co-tp8x2", 2), ("pd-tp4x2-tp8x1", 8), ("pd-tp4x2-tp8x1", 16)]
    slo = marked[marked["on_slo_frontier"]]
    assert sorted(zip(slo["deployment"], slo["concurrency"], strict=True))[-1] == ("pd-tp4x2-tp8x1", 8)
    assert not marked.loc[5, "on_frontier"]  # 900 tok/s/GPU, but never steady


def test_best_point_at_target_needs_speed_slo_and_steady_state() -> None:
    points = mark_frontier(frame())
    best = best_at_target(points, 50.0)
    assert (best["deployment"], best[Y]) == ("pd-tp2x4-tp8x1", 450.0)
    assert best_at_target(points, 85.0)["deployment"] == "co-tp4x4"
    assert best_at_target(points, 85.0, "disaggregated") is None
    assert best_at_target(points, 100.0) is None


def test_ranking_reads_each_ladder_at_the_target() -> None:
    ranking = ranking_at_target(frame(), 50.0)
    rows = {r["deployment"]: r for r in ranking.to_dict("records")}
    # co-tp4x4: C=4 (90 tok/s/user, 100) and C=64 (40, 600) straddle 50: 100 + 0.8 x 500 = 500
    assert rows["co-tp4x4"][Y_AT] == pytest.approx(500.0) and rows["co-tp4x4"]["interpolated"]
    assert (rows["co-tp4x4"]["concurrency_from"], rows["co-tp4x4"]["concurrency_to"]) == (4, 64)
    # pd-tp4x2-tp8x1's C=16 misses the SLO: only its C=8 point counts, as measured
    assert rows["pd-tp4x2-tp8x1"][Y_AT] == 400.0 and not rows["pd-tp4x2-tp8x1"]["interpolated"]
    # pd-tp2x4-tp8x1's C=8 is not steady: its C=4 point (55 tok/s/user, 450) is the one
    assert rows["pd-tp2x4-tp8x1"][Y_AT] == 450.0
    assert list(ranking["deployment"]) == ["co-tp4x4", "pd-tp2x4-tp8x1", "pd-tp4x2-tp8x1", "co-tp8x2"]
    assert ranking_at_target(frame(), 96.0).empty
    summary = best_summary(mark_frontier(frame()), 50.0)
    assert summary["best"]["deployment"] == "co-tp4x4" and summary["disaggregated"][Y_AT] == 450.0
    assert summary["gain_disaggregated_over_colocated"] == pytest.approx(0.9)
    assert summary["best_point"]["deployment"] == "pd-tp2x4-tp8x1"
    text = format_best(summary, "SLO TTFT<=2s")
    assert "best disaggregated   pd-tp2x4-tp8x1            450.0 (C=4)" in text and "x0.90" in text
    assert "#1   co-tp4x4               ~  500.0 (C=4..64)" in text


def test_running_capacity_is_bounded_by_batch_slots_or_kv(compose_config) -> None:
    cfg = compose_config("scenario=frontier_1k1k", "model=llama3_70b", "hardware=h100")
    # TP4 and TP8 hold 256 requests of ~1.8k tokens each: max_running_requests binds
    assert running_capacity(cfg, parse_label("co-tp4x4")) == 4 * 256
    assert running_capacity(cfg, parse_label("pd-tp4x2-tp8x1")) == 256
    # TP2 keeps ~10 GiB per GPU for KV: a few dozen requests per instance
    assert 8 <= running_capacity(cfg, parse_label("co-tp2x8")) < 8 * 64
    # an fp8 KV cache holds twice the tokens
    assert running_capacity(cfg, parse_label("co-tp2x8@bf16.kvfp8")) >= 2 * running_capacity(cfg, parse_label("co-tp2x8")) - 8


def test_deployments_given_by_label_are_checked(compose_config) -> None:
    cfg = compose_config("model=llama3_70b", "hardware=h100", "frontier.deployments=[co-tp4x4,pd-tp4x2-tp8x1]")
    assert [d.label for d in frontier_deployments(cfg)] == ["co-tp4x4", "pd-tp4x2-tp8x1"]
    assert len(frontier_deployments(compose_config("model=llama3_70b", "hardware=h100"))) == 24
    with pytest.raises(ValueError, match="co-tp8x4 needs 32 GPUs"):
        frontier_deployments(compose_config("frontier.deployments=[co-tp8x4]"))
    with pytest.raises(ValueError, match=r"no TP option in \[1\] fits llama3_70b"):
        frontier_deployments(compose_config("model=llama3_70b", "frontier.deployments=[co-tp1x16]"))
