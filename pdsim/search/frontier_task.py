"""`pdsim frontier`: one hydra job per deployment, gathered into a frontier when the multirun ends.

`pdsim frontier` (pdsim/cli.py) enumerates the deployments of `frontier.gpus` GPUs and launches
a multirun over `frontier.deployment=<label>,...` (joblib locally, submitit on Slurm). Each job
(`hydra_frontier`) runs its deployment's concurrency ladder and writes `frontier.json` (one flat
row per point) into its job directory, printing a line per point and how many deployments are
done. When the multirun ends, `GatherFrontier` (a hydra callback) writes into the sweep
directory: points.csv (every point, `on_frontier` / `on_slo_frontier` marked), frontier.csv
(the frontier points), best.json (the best deployment at the interactivity target, overall and
per family), and through the analysis package's `frontier` report frontier.png / frontier.html.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import hydra
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pdsim.config import Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.run import fail, run_simulation
from pdsim.search.deployments import FAMILIES, parse_label
from pdsim.search.frontier import (
    Y_AT,
    X,
    Y,
    best_at_target,
    check_frontier,
    mark_frontier,
    ranking_at_target,
    run_ladder,
    running_capacity,
)
from pdsim.search.rows import result_row

log = logging.getLogger(__name__)

JOB_FILE = "frontier.json"


def measure_point(cfg: Config) -> dict[str, Any]:
    """Simulate one closed-loop point; its flat row plus `meets_slo` and the wall time."""
    start = time.perf_counter()
    out = run_simulation(cfg, progress=False)
    row = result_row(cfg, out.summary)
    row["meets_slo"] = bool(out.summary["meets_slo_target"])
    row["point_requests"] = cfg.scenario.num_requests
    row["wall_s"] = time.perf_counter() - start
    return row


def point_line(row: dict[str, Any]) -> str:
    state = "steady" if row["steady_state_reached"] else "NOT STEADY"
    slo = "SLO met" if row["meets_slo"] else "SLO missed"
    return (f"  {row['deployment_text']:<22} C={row['concurrency']:<5} {row['point_requests']:>6} req  "
            f"{row[X]:7.1f} tok/s/user {row[Y]:8.1f} tok/s/GPU  TTFT p90 {row['ttft_p90_s']:7.3g} s  "
            f"{state}, {slo}  ({row['wall_s']:.1f} s)")


@hydra.main(config_path=str(SCENARIOS_DIR), config_name="config", version_base="1.3")
def hydra_frontier(dcfg: DictConfig) -> list[dict[str, Any]]:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    start = time.perf_counter()
    try:
        cfg = to_config(dcfg)
        check_frontier(cfg.frontier)
        if not cfg.frontier.deployment:
            raise ValueError("frontier: no frontier.deployment for this job (run it through `pdsim frontier`)")
        dep = parse_label(cfg.frontier.deployment)
        if dep.gpus > cfg.frontier.gpus:
            raise ValueError(f"frontier: deployment {dep.label} needs {dep.gpus} GPUs, over frontier.gpus={cfg.frontier.gpus}")
        rows = run_ladder(cfg, dep, measure_point, on_point=lambda row: print(point_line(row), flush=True),
                          capacity=running_capacity(cfg, dep))
    except (ValueError, KeyError, OSError) as exc:
        fail(str(exc).splitlines()[0], out_dir)
    (out_dir / JOB_FILE).write_text(json.dumps(rows, indent=1, default=float))
    done = len(list(out_dir.parent.glob(f"*/{JOB_FILE}")))
    total = len(cfg.frontier.deployments) or "?"
    print(f"[frontier] {done}/{total} deployments done: {dep.text}, {len(rows)} points "
          f"in {time.perf_counter() - start:.1f} s", flush=True)
    return rows


def gather_points(sweep_dir: Path) -> pd.DataFrame:
    """Every job's rows, frontier marked (empty frame when no job wrote any)."""
    rows = [row for path in sorted(Path(sweep_dir).glob(f"*/{JOB_FILE}")) for row in json.loads(path.read_text())]
    if not rows:
        return pd.DataFrame()
    points = pd.DataFrame(rows).sort_values(["family", "deployment", "concurrency"], kind="stable")
    return mark_frontier(points.reset_index(drop=True))


