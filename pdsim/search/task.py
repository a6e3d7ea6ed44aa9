"""`pdsim goodput` / `pdsim sweep`: one goodput search per hydra job, results as flat rows.

Each job writes `result.json` (one flat row: configuration + metrics) and `goodput.json` (the
probes the search visited) into its hydra output directory; `pdsim.search.collect` gathers the
rows of a multirun into one table.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pdsim.config import Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.run import fail, run_simulation
from pdsim.search.goodput import GoodputResult, find_goodput
from pdsim.search.rows import RESULT_FILE, gpus_of, result_row


def with_rate(cfg: Config, rate_rps: float) -> Config:
    """The same config with arrivals at `rate_rps` (synthetic rate, or a trace rescaled to it)."""
    if cfg.scenario.source in ("synthetic", "lengths_csv"):
        scenario = replace(cfg.scenario, rate_rps=rate_rps)
    else:
        scenario = replace(cfg.scenario, target_rate_rps=rate_rps)
    return replace(cfg, scenario=scenario)


def goodput_search(cfg: Config, requests_at: Callable[[float], int] | None = None) -> GoodputResult:
    """Bisection on the arrival rate with the config's seed fixed; `requests_at(rate)`, when
    given, sets each probe's scenario.num_requests (the planner sizes probes by rate)."""

    def attainment_at(rate_rps: float) -> tuple[float, bool]:
        probe = with_rate(cfg, rate_rps)
        if requests_at is not None:
            probe = replace(probe, scenario=replace(probe.scenario, num_requests=requests_at(rate_rps)))
        out = run_simulation(probe, progress=False)
        return out.summary["attainment"]["both"], bool(out.summary["meets_slo_target"])

    s = cfg.search
    return find_goodput(
        attainment_at,
        target=cfg.slo.attainment_target,
        start_rps=s.start_rps,
        rel_tol=s.rel_tol,
        max_rate_rps=s.max_rate_rps,
        min_rate_rps=s.min_rate_rps,
        max_probes=s.max_probes,
    )


def format_goodput(result: GoodputResult, gpus: int, criterion: str = "joint") -> str:
    lines = [f"{'rate req/s':>12}{'attainment':>12}  verdict"]
    for p in result.probes:
        lines.append(f"{p.rate_rps:>12.4g}{floor_pct(p.attainment):>11}%  {'pass' if p.passed else 'fail'}")
    lines.append(
        f"\ngoodput {result.goodput_rps:.4g} req/s ({result.per_gpu(gpus):.4g} req/s per GPU, {gpus} GPUs); "
        f"first failing rate {result.upper_rps:.4g} req/s; target {_target_text(result.target, criterion)}"
    )
    if not result.converged:
        lines.append(f"WARNING: search.max_probes={len(result.probes)} ran out before the bracket reached "
                     f"search.rel_tol; the edge lies in [{result.goodput_rps:.4g}, {result.upper_rps:.4g}) req/s")
    return "\n".join(lines)


def _target_text(target: float, criterion: str) -> str:
    if criterion == "percentiles":
        return f"P{100 * target:g} TTFT and P{100 * target:g} TPOT each below their SLO"
    return f"{100 * target:.0f}% meeting both SLOs"


def floor_pct(fraction: float) -> str:
    """A fraction as a percentage with one decimal, rounded down (89.95% is 89.9%, never 90.0%)."""
    if fraction != fraction:
        return "-"
    return f"{math.floor(1000 * fraction + 1e-9) / 10:.1f}"


@hydra.main(config_path=str(SCENARIOS_DIR), config_name="config", version_base="1.3")
def hydra_goodput(dcfg: DictConfig) -> dict[str, Any]:
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        cfg = to_config(dcfg)
        result = goodput_search(cfg)
        at_goodput = run_simulation(with_rate(cfg, max(result.goodput_rps, 1e-3)), progress=False)
    except (ValueError, KeyError, OSError) as exc:
        fail(str(exc).splitlines()[0], out_dir)
    row = result_row(cfg, at_goodput.summary, result)
    (out_dir / RESULT_FILE).write_text(json.dumps(row, indent=2, default=float))
    probes = [{"rate_rps": p.rate_rps, "attainment": p.attainment, "passed": p.passed} for p in result.probes]
    (out_dir / "goodput.json").write_text(json.dumps({"goodput_rps": result.goodput_rps, "probes": probes}, indent=2))
    print(f"pdsim goodput: scenario={cfg.scenario.name} {at_goodput.summary['cluster']} "
          f"SLO TTFT<={cfg.slo.ttft_s}s TPOT<={cfg.slo.tpot_s}s", file=sys.stdout)
    print(format_goodput(result, gpus_of(cfg), cfg.slo.criterion))
    n = at_goodput.summary["requests"]
    if result.goodput_rps > 0:
        print(f"each probe: {n} requests, arriving over ~{n / result.goodput_rps:.3g} s at the goodput rate "
              "(the rate probed is the request rate offered, multi-turn sessions included)")
    print(f"outputs: {out_dir}")
    return row


register_configs()
