"""The GPU check (benchmarks/gpu/check.py) dry-run on CPU at the tiny shape, so it keeps working
between GPU runs: the same entry script, setup, child processes, tables and exit status."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("zmq")

REPO = Path(__file__).resolve().parents[2]
CHECK = REPO / "benchmarks" / "gpu" / "check.py"


def dry_run(out: Path, *only: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(CHECK), "--device", "cpu", "--shape", "tiny", "--out", str(out), "--budget-s", "240",
           "--only", *only]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_kernels_and_profile_dry_run(tmp_path: Path) -> None:
    done = dry_run(tmp_path, "kernels", "profile")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    kernels = rows(tmp_path / "kernels.csv")
    assert {r["case"] for r in kernels if r["check"] == "attention"} == {
        "prefill_fresh", "prefill_chunked", "decode_ragged", "mixed"}
    assert all(r["ok"] == "True" for r in kernels)
    assert [r["note"] for r in kernels if r["check"] == "greedy"] == ["equal"]
    compared = rows(tmp_path / "profile_vs_measured.csv")
    assert {r["kind"] for r in compared} == {"prefill", "decode"}
    assert all(float(r["pdreal_s"]) > 0 and float(r["measured_s"]) > 0 for r in compared)
    assert (tmp_path / "profile.csv").read_text().startswith("kind,num_seqs,new_tokens,context_tokens,latency_s")
    summary = (tmp_path / "summary.md").read_text()
    assert "| kernels | ok |" in summary and "| profile | ok |" in summary
    assert len(list(tmp_path.iterdir())) <= 8


@pytest.mark.real
def test_pd_fidelity_dry_run(tmp_path: Path) -> None:
    pytest.importorskip("mooncake.engine")
    done = dry_run(tmp_path, "pd")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "4/4 requests finished" in (tmp_path / "summary.md").read_text()
    assert "Predicted (the result: pdsim told only the profile and the idle probes" in (tmp_path / "fidelity.md").read_text()
    assert (tmp_path / "engine.json").is_file()
    steps = rows(tmp_path / "served_steps.csv")
    assert {r["kind"] for r in steps} == {"prefill", "decode"}
    assert all(float(r["latency_s"]) > 0 for r in steps)


def test_cut_off_run_reports_the_checks_before(tmp_path: Path) -> None:
    """A budget too small for anything: every check is reported as not started, exit 2 (not 0)."""
    cmd = [sys.executable, str(CHECK), "--device", "cpu", "--shape", "tiny", "--out", str(tmp_path), "--budget-s", "1"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("not started: the budget was spent") == 3
