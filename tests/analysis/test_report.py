"""The report files: CLI comparison and run reports, embedded plots, errors that write nothing."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.load import labels_from_paths
from analysis.report import main, write_run_report
from pdsim.metrics import Slo, summarize
from pdsim.trace import TraceError, write_trace

IMG = re.compile(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)">')
COMPARISON_FIGURES = {
    "latency_cdf",
    "latency_scatter",
    "error_distribution",
    "stage_means",
    "stage_cdf",
    "timeline",
    "timeseries",
}
RUN_FIGURES = {
    "latency_cdf",
    "attainment_vs_slo_scale",
    "stage_means",
    "stage_cdf",
    "timeline",
    "utilisation",
    "timeseries",
}


def _write_pair(tmp_path: Path, trace_factory, timeseries_factory) -> tuple[Path, Path]:
    real = trace_factory(seed=1)
    sim = real.copy()
    sim["prefill_start_s"] += 0.05
    sim["prefill_end_s"] += 0.05
    sim_path = write_trace(sim, tmp_path / "sim.parquet")
    real_path = write_trace(real, tmp_path / "real.parquet", summarize(real, Slo(0.5, 0.05)))
    timeseries_factory(sim, 1).to_parquet(tmp_path / "sim.timeseries.parquet")
    timeseries_factory(real, 2).to_parquet(tmp_path / "real.timeseries.parquet")
    return sim_path, real_path


def _check_report(out: Path, expected: set[str]) -> str:
    html = (out / "report.html").read_text()
    images = IMG.findall(html)
    assert {p.stem for p in (out / "figures").glob("*.png")} == expected
    assert len(images) == len(expected)
    for title, data in images:
        assert base64.b64decode(data).startswith(b"\x89PNG"), title
    markdown = (out / "summary.md").read_text()
    for name in expected:
        assert f"figures/{name}.png" in markdown
    assert "first_token_s - arrival_s" in html  # definitions are stated
    return html


def test_comparison_report_embeds_every_plot(
    tmp_path: Path, trace_factory, timeseries_factory, capsys
) -> None:
    sim, real = _write_pair(tmp_path, trace_factory, timeseries_factory)
    out = tmp_path / "report"
    assert main([str(sim), str(real), "-o", str(out)]) == 0
    html = _check_report(out, COMPARISON_FIGURES)
    titles = [t for t, _ in IMG.findall(html)]
    assert "Per request: sim vs real" in titles and "Queue lengths and KV use over time" in titles
    assert "TTFT &lt;= 0.5 s" in html  # SLO taken from real's summary.json
    data = json.loads((out / "report.json").read_text())
    assert data["alignment"] == "request_id"
    assert "prefill waiting queue" in data["findings"][0]
    assert "report written" in capsys.readouterr().out


def test_run_report_from_cli_and_library(tmp_path: Path, trace_factory, timeseries_factory) -> None:
    _, real = _write_pair(tmp_path, trace_factory, timeseries_factory)
    assert main([str(real), "-o", str(tmp_path / "cli"), "--slo-ttft-s", "1.0"]) == 0
    _check_report(tmp_path / "cli", RUN_FIGURES)
    trace = pd.read_parquet(real)
    path = write_run_report(trace, summarize(trace, Slo(0.5, 0.05)), None, tmp_path / "lib")
    assert path == tmp_path / "lib" / "report.html"
    _check_report(tmp_path / "lib", RUN_FIGURES - {"utilisation", "timeseries"})


def test_report_into_existing_directory_keeps_other_files(tmp_path: Path, trace_factory) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "trace.parquet").write_text("kept")
    trace = trace_factory(seed=2)
    write_run_report(trace, summarize(trace, Slo(0.5, 0.05)), None, out)
    assert (out / "trace.parquet").read_text() == "kept"
    assert (out / "report.html").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def _bad_inputs(tmp_path: Path, trace: pd.DataFrame) -> dict[str, tuple[Path, str]]:
    text = tmp_path / "text.parquet"
    text.write_text("request_id,arrival_s\n1,0.0\n")
    missing = tmp_path / "missing.parquet"
    pq.write_table(pa.Table.from_pandas(trace.drop(columns=["first_token_s"])), missing)
    wrong_type = tmp_path / "wrong_type.parquet"
    pq.write_table(
        pa.Table.from_pandas(trace.assign(arrival_s=trace["arrival_s"].astype(str))), wrong_type
    )
    bad_status = tmp_path / "bad_status.parquet"
    pq.write_table(pa.Table.from_pandas(trace.assign(status="done")), bad_status)
    return {
        "not parquet": (text, "not a readable parquet"),
        "missing field": (missing, "first_token_s"),
        "wrong type": (wrong_type, "'arrival_s' has non-numeric value"),
        "bad status": (bad_status, "'status' has invalid value 'done'"),
        "no such file": (tmp_path / "absent.parquet", "not found"),
    }


@pytest.mark.parametrize(
    "case", ["not parquet", "missing field", "wrong type", "bad status", "no such file"]
)
def test_bad_trace_gives_one_line_error_and_writes_nothing(
    tmp_path: Path, trace_factory, capsys, case: str
) -> None:
    good = write_trace(trace_factory(n=40), tmp_path / "good.parquet")
    bad, message = _bad_inputs(tmp_path, trace_factory(n=40))[case]
    before = set(tmp_path.iterdir())
    assert main([str(good), str(bad), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(bad) in err and message in err, err
    assert set(tmp_path.iterdir()) == before


def test_bad_timeseries_and_slo_give_clear_errors(tmp_path: Path, trace_factory, capsys) -> None:
    good = write_trace(trace_factory(n=40), tmp_path / "good.parquet")
    pd.DataFrame({"t": [0.0], "kv_used_fraction": [0.5]}).to_parquet(
        tmp_path / "good.timeseries.parquet"
    )
    assert main([str(good), "-o", str(tmp_path / "out")]) == 2
    assert "'time_s' missing" in capsys.readouterr().err
    (tmp_path / "good.timeseries.parquet").unlink()
    assert main([str(good), "--slo-ttft-s", "-1", "-o", str(tmp_path / "out")]) == 2
    assert "'ttft_s' has invalid value -1.0" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_library_rejects_bad_frame_and_writes_nothing(tmp_path: Path, trace_factory) -> None:
    trace = trace_factory(n=40).drop(columns=["status"])
    with pytest.raises(TraceError, match="missing trace fields"):
        write_run_report(trace, {}, None, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_import_does_not_load_matplotlib() -> None:
    code = (
        "import sys, pdsim, analysis.report, analysis.sweep; "
        "assert 'matplotlib' not in sys.modules, 'matplotlib imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_labels_from_paths_tell_same_named_traces_apart(tmp_path: Path, trace_factory) -> None:
    assert labels_from_paths([Path("a/trace.parquet"), Path("b/trace.parquet")]) == ["a", "b"]
    assert labels_from_paths([Path("o/rag/t1/trace.parquet"), Path("o/rag/t2/trace.parquet")]) == ["t1", "t2"]
    assert labels_from_paths([Path("x/sim.parquet"), Path("x/real.parquet")]) == ["sim", "real"]
    assert labels_from_paths([Path("trace.parquet"), Path("trace.parquet")]) == ["0:trace", "1:trace"]
    for name in ("a", "b"):  # the README's pattern: two runs' trace.parquet
        (tmp_path / name).mkdir()
        trace_factory(seed=3).to_parquet(tmp_path / name / "trace.parquet")
    out = tmp_path / "report"
    assert main([str(tmp_path / "a" / "trace.parquet"), str(tmp_path / "b" / "trace.parquet"), "-o", str(out)]) == 0
    assert "a" in json.loads((out / "report.json").read_text())["labels"]
