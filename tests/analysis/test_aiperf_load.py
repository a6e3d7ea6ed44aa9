"""AIPerf's per-request export (profile_export.jsonl) read as a trace: a hand-made file in the
shape AIPerf 0.13.0 writes (field names from a real export against pdreal serve), the mapping of
each field, warm-up records left out, failures kept, one-line errors, and `pdsim report` taking
it beside a parquet trace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.aiperf import read_aiperf_export
from analysis.load import load_trace
from analysis.report import main
from pdsim.trace import TraceError, write_trace

T0 = 1_795_908_562_284_842_396  # ns, as AIPerf's wall-clock stamps


def record(start_ms: float, ttft_ms: float, gaps_ms: list[float], phase: str = "profiling",
           error: dict | None = None) -> dict:
    start = T0 + int(start_ms * 1e6)
    latency = ttft_ms + sum(gaps_ms)
    metrics = {"time_to_first_token": ttft_ms, "request_latency": latency, "inter_chunk_latency": gaps_ms,
               "input_sequence_length": 64, "output_sequence_length": len(gaps_ms) + 1,
               "usage_prompt_cache_read_tokens": 16, "inter_token_latency": sum(gaps_ms) / max(len(gaps_ms), 1)}
    units = {"input_sequence_length": "tokens", "output_sequence_length": "tokens",
             "usage_prompt_cache_read_tokens": "tokens"}
    out = {"metadata": {"session_num": 1, "x_request_id": "r", "credit_issued_ns": start - 5000, "request_start_ns": start,
                        "request_ack_ns": start + 1000, "request_end_ns": start + int((latency + 2) * 1e6),
                        "benchmark_phase": phase, "was_cancelled": False},
           "metrics": {k: {"value": v, "unit": units.get(k, "ms")} for k, v in metrics.items()}}
    if error is not None:
        out["metrics"] = {"input_sequence_length": {"value": 64, "unit": "tokens"}}
        out["error"] = error
    return out


def write_export(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_records_map_to_trace_fields(tmp_path: Path) -> None:
    path = write_export(tmp_path / "profile_export.jsonl", [
        record(500.0, 100.0, [20.0, 30.0]),  # sent second
        record(0.0, 250.0, [10.0]),
        record(-900.0, 50.0, [5.0], phase="warmup"),  # left out: not in AIPerf's statistics either
        record(700.0, 0.0, [], error={"code": 500, "type": "ServerError", "message": "boom"}),
    ])
    df = read_aiperf_export(path)
    assert list(df["request_id"]) == [0, 1, 2] and list(df["status"]) == ["finished", "finished", "failed"]
    first, second, failed = (df.iloc[i] for i in range(3))
    assert first["arrival_s"] == 0.0 and second["arrival_s"] == pytest.approx(0.5)
    assert second["first_token_s"] == pytest.approx(0.6) and second["last_token_s"] == pytest.approx(0.65)
    assert np.allclose(second["token_times_s"], [0.6, 0.62, 0.65])
    assert second["finish_s"] == pytest.approx(0.652) and second["output_tokens"] == 3
    assert (first["input_tokens"], first["cached_prefix_tokens"]) == (64, 16)
    assert "ServerError 500: boom" in failed["failure_reason"] and math.isnan(failed["last_token_s"])
    assert len(read_aiperf_export(path, keep_warmup=True)) == 4


@pytest.mark.parametrize(("text", "needle"), [
    ("not json\n", "profile_export.jsonl:1: not JSON"),
    ('{"metrics": {}}\n', "no 'metadata' object"),
    ('{"metadata": {"request_start_ns": "x"}}\n', "request_start_ns' must be an integer"),
    ('{"metadata": {"benchmark_phase": "warmup"}}\n', "no profiling records"),
])
def test_bad_exports_give_one_line_errors(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "profile_export.jsonl"
    path.write_text(text)
    with pytest.raises(TraceError, match=needle):
        read_aiperf_export(path)


def test_report_compares_an_aiperf_export_with_a_trace(tmp_path: Path) -> None:
    records = [record(i * 300.0, 100.0 + 10 * i, [20.0] * 7) for i in range(8)]
    (tmp_path / "aiperf").mkdir()
    aiperf = write_export(tmp_path / "aiperf" / "profile_export.jsonl", records)
    loaded = load_trace(aiperf)
    replay = tmp_path / "replay"
    replay.mkdir()
    write_trace(loaded.frame, replay / "trace.parquet")
    assert main([str(aiperf), str(replay / "trace.parquet"), "-o", str(tmp_path / "report")]) == 0
    assert any((tmp_path / "report").iterdir())
