"""`pdsim plan`: the hydra task around `pdsim.search.planner.plan`.

Writes `plan.json` (per-role goodputs, verified candidates, recommendation, gain) into hydra's
output directory and prints the same as tables.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pdsim.config import Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.run import fail
from pdsim.search.planner import (
    COLOCATED,
    DECODE,
    MIN_LIFETIMES,
    PREFILL,
    Candidate,
    Plan,
    RoleGoodput,
    plan,
)

PLAN_FILE = "plan.json"


def _best_layout(roles: tuple[RoleGoodput, ...], role: str) -> RoleGoodput | None:
    mine = [r for r in roles if r.role == role]
    return min(mine, key=lambda r: (-r.per_gpu_rps, r.layout), default=None)


def plan_to_dict(result: Plan) -> dict[str, Any]:
    def cand(c: Candidate) -> dict[str, Any]:
        return {**asdict(c), "gpus": c.gpus, "label": c.label}

    best = result.best
    return {
        "small_probes": list(result.small_probes),
        "gpus": result.gpus,
        "roles": [{**asdict(r), "layout": r.layout.text, "per_gpu_rps": r.per_gpu_rps} for r in result.roles],
        "disaggregated": [cand(c) for c in result.disaggregated],
        "colocated": [cand(c) for c in result.colocated],
        "recommendation": cand(best) if best else None,
        "best_colocated": cand(result.best_colocated) if result.best_colocated else None,
        "best_disaggregated": cand(result.best_disaggregated) if result.best_disaggregated else None,
        "gain": None if math.isnan(result.gain) else result.gain,
    }


def format_plan(result: Plan, cfg: Config) -> str:
    lines = [f"pdsim plan: scenario={cfg.scenario.name} model={cfg.model.name} hardware={cfg.hardware.name} "
             f"perf={cfg.perf.kind} budget {result.gpus} GPUs, SLO TTFT<={cfg.slo.ttft_s}s TPOT<={cfg.slo.tpot_s}s "
             f"({100 * cfg.slo.attainment_target:.0f}%), {probe_text(cfg)}", "",
             "one instance per role (goodput, req/s):",
             f"{'role':<10}{'layout':>20}{'goodput':>10}{'per GPU':>10}"]
    small = set(result.small_probes)
    for r in result.roles:
        flag = "  *" if r.label in small else ""
        lines.append(f"{r.role:<10}{r.layout.text:>20}{r.goodput_rps:>10.4g}{r.per_gpu_rps:>10.4g}{flag}")
    for role in (PREFILL, DECODE, COLOCATED):
        best = _best_layout(result.roles, role)
        if best is not None and best.goodput_rps > 0:
            lines.append(f"best per-GPU layout for {role}: {best.layout.text} ({best.per_gpu_rps:.4g} req/s per GPU)")
    lines += ["", "verified fleets (full goodput search):",
              f"{'fleet':<34}{'GPUs':>6}{'estimate':>10}{'goodput':>10}{'per GPU':>10}"]
    for c in (*result.disaggregated, *result.colocated):
        flag = "  *" if c.label in small else ""
        lines.append(f"{c.label:<34}{c.gpus:>6}{c.estimate_rps:>10.4g}{c.goodput_rps:>10.4g}"
                     f"{c.goodput_rps / c.gpus:>10.4g}{flag}")
    lines.append("")
    if result.best is None:
        lines.append(f"no fleet under {result.gpus} GPUs reaches the SLOs at plan.min_rate_rps="
                     f"{cfg.plan.min_rate_rps:g} req/s or more (or none fits the budget)")
    else:
        lines.append(f"recommendation: {result.best.label} on {result.best.gpus} GPUs, "
                     f"goodput {result.best.goodput_rps:.4g} req/s ({result.best.mode})")
    disagg, coloc = result.best_disaggregated, result.best_colocated
    if disagg is not None and coloc is not None and not math.isnan(result.gain):
        lines.append(f"best disaggregated: {disagg.label}, {disagg.goodput_rps:.4g} req/s; best colocated: "
                     f"{coloc.label}, {coloc.goodput_rps:.4g} req/s; disaggregation gain x{result.gain:.2f}")
    if small:
        fix = ("raise plan.num_requests (or set 0 to size probes per fleet)" if cfg.plan.num_requests
               else "raise plan.max_requests")
        lines.append(f"* WARNING: these probes' arrivals span fewer than {MIN_LIFETIMES:g} lone-request latencies at "
                     f"the goodput: the fleet never reaches steady state and the number is too high; {fix}")
    return "\n".join(lines)


def probe_text(cfg: Config) -> str:
    if cfg.plan.num_requests > 0:
        return f"{cfg.plan.num_requests} requests per probe"
    return (f"probes sized per fleet and rate ({MIN_LIFETIMES:g} lone-request latencies of arrivals, "
            f"{cfg.plan.min_requests}-{cfg.plan.max_requests} requests)")


@hydra.main(config_path=str(SCENARIOS_DIR), config_name="config", version_base="1.3")
def hydra_plan(dcfg: DictConfig) -> dict[str, Any]:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        cfg = to_config(dcfg)
        result = plan(cfg)
    except (ValueError, KeyError, OSError) as exc:
        fail(str(exc).splitlines()[0], out_dir)
    data = plan_to_dict(result)
    (out_dir / PLAN_FILE).write_text(json.dumps(data, indent=2, default=float))
    print(format_plan(result, cfg))
    print(f"\noutputs: {out_dir}")
    return data


register_configs()
