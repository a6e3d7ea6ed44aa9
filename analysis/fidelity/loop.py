"""The fidelity loop: profile -> serve -> probe -> replay -> simulate the same requests -> compare.

`run_fidelity(options)` on this machine:

1. `pdreal profile` (child process): profile.csv (step latencies) + engine.json (limits, KV
   bytes/token, transfer bandwidth and setup, per-step overheads), with the serve overrides;
2. a local `pdreal serve` cluster of `prefill` x `decode` instances with the same overrides;
3. idle probes through the router (pdreal.probe): dispatch, ZMQ and delivery hops, recorded in
   engine.json's `probe` entry; then (`pilot_requests` > 0) the loaded probe (pilot.py): other
   requests of the same workload, whose served forwards' slowdown against the profile joins the
   probe entry;
4. `pdreal replay` of the workload (a pdsim scenario composed from `workload_overrides`);
5. pdsim on exactly the replay's requests (requests.csv: actual send times and lengths) with
   the profiled table and every engine fact from engine.json (facts.py);
6. the analysis comparison report (sim vs real) and the error table (compare.py).

The result is the prediction (step 5 told only what the profile and the probes measured, nothing
from the run it predicts); a calibrated simulation that also takes the served forwards' slowdown
(this run's, or with `scale_from` another run's) is printed as a diagnostic.

With `from_run` only 5-6 run again, on a finished run's measurements (runs.py): the simulator can
change without re-measuring. With `scale_from` the calibrated simulation takes the served
slowdown measured in *another* run against the same profile: a prediction of this run, not a fit.

Library code: returns a FidelityResult and writes only into `options.out_dir`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.fidelity.compare import DEFINITIONS, error_table, format_report, slo_scan
from analysis.fidelity.facts import EngineFacts, sim_overrides
from analysis.fidelity.options import FidelityOptions
from analysis.fidelity.pilot import probed_step_scale, run_pilot
from analysis.fidelity.real import RealCluster, merge_probe, requests_csv, run_profile
from analysis.fidelity.runs import Measured, load_measured, other_run_steps, recorded_options
from analysis.fidelity.served import slowdown, steps_frame
from pdsim.config import Config
from pdsim.metrics import Slo, summarize
from pdsim.workload.closed_loop import ClosedLoop, closed_loop_of

log = logging.getLogger(__name__)
UNSCALED = ("perf.prefill_step_scale=1.0", "perf.decode_step_scale=1.0")


@dataclass
class FidelityResult:
    """The headline is the prediction (`table`, `sim`, `sim_command`): pdsim told only what
    `pdreal profile` and the probes (idle, and the loaded pilot when asked) measured, nothing from
    the run it predicts. The calibrated simulation (the same, with this run's served forwards'
    slowdown) is a diagnostic of where the remaining error comes from."""

    table: pd.DataFrame  # predicted sim vs real: the result, its targets decide the exit code
    sim: pd.DataFrame
    real: pd.DataFrame
    slo: Slo
    sim_command: str
    paths: dict[str, Path]
    timings_s: dict[str, float]
    facts: EngineFacts
    calibrated_table: pd.DataFrame  # diagnostic: the same with perf.*_step_scale = served slowdown
    calibrated_command: str
    slowdown: dict[str, float]  # served forward latency / offline profile, per kind
    scan: pd.DataFrame  # predicted goodput at tighter SLOs (compare.slo_scan)
    slowdown_source: str = "this run's served steps"
    shape_name: str = ""


def compose(overrides: list[str]) -> Config:
    """pdsim's Config for these overrides (ValueError with one line on a bad one)."""
    from pdsim.cli import check_overrides

    error = check_overrides(overrides)
    if error:
        raise ValueError(error)
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR

    register_configs()
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        return to_config(hydra_compose("config", overrides=overrides))


def loop_overrides(loop: ClosedLoop | None) -> list[str]:
    """pdsim overrides running `loop` over the replay's requests (their order and lengths)."""
    if loop is None:
        return []
    return [f"scenario.concurrency={loop.concurrency}", f"scenario.client_think_s={loop.think_s!r}",
            f"scenario.warmup_requests={loop.warmup_requests}", f"scenario.warmup_barrier={str(loop.barrier).lower()}"]


def simulate_requests(csv_path: Path, facts: EngineFacts, profile_csv: Path, options: FidelityOptions,
                      slo_overrides: list[str], step_scale: dict[str, float] | None = None,
                      loop: ClosedLoop | None = None) -> tuple[pd.DataFrame, dict[str, Any], list[str]]:
    """pdsim on the replay's requests; returns (trace, summary, the overrides used). `step_scale`:
    the served-vs-profiled forward slowdown per kind (perf.*_step_scale), else none; `loop`: the
    closed loop the replay ran, run again by the simulator over the same requests in order."""
    from pdsim.run import run_simulation

    engine = sim_overrides(facts, profile_csv, options.sim_model, options.shape.prefill, options.shape.decode,
                           options.shape.colocated)
    if step_scale is not None:
        engine += [f"perf.{kind}_step_scale={step_scale[kind]!r}" for kind in ("prefill", "decode")]
    overrides = ["scenario=chat", "scenario.name=fidelity", "scenario.source=csv",
                 f"scenario.path={csv_path.resolve()}", "scenario.num_requests=0", "progress=false",
                 "record_token_times=true", *engine, *loop_overrides(loop), *slo_overrides, *options.sim_overrides]
    out = run_simulation(compose(overrides), progress=False)
    return out.trace, out.summary, overrides


