"""`pdsim run`: compose a scenario, simulate it, write the trace and summary.

The library entry point is `run_simulation(cfg) -> RunOutput` (no files); `hydra_run` is the
hydra task that writes the outputs into hydra's run directory and prints the summary.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdsim.config import Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.plugins import run_report_writer
from pdsim.search.rows import RESULT_FILE, gpus_of, result_row
from pdsim.summary import format_summary
from pdsim.trace import write_trace

if TYPE_CHECKING:  # pandas, pyarrow, hydra, numpy load when a run needs them, not on import
    import pandas as pd
    from omegaconf import DictConfig

    from pdsim.metrics import Slo

log = logging.getLogger(__name__)

TRACE_FILE = "trace.parquet"
TIMESERIES_FILE = "timeseries.parquet"


@dataclass
class RunOutput:
    trace: pd.DataFrame
    timeseries: pd.DataFrame
    summary: dict[str, Any]


def slo_of(cfg: Config) -> Slo:
    from pdsim.metrics import Slo  # (metrics is pandas code)

    s = cfg.slo
    return Slo(s.ttft_s, s.tpot_s, s.attainment_target, s.ttft_definition, s.criterion)


def run_simulation(cfg: Config, progress: bool | None = None) -> RunOutput:
    """Build the workload, simulate it, and summarise the trace."""
    from pdsim.compiled import core_compiled
    from pdsim.metrics import summarize
    from pdsim.sim import simulate
    from pdsim.workload import build_workload
    from pdsim.workload.closed_loop import closed_loop_of

    log.info("simulator core: %s", "compiled (mypyc)" if core_compiled() else "pure Python (slower; see README)")
    workload = build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    result = simulate(cfg, workload, progress=cfg.progress if progress is None else progress)
    loop = closed_loop_of(cfg.scenario)
    summary = summarize(result.trace, slo_of(cfg), cfg.slo.tpot_definition, loop, gpus_of(cfg))
    summary["scenario"] = cfg.scenario.name
    summary["cluster"] = cluster_label(cfg)
    summary["instances"] = result.instance_stats
    if cfg.kv_tiers.enabled or cfg.policy.routing == "kv_centric":
        from pdsim.sim.kv_tiers_setup import kv_tier_summary

        summary["kv_tiers"] = kv_tier_summary(result.trace, result.instance_stats)
    if cfg.policy.scaling != "none":
        summary["scaling_events"] = result.scaling_events
    return RunOutput(result.trace, result.timeseries, summary)


def write_outputs(
    out: RunOutput, out_dir: Path, report: bool = False, row: dict[str, Any] | None = None
) -> list[Path]:
    """Write trace.parquet (+ summary JSON), result.json, timeseries.parquet, optionally a report."""
    paths = [write_trace(out.trace, out_dir / TRACE_FILE, out.summary)]
    paths.append(out_dir / "trace.summary.json")
    if row is not None:
        paths.append(out_dir / RESULT_FILE)
        paths[-1].write_text(json.dumps(row, indent=2, default=float))
    if len(out.timeseries):
        ts_path = out_dir / TIMESERIES_FILE
        out.timeseries.to_parquet(ts_path, index=False)
        paths.append(ts_path)
    if report:  # the HTML report comes from the analysis package (pdsim.plugins)
        writer = run_report_writer()
        paths.append(writer(out.trace, out.summary, out.timeseries, out_dir / "report"))
    return paths


def cluster_label(cfg: Config) -> str:
    c = cfg.cluster
    if c.mode == "colocated":
        return f"colocated x{c.colocated} ({c.parallel('colocated').text})"
    return f"{c.prefill}P({c.parallel('prefill').text}) {c.decode}D({c.parallel('decode').text})"


def fail(message: str, out_dir: Path | None = None) -> None:
    """One-line error on stderr, remove this run's half-written outputs, exit non-zero."""
    if out_dir is not None and out_dir.exists():
        shutil.rmtree(out_dir, ignore_errors=True)
    print(f"pdsim: error: {message}", file=sys.stderr)
    sys.exit(1)


def hydra_run(dcfg: DictConfig | None = None) -> dict[str, Any] | None:
    """`pdsim run`'s hydra task: on a composed config (hydra's run_job, pdsim.hydra_task) it
    runs it; called bare it is `@hydra.main` over sys.argv (hydra's flags, multiruns)."""
    if dcfg is not None:
        return _run_task(dcfg)
    import hydra

    register_configs()
    hydra.main(config_path=str(SCENARIOS_DIR), config_name="config", version_base="1.3")(_run_task)()
    return None


def _run_task(dcfg: DictConfig) -> dict[str, Any]:
    from hydra.core.hydra_config import HydraConfig

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        cfg = to_config(dcfg)
        out = run_simulation(cfg)
        paths = write_outputs(out, out_dir, report=cfg.report, row=result_row(cfg, out.summary))
    except (ValueError, KeyError, OSError) as exc:
        fail(str(exc).splitlines()[0], out_dir)
    title = f"pdsim run: scenario={cfg.scenario.name}  model={cfg.model.name}  {out.summary['cluster']}  perf={cfg.perf.kind}"
    print(format_summary(out.summary, title))
    print(f"\noutputs: {out_dir}")
    for path in paths:
        print(f"  {path.relative_to(out_dir)}")
    return out.summary

