"""Bad trace input: one clear error naming file, field and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdsim.config import ScenarioConfig
from pdsim.workload import WorkloadError, build_workload


def _load(path: Path, source: str):
    return build_workload(ScenarioConfig(name="bad", source=source, path=str(path), num_requests=0))


CASES = [
    ("csv", "arrival_s,input_tokens,output_tokens\n0,10,5\n1,-3,5\n", "input_tokens", "-3"),
    ("csv", "arrival_s,input_tokens,output_tokens\n0,10,5\n2,10,5\n1,10,5\n", "arrival_s", "row 3"),
    ("csv", "arrival,input_tokens,output_tokens\n0,10,5\n", "arrival_s", "column missing"),
    ("csv", "arrival_s,input_tokens,output_tokens\n0,10,5\nsoon,10,5\n", "arrival_s", "soon"),
    ("csv", "arrival_s,input_tokens,output_tokens\n", "path", "no rows"),
    ("csv", "", "path", "empty"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                 '{"timestamp": 5, "input_length": 10, "output_length": 0, "hash_ids": [0]}\n', "output_length", "row 2"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 2}\n', "hash_ids", "column missing"),
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\nnot json\n', "path", "cannot parse"),
    ("mooncake", '{"timestamp": 9, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                 '{"timestamp": 3, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n', "timestamp", "not monotonic"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,10,2\nyesterday,10,2\n", "TIMESTAMP", "yesterday"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,2\n2023-11-16 18:17:01.00,10,2\n", "TIMESTAMP", "not monotonic"),
    ("azure", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.97,10\n", "GeneratedTokens", "column missing"),
]


@pytest.mark.parametrize(("source", "text", "field", "needle"), CASES)
def test_bad_trace_names_file_field_value(tmp_path, source, text, field, needle):
    path = tmp_path / ("t.jsonl" if source == "mooncake" else "t.csv")
    path.write_text(text)
    with pytest.raises(WorkloadError) as info:
        _load(path, source)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert f"field {field!r}" in message
    assert needle in message


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match=r"nope\.csv: field 'path': trace file not found"):
        _load(tmp_path / "nope.csv", "csv")


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"source": "parquet", "path": "x"}, "source"),
        ({"rate_rps": 0.0}, "rate_rps"),
        ({"arrival": "bursty"}, "arrival"),
        ({"num_requests": 0}, "num_requests"),
    ],
)
def test_bad_scenario_settings(overrides, field):
    with pytest.raises(WorkloadError, match=f"field '{field}'"):
        build_workload(ScenarioConfig(name="bad", **overrides))


def test_plain_csv_with_sessions(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_text("arrival_s,input_tokens,output_tokens,session_id\n1.5,100,10,7\n2.0,200,20,7\n")
    wl = _load(path, "csv")
    reqs = list(wl)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.session_id) for r in reqs] == [
        (0.0, 100, 10, 7),
        (0.5, 200, 20, 7),
    ]