def run_fidelity(options: FidelityOptions) -> FidelityResult:
    """The whole loop, or (options.from_run) the simulation and comparison of a finished run."""
    out, clock, timings = options.out_dir, time.perf_counter(), {}
    out.mkdir(parents=True, exist_ok=True)

    def lap(name: str) -> None:
        nonlocal clock
        timings[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    if options.from_run is not None:
        run_dir = options.from_run
        options = recorded_options(options)
        measured = load_measured(run_dir)
        if options.profile_dir is not None:  # the same replay against another profile of the engine
            measured.paths["profile_csv"] = _profile_csv(options.profile_dir)
    workload_cfg = compose(list(options.workload_overrides))  # fail on a bad override before any work
    slo = Slo(workload_cfg.slo.ttft_s, workload_cfg.slo.tpot_s, workload_cfg.slo.attainment_target)
    loop = closed_loop_of(workload_cfg.scenario)
    if options.from_run is None:
        measured = measure(options, workload_cfg, slo, lap, loop)
    return simulate_and_compare(options, measured, slo, timings, lap, loop)


def measure(options: FidelityOptions, workload_cfg: Config, slo: Slo, lap: Callable[[str], None],
            loop: ClosedLoop | None = None) -> Measured:
    """Profile (unless reused), serve, probe and replay (open or closed `loop`); the real side's
    files in options.out_dir."""
    from pdsim.trace import write_trace
    from pdsim.workload import build_workload

    out = options.out_dir
    workload = build_workload(workload_cfg.scenario, workload_cfg.seed, workload_cfg.data_dir)
    profile_dir = options.profile_dir or out / "profile"
    engine_json = profile_dir / "engine.json"
    if options.profile_dir is None:
        run_profile(profile_dir, options.shape.overrides, options.quick_profile, options.profile_repeats,
                    grid_args=options.profile_grid_args)
    elif not engine_json.is_file():
        raise FileNotFoundError(f"{engine_json}: no engine.json in --profile {profile_dir}")
    lap("profile")
    with RealCluster(options.shape, out / "serve") as cluster:
        lap("serve_start")
        probe = cluster.probe(options.num_probes)
        lap("probe")
        if options.pilot_requests:
            engine = sim_overrides(EngineFacts.load(engine_json), profile_dir / "profile.csv", options.sim_model,
                                   options.shape.prefill, options.shape.decode, options.shape.colocated)
            model = _latency_model([*engine, *options.sim_overrides, *UNSCALED])
            probe.update(run_pilot(cluster, workload_cfg, options.pilot_requests, model, loop,
                                   out / "pilot_steps.csv"))
            lap("pilot")
        replay_start = time.monotonic()
        real, replay_facts = cluster.replay(workload, loop=loop)
        steps = steps_frame(cluster.served_steps(replay_start))
        lap("replay")
    paths = {"engine_json": out / "engine.json", "profile_csv": profile_dir / "profile.csv",
             "requests_csv": requests_csv(real, out / "requests.csv", workload),
             "served_steps_csv": out / "served_steps.csv"}
    paths["engine_json"].write_text(engine_json.read_text())
    merge_probe(paths["engine_json"], probe)
    steps.to_csv(paths["served_steps_csv"], index=False)
    if (out / "pilot_steps.csv").is_file():
        paths["pilot_steps_csv"] = out / "pilot_steps.csv"
    real_summary = {**summarize(real, slo, loop=loop), "replay": replay_facts}
    (out / "real").mkdir(exist_ok=True)
    paths["real_trace"] = write_trace(real, out / "real" / "trace.parquet", _jsonable(real_summary))
    return Measured(real, real_summary, steps, paths)


def step_scale(options: FidelityOptions, measured: Measured, model_overrides: list[str]) -> tuple[dict[str, float], str]:
    """The served forward slowdown the calibrated simulation uses, and where it comes from: this
    run's served steps, or (options.scale_from) another run against the same profile."""
    model = _latency_model([*model_overrides, *UNSCALED])  # a slowdown is against the bare profile
    if options.scale_from is None:
        return slowdown(measured.steps, model), "this run's served steps"
    steps = other_run_steps(options.scale_from, measured.paths["profile_csv"])
    return slowdown(steps, model), f"served steps of {options.scale_from}"


def simulate_and_compare(options: FidelityOptions, measured: Measured, slo: Slo, timings: dict[str, float],
                         lap: Callable[[str], None], loop: ClosedLoop | None = None) -> FidelityResult:
    """pdsim on the measured run's requests (profile only, then calibrated), the tables, the report."""
    out, paths = options.out_dir, dict(measured.paths)
    facts = EngineFacts.load(paths["engine_json"])
    slo_overrides = [o for o in options.workload_overrides if o.startswith("slo")]
    sim, sim_summary, sim_used = simulate_requests(paths["requests_csv"], facts, paths["profile_csv"], options,
                                                   slo_overrides, loop=loop)
    scale, scale_source = step_scale(options, measured, sim_used)
    calibrated, _, calibrated_used = simulate_requests(paths["requests_csv"], facts, paths["profile_csv"], options,
                                                       slo_overrides, scale, loop)
    lap("simulate")
    from pdsim.trace import write_trace

    (out / "sim").mkdir(exist_ok=True)
    paths["sim_trace"] = write_trace(sim, out / "sim" / "trace.parquet", _jsonable(sim_summary))
    real = measured.real
    if options.report:
        paths["report"] = _report(sim, sim_summary, real, measured.real_summary, slo, out / "report")
    lap("report")
    result = FidelityResult(error_table(sim, real, slo, loop), sim, real, slo, "pdsim run " + " ".join(sim_used),
                            paths, timings, facts, error_table(calibrated, real, slo, loop),
                            "pdsim run " + " ".join(calibrated_used), scale, slo_scan(sim, real, slo, loop=loop),
                            scale_source, options.shape.name)
    paths["fidelity_json"] = _write_result(out / "fidelity.json", result, options)
    paths["fidelity_md"] = out / "fidelity.md"
    paths["fidelity_md"].write_text(result_markdown(result))
    return result


def result_markdown(result: FidelityResult) -> str:
    """fidelity.md: what was compared, the commands, and the tables."""
    real, scale = result.real, result.slowdown
    head = [f"# pdsim fidelity: {result.shape_name}, {len(real)} requests "
            f"({int((real['status'] == 'finished').sum())} finished)", "",
            f"- served forwards / offline profile: prefill {scale['prefill']:.3f}x, decode {scale['decode']:.3f}x "
            f"(from {result.slowdown_source})",
            f"- predicted simulation (the result, from {predicted_from(result.facts)}): `{result.sim_command}`",
            f"- calibrated simulation (diagnostic): `{result.calibrated_command}`",
            "- timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in result.timings_s.items()), ""]
    report = format_report(result.table, result.scan, result.calibrated_table, result.slo, predicted_from(result.facts))
    return "\n".join(head) + "\n" + report + "\n"


def predicted_from(facts: EngineFacts) -> str:
    """What the prediction was told: the profile and the idle probes, and the pilot if one ran."""
    scale = probed_step_scale(facts.probe)
    if not scale:
        return "the profile and the idle probes"
    pilot = ", ".join(f"{k.split('_')[0]} {v:.2f}x" for k, v in scale.items())
    return (f"the profile, the idle probes and a {int(facts.probe.get('pilot_requests', 0))}-request pilot "
            f"(served forwards / profile: {pilot})")


def _profile_csv(profile_dir: Path) -> Path:
    path = Path(profile_dir) / "profile.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no profile.csv in --profile {profile_dir}")
    return path


def _latency_model(overrides: list[str]) -> Any:
    from pdsim.perf import build_latency_model

    cfg = compose(overrides)
    return build_latency_model(cfg.perf, cfg.model, cfg.hardware, cfg.cluster.prefill_tp, cfg.data_dir)


def _report(sim: pd.DataFrame, sim_summary: dict[str, Any], real: pd.DataFrame, real_summary: dict[str, Any],
            slo: Slo, out_dir: Path) -> Path:
    from analysis.load import LoadedTrace, checked_frame
    from analysis.report import write_comparison_report

    a = LoadedTrace("pdsim", checked_frame(sim, "pdsim"), "sim/trace.parquet", sim_summary)
    b = LoadedTrace("pdreal", checked_frame(real, "pdreal"), "real/trace.parquet", real_summary)
    return write_comparison_report(a, b, out_dir, slo)


def _write_result(path: Path, result: FidelityResult, options: FidelityOptions) -> Path:
    data = {"definitions": DEFINITIONS, "slo": asdict(result.slo),
            "table": json.loads(result.table.to_json(orient="records")),
            "sim_command": result.sim_command, "timings_s": result.timings_s,
            "calibrated_table": json.loads(result.calibrated_table.to_json(orient="records")),
            "calibrated_command": result.calibrated_command, "served_slowdown_vs_profile": result.slowdown,
            "slowdown_source": result.slowdown_source,
            "slo_scan": json.loads(result.scan.to_json(orient="records")),
            "engine_facts": asdict(result.facts),
            "options": {**asdict(options), **{k: str(v) if v is not None else None for k, v in (
                ("out_dir", options.out_dir), ("profile_dir", options.profile_dir), ("from_run", options.from_run),
                ("scale_from", options.scale_from))}},
            "paths": {k: str(v) for k, v in result.paths.items()}}
    path.write_text(json.dumps(data, indent=2, default=str))
    return path


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