def best_summary(points: pd.DataFrame, target: float) -> dict[str, Any]:
    """At the target: every deployment's tokens/s/GPU (`ranking`), the best overall and per
    family, the disaggregated / colocated gain, and the best measured point (no interpolation)."""
    ranking = ranking_at_target(points, target)
    out: dict[str, Any] = {"target_tokens_per_s_per_user": target, "ranking": ranking.to_dict("records"),
                           "best": _first(ranking), "best_point": best_at_target(points, target)}
    for family in FAMILIES:
        out[family] = _first(ranking[ranking["family"] == family])
    co, pd_ = out["colocated"], out["disaggregated"]
    out["gain_disaggregated_over_colocated"] = pd_[Y_AT] / co[Y_AT] if co and pd_ and co[Y_AT] > 0 else None
    return out


def _first(frame: pd.DataFrame) -> dict[str, Any] | None:
    return None if frame.empty else {k: (v.item() if hasattr(v, "item") else v) for k, v in frame.iloc[0].items()}


def format_best(best: dict[str, Any], slo_text: str, top: int = 5) -> str:
    target = best["target_tokens_per_s_per_user"]
    lines = [f"at {target:g} tokens/s/user, {slo_text} (tokens/s/GPU; ~ = read between two ladder points):"]
    for key in ("best", *FAMILIES):
        b = best[key]
        name = "best overall" if key == "best" else f"best {key}"
        lines.append(f"  {name:<20} " + ("none reaches it" if b is None else _at_text(b)))
    if best["gain_disaggregated_over_colocated"] is not None:
        lines.append(f"  disaggregated / colocated: x{best['gain_disaggregated_over_colocated']:.2f}")
    lines += [f"  #{i + 1:<3} {_at_text(r)}" for i, r in enumerate(best["ranking"][:top])]
    return "\n".join(lines)


def _at_text(r: dict[str, Any]) -> str:
    span = (f"C={r['concurrency_from']}..{r['concurrency_to']}" if r["interpolated"]
            else f"C={r['concurrency_from']}")
    return f"{r['deployment_text']:<22} {'~' if r['interpolated'] else ' '}{r[Y_AT]:7.1f} ({span})"


def write_frontier(sweep_dir: Path, meta: dict[str, Any]) -> pd.DataFrame:
    """points.csv, frontier.csv, best.json (+ PNG/HTML through the analysis report) in `sweep_dir`."""
    points = gather_points(sweep_dir)
    if points.empty:
        log.warning("no %s found under %s", JOB_FILE, sweep_dir)
        return points
    points.to_csv(sweep_dir / "points.csv", index=False)
    points[points["on_frontier"] | points["on_slo_frontier"]].to_csv(sweep_dir / "frontier.csv", index=False)
    best = best_summary(points, meta["target_tokens_per_s_per_user"])
    (sweep_dir / "best.json").write_text(json.dumps({**meta, **best}, indent=2, default=float))
    unsteady = int((~points["steady_state_reached"].astype(bool)).sum())
    print(f"\nfrontier: {len(points)} points over {points['deployment'].nunique()} deployments "
          f"({unsteady} not steady) -> {sweep_dir}/points.csv, frontier.csv, best.json")
    print(format_best(best, meta["slo_text"]))
    _draw(points, {**meta, **best}, sweep_dir)
    return points


def _draw(points: pd.DataFrame, meta: dict[str, Any], sweep_dir: Path) -> None:
    from pdsim.plugins import frontier_report_writer

    try:
        writer = frontier_report_writer()
    except ValueError as exc:
        log.warning("no frontier.png / frontier.html: %s", exc)
        return
    page = writer(points, meta, sweep_dir)
    print(f"chart: {sweep_dir}/frontier.png, page: {page}")


def frontier_meta(config: DictConfig) -> dict[str, Any]:
    """What the chart and best.json say about the run (from the multirun's composed config)."""
    fr, slo = config.frontier, config.slo
    return {"model": config.model.name, "hardware": config.hardware.name, "gpus": int(fr.gpus),
            "scenario": config.scenario.name, "perf": config.perf.kind,
            "target_tokens_per_s_per_user": float(fr.target_tokens_per_s_per_user),
            "slo": OmegaConf.to_container(slo, resolve=True),
            "slo_text": f"SLO TTFT<={slo.ttft_s:g}s TPOT<={slo.tpot_s:g}s for {100 * slo.attainment_target:g}%"}


class GatherFrontier(Callback):
    """Hydra callback: draw the frontier when the `pdsim frontier` multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        write_frontier(Path(config.hydra.sweep.dir), frontier_meta(config))


register_configs()
