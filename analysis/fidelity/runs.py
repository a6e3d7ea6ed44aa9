"""Finished `pdsim fidelity` runs as inputs: re-simulating one (`--from-run`) and taking the
slowdown of another run's served steps (`--scale-from`).

A run folder's fidelity.json records its options (shape, workload overrides, model), the files
of its real side (engine.json with the probe, profile.csv, requests.csv, served_steps.csv, the
real trace) and the slowdown its served forwards showed against the profile.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.fidelity.options import FidelityOptions
from analysis.fidelity.real import ServeShape

MEASURED_FILES = ("engine_json", "profile_csv", "requests_csv", "served_steps_csv", "real_trace")


@dataclass
class Measured:
    """The real side of one loop: the replay's trace and the served steps, with the files the
    simulation reads (engine_json, profile_csv, requests_csv, served_steps_csv, real_trace)."""

    real: pd.DataFrame
    real_summary: dict[str, Any]
    steps: pd.DataFrame
    paths: dict[str, Path]


def load_measured(run_dir: Path) -> Measured:
    """The real side of a finished `pdsim fidelity` run folder (its fidelity.json names the files)."""
    from pdsim.trace import read_trace

    recorded = _recorded(run_dir)
    paths = {k: Path(recorded["paths"][k]) for k in MEASURED_FILES}
    for name, path in paths.items():
        if not path.is_file():
            raise FileNotFoundError(f"{run_dir / 'fidelity.json'}: paths.{name} {path} does not exist")
    summary_path = paths["real_trace"].with_name(paths["real_trace"].stem + ".summary.json")
    real_summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    steps = pd.read_csv(paths["served_steps_csv"])
    return Measured(read_trace(paths["real_trace"]), real_summary, steps, paths)


def recorded_options(options: FidelityOptions) -> FidelityOptions:
    """`options` with the shape, workload and model of the run it re-simulates (options.from_run)."""
    if options.from_run is None:
        raise ValueError("recorded_options: options.from_run is not set")
    recorded = _recorded(options.from_run)["options"]
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in recorded["shape"].items()}
    shape = ServeShape(**fields)
    return replace(options, shape=shape, workload_overrides=tuple(recorded["workload_overrides"]),
                   sim_model=recorded["sim_model"])


def _recorded(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / "fidelity.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not a finished `pdsim fidelity` run (no fidelity.json)")
    return json.loads(path.read_text())


def other_run_steps(run_dir: Path, profile_csv: Path) -> pd.DataFrame:
    """The served steps of the finished run `run_dir`, which must share `profile_csv` (a slowdown
    is relative to the profile it is measured against)."""
    other = _recorded(run_dir)
    theirs = Path(other["paths"]["profile_csv"])
    if not theirs.is_file() or theirs.read_bytes() != Path(profile_csv).read_bytes():
        raise ValueError(f"{Path(run_dir) / 'fidelity.json'}: paths.profile_csv {theirs} is not the profile this run "
                         f"is simulated with ({profile_csv}); a slowdown is relative to its profile")
    return pd.read_csv(other["paths"]["served_steps_csv"])
