"""A 4-point `pdsim sweep` under the joblib launcher and submitit's local executor (Slurm's stand-in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

TINY = ["scenario=rag", "scenario.num_requests=30", "perf=linear", "search.max_probes=4", "progress=false",
        "cluster.prefill=1,2", "cluster.decode=1,2"]
LAUNCHERS = {
    "joblib": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    "submitit_local": ["hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5"],
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_four_point_sweep_gathers_results(launcher: str, tmp_path: Path) -> None:
    sweep_dir = tmp_path / "sweep"
    argv = [sys.executable, "-m", "pdsim.cli", "sweep", *TINY, *LAUNCHERS[launcher], f"hydra.sweep.dir={sweep_dir}"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    results = pd.read_parquet(sweep_dir / "results.parquet")
    assert len(results) == 4
    assert sorted(zip(results["prefill"], results["decode"], strict=True)) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert list(results["gpus"]) == [p + d for p, d in zip(results["prefill"], results["decode"], strict=True)]
    assert (results["goodput_rps"] > 0).all()
    assert (sweep_dir / "results.csv").is_file()
    assert "best configuration per GPU budget" in done.stdout
