"""`pdsim` end to end in a subprocess: a tiny run, and bad input that writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pdsim.trace import read_trace


def _pdsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pdsim.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_tiny_rag_run_writes_trace_summary_and_timeseries(tmp_path):
    out = tmp_path / "run"
    proc = _pdsim("run", "scenario=rag", "scenario.num_requests=40", "progress=false", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "pdsim run: scenario=rag" in proc.stdout and "TTFT s" in proc.stdout
    assert f"outputs: {out}" in proc.stdout
    trace = read_trace(out / "trace.parquet")
    assert len(trace) == 40 and set(trace["status"]) == {"finished"}
    summary = json.loads((out / "trace.summary.json").read_text())
    assert summary["requests"] == 40 and summary["finished"] == 40
    row = json.loads((out / "result.json").read_text())
    assert row["prefill"] == 2 and row["decode"] == 2 and row["gpus"] == 4
    assert not pd.read_parquet(out / "timeseries.parquet").empty


def test_unknown_scenario_one_line_no_output(tmp_path):
    out = tmp_path / "run"
    proc = _pdsim("run", "scenario=nosuch", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "scenario/nosuch" in lines[0] and "available:" in lines[0]
    assert not out.exists()


def test_wrong_type_override_one_line(tmp_path):
    proc = _pdsim("run", "cluster.decode=many", f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "cluster.decode=many" in lines[0]
    assert not (tmp_path / "run").exists()


def test_malformed_trace_one_line_nothing_written(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]}\n'
                   '{"timestamp": 5, "input_length": -4, "output_length": 2, "hash_ids": [0]}\n')
    out = tmp_path / "run"
    proc = _pdsim("run", "scenario=mooncake_synthetic", f"scenario.path={bad}", f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 1
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [f"pdsim: error: {bad}: field 'input_length': length must be a positive integer, got -4 at row 2"]
    assert not out.exists()


def test_top_level_usage(tmp_path):
    assert _pdsim(cwd=tmp_path).returncode == 2
    proc = _pdsim("--help", cwd=tmp_path)
    assert proc.returncode == 0 and "run" in proc.stdout and "report" in proc.stdout
    bad = _pdsim("fly", cwd=tmp_path)
    assert bad.returncode == 2 and "unknown command 'fly'" in bad.stderr


def test_each_subcommand_has_its_own_help(tmp_path):
    for command in ("run", "goodput", "sweep", "plan"):
        proc = _pdsim(command, "--help", cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith(f"pdsim {command}: "), proc.stdout[:200]
        assert "--cfg job" in proc.stdout and "compat: distserve, none" in proc.stdout


def test_a_run_composes_its_config_once(tmp_path, monkeypatch):
    """`pdsim run` composes once (pdsim.hydra_task), not three times, and still writes what
    hydra's own run writes: .hydra/config.yaml, hydra.yaml, overrides.yaml and the job log."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from pdsim.cli import main

    calls: list[list[str]] = []
    original = ConfigLoaderImpl.load_configuration

    def counted(self, config_name, overrides, run_mode, **kwargs):  # noqa: ANN001, ANN202
        calls.append(list(overrides))
        return original(self, config_name, overrides, run_mode, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    out = tmp_path / "run"
    overrides = ["scenario=rag", "scenario.num_requests=20", "progress=false", f"hydra.run.dir={out}"]
    assert main(["run", *overrides]) == 0
    assert calls == [overrides]
    assert read_trace(out / "trace.parquet")["status"].eq("finished").sum() == 20
    assert (out / ".hydra" / "overrides.yaml").read_text().splitlines() == [f"- {o}" for o in overrides[:3]]
    assert "scenario:" in (out / ".hydra" / "config.yaml").read_text()
    assert "run:" in (out / ".hydra" / "hydra.yaml").read_text() and (out / "run.log").exists()


def test_a_config_asking_for_a_multirun_still_sweeps(tmp_path):
    """hydra.mode=MULTIRUN in the composed config (as the sweep presets set it) hands the command to
    @hydra.main, which runs it as a multirun under hydra.sweep.dir."""
    sweep = tmp_path / "sweep"
    proc = _pdsim("run", "hydra.mode=MULTIRUN", "scenario=rag", "scenario.num_requests=10", "progress=false",
                  f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert read_trace(sweep / "0" / "trace.parquet")["status"].eq("finished").sum() == 10


def test_unknown_moe_fallback_table_one_error_line_nothing_written(tmp_path):
    """A perf field naming a table the set lacks: exit 1, one error line naming field and value
    (after the run's log line), no outputs."""
    out = tmp_path / "run"
    proc = _pdsim("run", "scenario=rag", "perf=measured_vllm", "hardware=b200", "model=minimax_m25",
                  "perf.moe_fallback_table=moe_nope", "perf.moe_fallback_below_tokens=128", "progress=false",
                  f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 1
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("pdsim: error")]
    assert errors == ["pdsim: error: perf: field 'moe_fallback_table' has unknown value 'moe_nope': table set "
                      "b200_sxm_vllm_0.24.0 has no fused-MoE table of that name"]
    assert not (out / "trace.parquet").exists() and not (out / "result.json").exists()


def test_unknown_prefill_dp_dispatch_one_error_line_nothing_written(tmp_path):
    out = tmp_path / "run"
    proc = _pdsim("run", "scenario=rag", "cluster.prefill_dp_dispatch=roomy", "progress=false",
                  f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 2  # a config value check, before the run starts
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == ["pdsim: error: cluster: field 'prefill_dp_dispatch' has unknown value 'roomy' "
                     "(choose from ('balanced', 'bootstrap_room'))"]
    assert not out.exists()


@pytest.mark.parametrize(("key", "field"), [("cluster.decode_moe_table_set", "cluster: field 'decode_moe_table_set'"),
                                           ("perf.moe_table_set", "perf: field 'moe_table_set'")])
def test_unknown_moe_table_set_one_error_line_nothing_written(tmp_path, key, field):
    from pdsim.perf.optables import sets_of_system

    out = tmp_path / "run"
    proc = _pdsim("run", "scenario=rag", f"{key}=b200_sxm_sglang_0.5.14", "progress=false",
                  f"hydra.run.dir={out}", cwd=tmp_path)
    assert proc.returncode == 2  # a B200 set for the default H100 cluster: refused before the run
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines == [f"pdsim: error: {field} has unknown value "
                     f"'b200_sxm_sglang_0.5.14' for hardware h100 (its table sets: {sets_of_system('h100_sxm')})"]
    assert not out.exists()
