"""Numbers of the comparison: KS distance, alignment, relative errors, divergence ranking."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis import diverge
from analysis.compare import compare, ks_distance, relative_error
from analysis.load import LoadedTrace, align
from pdsim.metrics import Slo

SLO = Slo(ttft_s=0.5, tpot_s=0.05)


def _compare(a: pd.DataFrame, b: pd.DataFrame):
    return compare(LoadedTrace("sim", a), LoadedTrace("real", b), SLO)


def test_ks_distance_known_values() -> None:
    assert ks_distance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 0.0
    assert ks_distance(np.array([1.0, 2.0]), np.array([5.0, 6.0])) == 1.0
    assert ks_distance(np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])) == pytest.approx(1 / 3)
    assert ks_distance(np.array([1.0, np.nan]), np.array([1.0])) == 0.0
    assert np.isnan(ks_distance(np.array([]), np.array([1.0])))


def test_relative_error_edge_cases() -> None:
    err = relative_error(np.array([1.1, 0.0, 1.0, np.nan]), np.array([1.0, 0.0, 0.0, 1.0]))
    assert err[0] == pytest.approx(0.1)
    assert err[1] == 0.0
    assert np.isnan(err[2]) and np.isnan(err[3])


def test_trace_against_itself_has_zero_error(trace_factory) -> None:
    trace = trace_factory(seed=3)
    result = _compare(trace, trace.copy())
    assert result.alignment.method == "request_id"
    assert len(result.metrics) == 13
    for column in (
        "relerr_p50",
        "relerr_p90",
        "relerr_p99",
        "ks",
        "req_abs_relerr_p50",
        "req_abs_relerr_p90",
    ):
        assert (result.table[column] == 0).all(), column
    assert (result.errors.fillna(0.0) == 0).all().all()
    assert result.attainment["sim"].equals(result.attainment["real"])


def test_ttft_scaled_by_1_1_gives_10_percent_on_ttft_only(trace_factory) -> None:
    real = trace_factory(seed=4)
    sim = real.copy()
    shift = 0.1 * (sim["first_token_s"] - sim["arrival_s"])
    sim["first_token_s"] += shift  # TTFT x 1.1; last token moves with it so TPOT is unchanged
    sim["last_token_s"] += shift
    result = _compare(sim, real)
    ttft = result.table.loc["ttft_s"]
    for p in ("p50", "p90", "p99"):
        assert ttft[f"relerr_{p}"] == pytest.approx(0.1, abs=1e-9)
    assert result.errors["ttft_s"].dropna().to_numpy() == pytest.approx(0.1, abs=1e-9)
    assert ttft["ks"] > 0
    others = result.table.drop(index="ttft_s")
    for column in ("relerr_p50", "relerr_p90", "relerr_p99", "ks", "req_abs_relerr_p90"):
        assert (others[column] == 0).all(), column
    assert (result.errors.drop(columns="ttft_s").fillna(0.0) == 0).all().all()


def test_alignment_falls_back_to_arrival_order(trace_factory) -> None:
    real = trace_factory(seed=5)
    renumbered = real.assign(request_id=real["request_id"] + 10_000).sample(
        frac=1.0, random_state=1
    )
    result = align(renumbered, real)
    assert result.method == "arrival_order"
    assert result.input_match_fraction == 1.0
    assert (_compare(renumbered, real).table["ks"] == 0).all()


def test_alignment_by_id_with_missing_requests(trace_factory) -> None:
    real = trace_factory(seed=6)
    sim = real.drop(index=[3, 7]).reset_index(drop=True)
    result = align(sim, real)
    assert result.method == "request_id"
    assert (result.unmatched_a, result.unmatched_b) == (0, 2)
    assert result.a["request_id"].tolist() == result.b["request_id"].tolist()


def test_divergence_names_the_perturbed_stage(trace_factory) -> None:
    real = trace_factory(seed=7)
    sim = real.copy()
    sim["prefill_start_s"] += 0.3  # the waiting queue is 0.3 s longer in the candidate
    sim["prefill_end_s"] += 0.3
    result = _compare(sim, real)
    ranking = diverge.stage_ranking(result)
    assert ranking.iloc[0]["stage"] == "prefill_waiting_s"
    assert ranking.iloc[0]["mean_diff_s"] == pytest.approx(0.3)
    notes = diverge.findings(result)
    assert "prefill waiting queue" in notes[0]
    groups = diverge.error_by_group(result, result.alignment.b["input_tokens"], "ttft_s")
    assert groups["n"].sum() == result.errors["ttft_s"].notna().sum()


def test_stage_recorded_on_one_side_only_is_flagged(trace_factory) -> None:
    real = trace_factory(seed=8)
    sim = real.assign(prealloc_enter_s=np.nan, prealloc_leave_s=np.nan)
    ranking = diverge.stage_ranking(_compare(sim, real)).set_index("stage")
    assert ranking.loc["prealloc_s", "only_in"] == "real"


def _with_token_times(trace: pd.DataFrame) -> pd.DataFrame:
    times = [
        list(np.linspace(first, last, n)) if np.isfinite(first) else None
        for first, last, n in zip(
            trace["first_token_s"], trace["last_token_s"], trace["output_tokens"], strict=True
        )
    ]
    return trace.assign(token_times_s=times)


def test_itl_table_when_token_times_recorded(trace_factory) -> None:
    from analysis.compare import itl_table

    real = _with_token_times(trace_factory(seed=9))
    same = itl_table(real, real.copy(), ("sim", "real")).set_index("statistic")
    assert same.loc["ks", "sim"] == 0.0 and (same["relerr"].dropna() == 0).all()
    assert itl_table(trace_factory(seed=9), real, ("sim", "real")) is None


def test_findings_for_identical_runs_say_so(trace_factory) -> None:
    trace = trace_factory(seed=10)
    assert diverge.findings(_compare(trace, trace.copy())) == [
        "sim and real agree on every aligned request: no metric or stage differs."
    ]
