"""Re-simulating a finished fidelity run (`--from-run`) and taking the served slowdown of another
run (`--scale-from`), on a run folder written by hand: no torch, no serving.

The "real" trace of the fake run is pdsim's own profile-only simulation of its requests, and its
served decode steps are the profiled table's latency x 1.5 (prefill x 1.0), so the profile-only
comparison is exact and the measured slowdown is known.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pytest

from analysis.fidelity.facts import EngineFacts
from analysis.fidelity.loop import FidelityOptions, run_fidelity, simulate_requests
from analysis.fidelity.real import ServeShape
from pdsim.trace import write_trace

PROFILE = ("kind,num_seqs,new_tokens,context_tokens,latency_s\nprefill,1,16,0,0.1\nprefill,1,64,0,0.3\n"
           "decode,1,1,64,0.05\ndecode,1,1,256,0.07\ndecode,4,4,256,0.08\ndecode,4,4,1024,0.1\n")
STEPS = pd.DataFrame({"end_s": [1.0, 2.0, 3.0, 4.0], "kind": ["prefill", "prefill", "decode", "decode"],
                      "num_seqs": [1, 1, 1, 4], "new_tokens": [16, 64, 1, 4], "context_tokens": [0, 0, 64, 1024],
                      "latency_s": [0.1, 0.3, 0.075, 0.15]})
WORKLOAD = ("scenario=chat", "slo.ttft_s=0.5", "slo.tpot_s=0.2")


def _fake_run(engine_json: Callable[..., Path], run_dir: Path, profile: str = PROFILE,
              steps: pd.DataFrame = STEPS) -> Path:
    """A finished run folder; its engine.json is the shared fake one without step overheads."""
    run_dir.mkdir(parents=True)
    paths = {"engine_json": engine_json(run_dir, prefill_step_overhead_s=0.0, decode_step_overhead_s=0.0),
             "profile_csv": run_dir / "profile.csv", "requests_csv": run_dir / "requests.csv",
             "served_steps_csv": run_dir / "served_steps.csv"}
    paths["profile_csv"].write_text(profile)
    pd.DataFrame({"request_id": range(8), "arrival_s": [0.4 * i for i in range(8)],
                  "input_tokens": [16, 40, 64, 30, 20, 50, 64, 16],
                  "output_tokens": [4, 8, 6, 5, 7, 3, 4, 6]}).to_csv(paths["requests_csv"], index=False)
    steps.to_csv(paths["served_steps_csv"], index=False)
    options = FidelityOptions(run_dir, ServeShape(1, 1), WORKLOAD)
    real, _, _ = simulate_requests(paths["requests_csv"], EngineFacts.load(paths["engine_json"]),
                                   paths["profile_csv"], options, list(WORKLOAD[1:]))
    (run_dir / "real").mkdir()
    paths["real_trace"] = write_trace(real, run_dir / "real" / "trace.parquet", {"replay": {}})
    recorded = {"options": {**asdict(options), "out_dir": str(run_dir)},
                "paths": {k: str(v) for k, v in paths.items()},
                "served_slowdown_vs_profile": {"prefill": 1.0, "decode": 1.5}}
    (run_dir / "fidelity.json").write_text(json.dumps(recorded, default=str))
    return run_dir


def test_from_run_resimulates_without_measuring(engine_json: Callable[..., Path], tmp_path: Path) -> None:
    run = _fake_run(engine_json, tmp_path / "run")
    result = run_fidelity(FidelityOptions(tmp_path / "again", from_run=run, report=False))
    assert set(result.timings_s) == {"simulate", "report"}  # nothing profiled, served or replayed
    assert result.shape_name == "1P1D" and result.slowdown_source == "this run's served steps"
    assert result.slowdown == {"prefill": pytest.approx(1.0), "decode": pytest.approx(1.5)}
    assert (result.table["rel_err"].fillna(0) == 0).all()  # real is the profile-only sim: the headline
    assert (result.slo.ttft_s, result.slo.tpot_s) == (0.5, 0.2)  # the recorded SLO
    calibrated = result.calibrated_table.set_index(["metric", "stat"])
    assert calibrated.loc[("tpot_s", "p50"), "rel_err"] > 0.3  # decode x 1.5
    assert list(result.scan["scale"]) == [0.3, 0.4, 0.5, 0.6, 0.75, 1.0]
    md = result.paths["fidelity_md"].read_text()
    assert md.startswith("# pdsim fidelity: 1P1D, 8 requests (8 finished)")
    assert md.index("Calibrated (diagnostic") < md.index("tighter SLOs") < md.index("Predicted (the result: pdsim told only the profile and the idle probes")
    saved = json.loads(result.paths["fidelity_json"].read_text())
    assert saved["options"]["from_run"] == str(run) and saved["paths"]["real_trace"] == str(run / "real" / "trace.parquet")


def test_scale_from_takes_the_other_runs_slowdown(engine_json: Callable[..., Path], tmp_path: Path) -> None:
    slower = STEPS.assign(latency_s=STEPS["latency_s"] * [1.25, 1.25, 2 / 1.5, 2 / 1.5])
    run, other = _fake_run(engine_json, tmp_path / "run"), _fake_run(engine_json, tmp_path / "other", steps=slower)
    result = run_fidelity(FidelityOptions(tmp_path / "out", from_run=run, scale_from=other, report=False))
    # the other run's served steps against this run's profile: prefill 1.25x, decode 2x
    assert result.slowdown == {"prefill": pytest.approx(1.25), "decode": pytest.approx(2.0)}
    assert result.slowdown_source == f"served steps of {other}"
    used = dict(o.split("=", 1) for o in result.calibrated_command.split()[2:])
    assert float(used["perf.decode_step_scale"]) == pytest.approx(2.0)


def test_scale_from_a_run_with_another_profile_is_refused(engine_json: Callable[..., Path], tmp_path: Path) -> None:
    run = _fake_run(engine_json, tmp_path / "run")
    other = _fake_run(engine_json, tmp_path / "other", PROFILE.replace("0.05", "0.06"))
    with pytest.raises(ValueError, match=r"other/fidelity.json: paths.profile_csv .* is not the profile"):
        run_fidelity(FidelityOptions(tmp_path / "out", from_run=run, scale_from=other, report=False))


def test_from_run_without_fidelity_json_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"nothing/fidelity.json: not a finished"):
        run_fidelity(FidelityOptions(tmp_path / "out", from_run=tmp_path / "nothing", report=False))


def test_from_run_against_another_profile(engine_json: Callable[..., Path], tmp_path: Path) -> None:
    run = _fake_run(engine_json, tmp_path / "run")
    faster = tmp_path / "faster"
    faster.mkdir()
    (faster / "profile.csv").write_text(PROFILE.replace("decode,1,1,64,0.05", "decode,1,1,64,0.025"))
    result = run_fidelity(FidelityOptions(tmp_path / "out", from_run=run, profile_dir=faster, report=False))
    assert str(faster / "profile.csv") in result.sim_command
    assert result.slowdown["decode"] > 1.5  # the 1-sequence decode steps now look 3x slower than profiled
    with pytest.raises(FileNotFoundError, match=r"nowhere/profile.csv: no profile.csv"):
        run_fidelity(FidelityOptions(tmp_path / "out2", from_run=run, profile_dir=tmp_path / "nowhere", report=False))
