"""Loaders read every trace in ../shared/data/traces; counts from BRIEF.md §5, means as golden values."""

from __future__ import annotations

import numpy as np
import pytest

from pdsim.config import ScenarioConfig
from pdsim.workload import build_workload

# (scenario source, file, requests (BRIEF.md), mean input tokens, mean output tokens, span s)
TRACES = [
    ("mooncake", "mooncake_conversation_trace.jsonl", 12031, 12035.06, 342.62, 3536.999),
    ("mooncake", "mooncake_synthetic_trace.jsonl", 3993, 15325.48, 149.12, 1022.025),
    ("azure", "AzureLLMInferenceTrace_code_2023.csv", 8819, 2047.85, 27.88, 3435.948056),
    ("azure", "AzureLLMInferenceTrace_conv_2023.csv", 19366, 1154.70, 211.13, 3501.721937),
]


@pytest.mark.parametrize(("source", "name", "count", "mean_in", "mean_out", "span_s"), TRACES)
def test_trace_counts_and_means(data_dir, source, name, count, mean_in, mean_out, span_s):
    wl = build_workload(ScenarioConfig(name=name, source=source, path=f"traces/{name}", num_requests=0))
    assert len(wl) == count
    assert wl.input_tokens.mean() == pytest.approx(mean_in, abs=0.01)
    assert wl.output_tokens.mean() == pytest.approx(mean_out, abs=0.01)
    assert wl.duration_s == pytest.approx(span_s, abs=1e-6)
    assert wl.arrival_s[0] == 0.0 and np.all(np.diff(wl.arrival_s) >= 0)


def test_mooncake_hash_ids_cover_prompt_in_512_token_blocks(data_dir):
    wl = build_workload(ScenarioConfig(name="mc", source="mooncake", path="traces/mooncake_conversation_trace.jsonl", num_requests=0))
    blocks = np.diff(wl.hash_offsets)
    assert np.array_equal(blocks, -(-wl.input_tokens // 512))
    first = next(iter(wl))
    assert first.hash_ids[:3] == (0, 1, 2) and first.input_tokens == 6758 and first.block_tokens == 512


@pytest.mark.parametrize(
    ("name", "count", "mean_in", "mean_out"),
    [
        ("sarathi_sharegpt_8k_filtered_lengths_llama2tok.csv", 30731, 2340.03, 438.71),
        ("vidur_arxiv_summarization_lengths_llama2tok.csv", 28257, 2588.08, 291.43),
    ],
)
def test_lengths_csv_samples_rows_of_the_file(data_dir, name, count, mean_in, mean_out):
    from pdsim.workload.loaders import load_lengths_csv

    inputs, outputs = load_lengths_csv(data_dir / "traces" / name)
    assert inputs.size == count
    assert inputs.mean() == pytest.approx(mean_in, abs=0.01)
    assert outputs.mean() == pytest.approx(mean_out, abs=0.01)
    wl = build_workload(ScenarioConfig(name="s", source="lengths_csv", path=f"traces/{name}", num_requests=20000, rate_rps=5))
    assert len(wl) == 20000
    assert wl.input_tokens.mean() == pytest.approx(mean_in, rel=0.03)
    assert wl.mean_rate_rps() == pytest.approx(5, rel=0.03)


def test_window_limit_and_speedup(data_dir):
    base = dict(name="mc", source="mooncake", path="traces/mooncake_conversation_trace.jsonl")
    full = build_workload(ScenarioConfig(**base, num_requests=0))
    win = build_workload(ScenarioConfig(**base, num_requests=0, start_s=600, end_s=1200, speedup=2))
    inside = (full.arrival_s >= 600) & (full.arrival_s < 1200)
    assert len(win) == int(inside.sum())
    assert win.duration_s == pytest.approx((full.arrival_s[inside][-1] - full.arrival_s[inside][0]) / 2)
    assert np.array_equal(win.input_tokens, full.input_tokens[inside])
    first = int(np.flatnonzero(inside)[0])
    lo, hi = full.hash_offsets[first], full.hash_offsets[first + 1]
    assert next(iter(win)).hash_ids == tuple(full.hash_values[lo:hi].tolist())
    limited = build_workload(ScenarioConfig(**base, num_requests=100, target_rate_rps=10.0))
    assert len(limited) == 100
    assert limited.mean_rate_rps() == pytest.approx(10.0)


def test_iteration_across_chunks_yields_each_request_with_its_own_hashes(monkeypatch):
    # iteration turns columns into lists a chunk at a time: every chunk size gives the same requests
    from pdsim.workload import request as request_module
    from pdsim.workload.request import Request, make_workload

    hashes = [np.array([1, 2, 3]), np.array([], dtype=np.int64), np.array([1, 2, 9]), np.array([7])]
    wl = make_workload("t", np.array([0.0, 0.5, 1.25, 2.0]), np.array([30, 5, 31, 8]), np.array([2, 1, 4, 3]),
                       session_id=np.array([0, -1, 0, 4]), hash_lists=hashes, block_tokens=16)
    expected = [Request(0, 0.0, 30, 2, (1, 2, 3), 16, 0), Request(1, 0.5, 5, 1, (), 16, -1),
                Request(2, 1.25, 31, 4, (1, 2, 9), 16, 0), Request(3, 2.0, 8, 3, (7,), 16, 4)]
    for chunk in (1, 3, 4, 4096):
        monkeypatch.setattr(request_module, "ITER_CHUNK_REQUESTS", chunk)
        got = list(wl)
        assert got == expected
        assert all(type(h) is int for r in got for h in r.hash_ids) and all(type(r.arrival_s) is float for r in got)
