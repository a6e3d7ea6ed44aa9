"""The loaded probe (analysis/fidelity/pilot.py): its workload is the replay's configuration under
another seed, its slowdown reaches the prediction through engine.json's probe entry, a failed
pilot is a clear error, and the slowdowns stay measured against the bare profile."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from analysis.fidelity.cli import build_parser, workload_overrides
from analysis.fidelity.facts import EngineFacts, sim_overrides
from analysis.fidelity.loop import UNSCALED, _latency_model, compose, predicted_from
from analysis.fidelity.pilot import PILOT_TOKEN_SEED, pilot_workload, probed_step_scale, run_pilot
from pdsim.perf import LinearModel
from pdsim.workload import build_workload


def _workload_cfg(*extra: str) -> Any:
    args = build_parser().parse_args(["--requests", "30", "--rate", "0.7", "--input", "16:64", "--output", "4:16",
                                      "--seed", "1", *extra])
    return compose(workload_overrides(args))


def test_pilot_workload_is_the_same_configuration_under_another_seed() -> None:
    cfg = _workload_cfg()
    pilot, replay = pilot_workload(cfg, 12), build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    assert len(pilot) == 12 and len(replay) == 30
    assert all(16 <= r.input_tokens <= 64 and 4 <= r.output_tokens <= 16 for r in pilot)
    pairs = zip(pilot, replay, strict=False)
    assert any((a.arrival_s, a.input_tokens) != (b.arrival_s, b.input_tokens) for a, b in pairs)
    assert [r.request_id for r in pilot_workload(cfg, 12)] == [r.request_id for r in pilot]  # deterministic
    with pytest.raises(ValueError, match="pilot requests must be >= 1, got 0"):
        pilot_workload(cfg, 0)


class FakeCluster:
    """Serves every request at `prefill_x` / `decode_x` the model's forward times."""

    def __init__(self, finished: bool = True) -> None:
        self.finished, self.seeds = finished, []

    def replay(self, workload: Any, drain_timeout_s: float = 600.0, seed: int = 0, loop: Any = None) -> Any:
        self.seeds.append(seed)
        status = ["finished"] * len(workload) if self.finished else ["finished"] * (len(workload) - 1) + ["failed"]
        return pd.DataFrame({"status": status, "failure_reason": [""] * (len(workload) - 1) + ["timeout"]}), {}

    def served_steps(self, since_s: float) -> list[dict[str, Any]]:
        prefill = [{"end_s": since_s + i, "kind": "prefill", "num_seqs": 1, "new_tokens": 8, "context_tokens": 0,
                    "latency_s": 0.13} for i in range(10)]  # model: 0.1 s -> 1.3x
        decode = [{"end_s": since_s + 20 + i, "kind": "decode", "num_seqs": 2, "new_tokens": 2,
                   "context_tokens": 100, "latency_s": 0.11} for i in range(10)]  # model: 0.1 s -> 1.1x
        return prefill + decode


def test_run_pilot_measures_the_slowdown_on_its_own_token_ids(tmp_path: Path) -> None:
    model = LinearModel(prefill_base_s=0.1, prefill_per_token_s=0.0, decode_base_s=0.0,
                        decode_per_seq_s=0.05, decode_per_ctx_token_s=0.0)
    cluster = FakeCluster()
    probe = run_pilot(cluster, _workload_cfg(), 12, model, None, tmp_path / "pilot_steps.csv")
    assert probe == {"pilot_requests": 12.0, "served_prefill_slowdown": pytest.approx(1.3),
                     "served_decode_slowdown": pytest.approx(1.1)}
    assert cluster.seeds == [PILOT_TOKEN_SEED] and PILOT_TOKEN_SEED != 0  # the replay's token ids use seed 0
    assert len(pd.read_csv(tmp_path / "pilot_steps.csv")) == 20
    with pytest.raises(RuntimeError, match=r"fidelity pilot: 1 of 12 requests did not finish \(\['timeout'\]\)"):
        run_pilot(FakeCluster(finished=False), _workload_cfg(), 12, model, None, tmp_path / "again.csv")


def test_the_pilot_slowdown_reaches_the_prediction_and_nothing_else(engine_json: Callable[..., Path],
                                                                    profile_csv: Path) -> None:
    path = engine_json()
    bare = EngineFacts.load(path)
    piloted = EngineFacts.load(path, {"pilot_requests": 16, "served_prefill_slowdown": 1.25,
                                      "served_decode_slowdown": math.nan})
    p0 = compose(["scenario=chat", *sim_overrides(bare, profile_csv, "smollm2_135m", 1, 1)]).perf
    p1 = compose(["scenario=chat", *sim_overrides(piloted, profile_csv, "smollm2_135m", 1, 1)]).perf
    assert (p0.prefill_step_scale, p0.decode_step_scale) == (1.0, 1.0)
    assert (p1.prefill_step_scale, p1.decode_step_scale) == (1.25, 1.0)  # a kind the pilot never saw: unscaled
    assert predicted_from(bare) == "the profile and the idle probes"
    assert predicted_from(piloted) == ("the profile, the idle probes and a 16-request pilot "
                                       "(served forwards / profile: prefill 1.25x)")
    # the slowdowns (pilot's, this run's) are against the bare profile, whatever the overrides scale
    model = _latency_model([*sim_overrides(piloted, profile_csv, "smollm2_135m", 1, 1), *UNSCALED])
    assert model.prefill_time_s([(16, 0)]) == pytest.approx(0.1 + 0.003)


def test_probed_step_scale_keeps_only_finite_positive_values() -> None:
    assert probed_step_scale({}) == {}
    assert probed_step_scale({"served_prefill_slowdown": 0.0, "served_decode_slowdown": -1.0}) == {}
    assert probed_step_scale({"served_decode_slowdown": 1.4}) == {"decode_step_scale": 1.4}


def test_negative_pilot_is_refused() -> None:
    from analysis.fidelity.options import FidelityOptions

    with pytest.raises(ValueError, match="fidelity pilot_requests must be >= 0, got -2"):
        FidelityOptions(Path("x"), pilot_requests=-2)


def test_cli_pilot_default_and_bad_value(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from analysis.fidelity.cli import PILOT_REQUESTS, main

    assert build_parser().parse_args([]).pilot == PILOT_REQUESTS == 16
    assert main(["--pilot", "-1", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == "pdsim fidelity: error: fidelity pilot_requests must be >= 0, got -1"
    assert not (tmp_path / "out").exists()  # nothing half-written
