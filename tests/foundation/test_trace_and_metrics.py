"""Trace schema round trip and metric definitions on hand-computed rows."""

from __future__ import annotations

import json
import math

import pytest

from pdsim.metrics import Slo, attainment, meets_target, summarize, tbt_mooncake_s, tpot_s, ttft_s
from pdsim.trace import FIELDS, TraceError, TraceRecorder, read_trace, write_trace


def _row(rid: int, arrival: float, first: float, last: float, out: int, status: str = "finished") -> dict:
    return {
        "request_id": rid, "arrival_s": arrival, "input_tokens": 100, "output_tokens": out,
        "first_token_s": first, "last_token_s": last, "finish_s": last, "prefill_end_s": first,
        "status": status,
    }


def _trace():
    rec = TraceRecorder()
    rec.add(_row(0, 0.0, 0.5, 1.5, 11))   # TTFT 0.5, TPOT 0.1
    rec.add(_row(1, 1.0, 4.0, 4.0, 1))    # TTFT 3.0, no TPOT
    rec.add(_row(2, 2.0, 2.2, 6.2, 21))   # TTFT 0.2, TPOT 0.2
    rec.add({"request_id": 3, "arrival_s": 3.0, "input_tokens": 5000, "output_tokens": 10,
             "finish_s": 3.0, "status": "rejected", "failure_reason": "ttft slo"})
    return rec.to_frame()


def test_every_field_documented_with_unit():
    for f in FIELDS:
        assert f.doc and f.unit, f.name
    assert len({f.name for f in FIELDS}) == len(FIELDS)


def test_ttft_tpot_definitions():
    df = _trace()
    assert ttft_s(df).tolist()[:3] == pytest.approx([0.5, 3.0, 0.2])
    tpot = tpot_s(df).tolist()
    assert tpot[0] == pytest.approx(0.1) and math.isnan(tpot[1]) and tpot[2] == pytest.approx(0.2)
    assert tpot_s(df, "distserve").tolist()[0] == pytest.approx(1.0 / 11)
    with pytest.raises(ValueError, match="'mean'"):
        tpot_s(df, "mean")


def test_attainment_counts_rejected_as_miss():
    att = attainment(_trace(), Slo(ttft_s=1.0, tpot_s=0.15))
    assert att == {"ttft": 0.5, "tpot": 0.5, "both": 0.25}


def test_summary_and_mooncake_tbt():
    s = summarize(_trace(), Slo(ttft_s=5.0, tpot_s=0.5))
    assert (s["requests"], s["finished"], s["rejected"], s["failed"]) == (4, 3, 1, 0)
    assert s["ttft_s"]["p50"] == pytest.approx(0.5)
    assert s["attainment"]["both"] == 0.75 and s["meets_slo_target"] is False
    assert tbt_mooncake_s([0.0, 0.1, 0.2, 1.2, 1.3]) == pytest.approx(1.0)


def test_write_read_round_trip_and_summary(tmp_path):
    df = _trace()
    path = write_trace(df, tmp_path / "trace.parquet", {"requests": 4})
    back = read_trace(path)
    assert back["request_id"].tolist() == [0, 1, 2, 3]
    assert back["status"].tolist() == ["finished"] * 3 + ["rejected"]
    assert json.loads((tmp_path / "trace.summary.json").read_text()) == {"requests": 4}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.parquet", "trace.summary.json"]


def test_recorder_rejects_duplicates_and_bad_status():
    rec = TraceRecorder()
    rec.add(_row(0, 0, 1, 2, 3))
    with pytest.raises(ValueError, match="request_id 0 recorded twice"):
        rec.add(_row(0, 0, 1, 2, 3))
    with pytest.raises(ValueError, match="'lost'"):
        rec.add(_row(1, 0, 1, 2, 3, status="lost"))


def test_read_trace_rejects_other_files(tmp_path):
    bad = tmp_path / "x.parquet"
    bad.write_text("not parquet")
    with pytest.raises(TraceError, match="not a readable parquet"):
        read_trace(bad)
    import pandas as pd

    pd.DataFrame({"request_id": [1]}).to_parquet(tmp_path / "y.parquet")
    with pytest.raises(TraceError, match="missing trace fields"):
        read_trace(tmp_path / "y.parquet")


def test_ttft_at_prefill_end_and_percentile_criterion():
    df = _trace()
    df.loc[0, "prefill_end_s"] = 0.3  # request 0's first token came 0.2 s after its prefill
    assert ttft_s(df, "prefill_end").tolist()[:3] == pytest.approx([0.3, 3.0, 0.2])
    # TTFTs (rejected = inf) 0.3, 3.0, 0.2, inf: the 0.5-quantile (linear) is 1.65
    assert meets_target(df, Slo(1.7, 1.0, 0.5, "prefill_end", "percentiles"))
    assert not meets_target(df, Slo(1.65, 1.0, 0.5, "prefill_end", "percentiles"))  # strictly below
    assert not meets_target(df, Slo(1.7, 1.0, 0.5, "standard", "percentiles"))  # 0.5, 3, 0.2, inf -> 1.75
    summary = summarize(df, Slo(1.7, 1.0, 0.5, "prefill_end", "percentiles"))
    assert summary["meets_slo_target"] and summary["attainment"]["both"] == 0.5


def test_mooncake_tbt_is_computed_and_usable_as_slo():
    df = _trace()
    df["token_times_s"] = [[0.5, 0.6, 0.7, 1.5], None, [2.2] + [2.2 + 0.2 * k for k in range(1, 21)], None]
    tbt = tpot_s(df, "tbt_mooncake").tolist()
    assert tbt[0] == pytest.approx(0.8) and math.isnan(tbt[1]) and tbt[2] == pytest.approx(0.2)
    summary = summarize(df, Slo(ttft_s=1.0, tpot_s=0.5), "tbt_mooncake")
    assert summary["attainment"]["tpot"] == 0.5  # request 0 (TBT 0.8) misses, 1 has none, 3 rejected
    assert summary["tbt_mooncake_s"]["p50"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="record_token_times"):
        tpot_s(_trace(), "tbt_mooncake")
