"""`pdsim frontier` end to end in a subprocess: a tiny multirun (joblib and submitit's local
executor), its outputs, its help, and bad input that writes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

TINY = ["model=llama3_8b", "perf=linear", "frontier.gpus=2", "frontier.max_concurrency=4",
        "frontier.min_counted_requests=8", "frontier.rounds=2", "scenario.input.value=128", "scenario.output.value=32"]
LAUNCHERS = {
    "joblib": ["hydra.launcher.n_jobs=2"],
    "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"],
}


def _pdsim(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pdsim.cli", "frontier", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_tiny_frontier_writes_points_frontier_best_chart_and_page(launcher: str, tmp_path: Path) -> None:
    sweep = tmp_path / "fr"
    proc = _pdsim(*TINY, *LAUNCHERS[launcher], f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # 2 GPUs: colocated 2xTP1, 1xTP2 and PD 1xTP1 + 1xTP1
    assert "3 deployments of 2 x h100 for llama3_8b" in proc.stdout
    points = pd.read_csv(sweep / "points.csv")
    assert set(points["deployment"]) == {"co-tp1x2", "co-tp2x1", "pd-tp1x1-tp1x1"}
    assert (points["scenario"] == "frontier_1k1k").all() and (points["gpus"] == 2).all()
    assert set(points["family"]) == {"colocated", "disaggregated"} and points["on_frontier"].any()
    assert points["steady_state_reached"].all() and (points["requests"] >= 2 * points["concurrency"]).all()
    sized = points["concurrency"] + (2 * points["concurrency"]).clip(lower=8)  # warm-up + max(rounds x C, 8)
    assert (points["point_requests"] == sized).all()
    best = json.loads((sweep / "best.json").read_text())
    assert best["model"] == "llama3_8b" and best["target_tokens_per_s_per_user"] == 50.0
    assert (sweep / "frontier.csv").is_file() and (sweep / "frontier.png").stat().st_size > 10_000
    assert "<img" in (sweep / "frontier.html").read_text()
    if launcher == "joblib":
        assert "[frontier] 3/3 deployments done" in proc.stdout and "best overall" in proc.stdout


def test_help_and_bad_input(tmp_path: Path) -> None:
    proc = _pdsim("--help", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("pdsim frontier: "), proc.stdout[:200]
    assert "frontier:" in proc.stdout and "target_tokens_per_s_per_user" in proc.stdout
    for bad, message in (("frontier.gpus=oops", "frontier.gpus"),
                         ("frontier.deployments=[co-tp4]", "deployment label 'co-tp4'"),
                         ("frontier.gpus=2 frontier.deployments=[co-tp1x4]", "needs 4 GPUs, over frontier.gpus=2"),
                         ("frontier.gpus=1 model=llama3_70b", "no TP option in [1, 2, 4, 8] fits llama3_70b"),
                         ("frontier.rounds=1", "rounds=1"),
                         ("frontier.modes=[colo]", "unknown mode")):
        proc = _pdsim(*bad.split(), cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, \
            proc.stderr
    assert not (tmp_path / "multirun").exists()
