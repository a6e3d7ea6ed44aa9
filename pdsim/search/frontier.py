"""Throughput-interactivity frontier: output tokens/s per GPU against tokens/s per user.

`pdsim frontier` runs one hydra job per deployment (pdsim.search.deployments); a job walks a
closed-loop concurrency ladder and returns one flat row per point (`run_ladder`); the rows of
all jobs are then reduced to a Pareto frontier per family (colocated, disaggregated) and the best
deployment at an interactivity target (`mark_frontier`, `best_at_target`).

Sizing (every point must reach steady state by itself): a point at concurrency C sends
C x (1 + rounds) requests (`requests_for`): the first C are the warm-up burst the closed loop
does not count, then each client sends `rounds` more, so the steady-state window (from the
(C+1)-th send to the first client left with nothing to send) counts about rounds x C requests
whatever C is; at small C at least `min_counted_requests` follow the warm-up so a single
client still averages over many requests. The default 6 rounds was chosen by convergence: on
Llama-3.1-70B / H100 at C=128 (colocated 2xTP8, PD 2xTP4 + 1xTP8) tokens/s/GPU with 6 rounds
is within 1.3% of 12 rounds, where 3 rounds read ~5% high (the synchronised start still shows)
and per-user speed moves < 1%. Each row carries the summary's `steady_state_reached`; a point
without it is kept in points.csv but never on a frontier.

Ladder: C starts at one client per batch instance (colocated instances, or decode instances)
and doubles until tokens/s/GPU grows by less than `min_gain` (the fleet is saturated: more
clients only queue), per-user speed falls below `min_tokens_per_s_per_user`, C reaches the
fleet's running capacity (`running_capacity`: what its batch instances can run at once, by
max_running_requests and by KV pages for a mean request; past it clients only wait in a queue,
and a point costs more the longer the queue), or C would pass `max_concurrency`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from pdsim.config import Config, FrontierConfig
from pdsim.search.deployments import COLOCATED, Deployment, deployment_config

log = logging.getLogger(__name__)

X, Y = "tokens_per_s_per_user_mean", "output_tokens_per_s_per_gpu"
# measure one point: its config -> a flat row (pdsim.search.rows.result_row + meets_slo)
Measure = Callable[[Config], dict[str, Any]]


def requests_for(concurrency: int, fcfg: FrontierConfig) -> int:
    """Requests a point at `concurrency` sends: one warm-up round, then `rounds` rounds (module doc)."""
    return concurrency + max(fcfg.rounds * concurrency, fcfg.min_counted_requests)


def point_config(cfg: Config, dep: Deployment, concurrency: int) -> Config:
    """The closed-loop run of `dep` at `concurrency` clients, sized by `requests_for`."""
    scenario = replace(cfg.scenario, concurrency=concurrency, num_requests=requests_for(concurrency, cfg.frontier),
                       warmup_requests=-1)
    return replace(deployment_config(cfg, dep), scenario=scenario, progress=False)


def check_frontier(fcfg: FrontierConfig) -> None:
    """One-line errors for values the schema's types cannot rule out."""
    if fcfg.gpus < 1 or fcfg.rounds < 2 or fcfg.max_concurrency < 1 or fcfg.min_counted_requests < 1:
        raise ValueError(f"frontier: gpus={fcfg.gpus}, max_concurrency={fcfg.max_concurrency} and "
                         f"min_counted_requests={fcfg.min_counted_requests} must be >= 1, rounds={fcfg.rounds} >= 2")
    if not fcfg.target_tokens_per_s_per_user > 0:
        raise ValueError(f"frontier: target_tokens_per_s_per_user must be > 0, got {fcfg.target_tokens_per_s_per_user}")


def _saturated(prev: dict[str, Any] | None, row: dict[str, Any], fcfg: FrontierConfig) -> bool:
    if not row[X] >= fcfg.min_tokens_per_s_per_user:
        return True
    return prev is not None and not row[Y] >= (1 + fcfg.min_gain) * prev[Y]


def running_capacity(cfg: Config, dep: Deployment) -> int:
    """Requests `dep`'s batch instances can run at once: max_running_requests, or as many mean
    requests (prompt + output tokens) as one instance's KV pool holds, times the instances."""
    from pdsim.perf import instance_kv_capacity_tokens
    from pdsim.workload import build_workload

    side = dep.colocated if dep.mode == COLOCATED else dep.decode
    assert side is not None
    cfg = deployment_config(cfg, dep)  # the model at the deployment's precision (KV bytes per token)
    c = cfg.cluster
    kv_tokens = c.kv_capacity_tokens or instance_kv_capacity_tokens(cfg.model, cfg.hardware, side.layout.parallel,
                                                                    c.gpu_memory_utilization, c.max_running_requests)
    wl = build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    per_request = max(1.0, float(wl.input_tokens.mean() + wl.output_tokens.mean()))
    return side.count * max(1, min(c.max_running_requests, int(kv_tokens // per_request)))


def run_ladder(cfg: Config, dep: Deployment, measure: Measure,
               on_point: Callable[[dict[str, Any]], None] | None = None, capacity: int = 0) -> list[dict[str, Any]]:
    """One row per concurrency of `dep`'s ladder (module docstring), in ladder order; `capacity`
    > 0 ends it at the first point with at least that many clients."""
    fcfg = cfg.frontier
    rows: list[dict[str, Any]] = []
    prev = None
    concurrency = dep.batch_instances
    while concurrency <= fcfg.max_concurrency:
        row = {**measure(point_config(cfg, dep, concurrency)), "deployment": dep.label,
               "deployment_text": dep.text, "family": dep.mode}
        rows.append(row)
        if on_point is not None:
            on_point(row)
        if _saturated(prev, row, fcfg) or 0 < capacity <= concurrency:
            break
        prev = row
        concurrency *= 2
    return rows


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good on both axes and better on one (higher is
    better on both); of identical points only the first counts."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    order = np.lexsort((np.arange(x.size), -y, -x))  # x descending, then y descending, then index
    mask = np.zeros(x.size, dtype=bool)
    best_y = -np.inf
    for i in order:
        if y[i] > best_y:
            mask[i] = True
            best_y = y[i]
    return mask


def mark_frontier(points: pd.DataFrame) -> pd.DataFrame:
    """`points` with `on_frontier` (Pareto over the family's steady points) and `on_slo_frontier`
    (Pareto over the family's steady points that meet the SLO)."""
    out = points.copy()
    out["on_frontier"] = False
    out["on_slo_frontier"] = False
    finite = np.isfinite(out[X].astype(float)) & np.isfinite(out[Y].astype(float))
    for _, group in out.groupby("family", sort=True):
        for column, keep in (("on_frontier", group["steady_state_reached"]),
                             ("on_slo_frontier", group["steady_state_reached"] & group["meets_slo"])):
            sel = group[keep.astype(bool) & finite.loc[group.index]]
            if len(sel):
                mask = pareto_mask(sel[X].to_numpy(), sel[Y].to_numpy())
                out.loc[sel.index[mask], column] = True
    return out


def best_at_target(points: pd.DataFrame, target: float, family: str | None = None) -> dict[str, Any] | None:
    """The steady point meeting the SLO at >= `target` tokens/s/user with the most tokens/s/GPU
    (of one family, or of all); ties: fewer GPUs, then label order. None when no point qualifies."""
    ok = points["steady_state_reached"].astype(bool) & points["meets_slo"].astype(bool) & (points[X] >= target)
    if family is not None:
        ok &= points["family"] == family
    qualifying = points[ok]
    if qualifying.empty:
        return None
    best = qualifying.sort_values([Y, "gpus", "deployment", "concurrency"], ascending=[False, True, True, True],
                                  kind="stable").iloc[0]
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in best.to_dict().items()}


Y_AT = "output_tokens_per_s_per_gpu_at_target"


def ranking_at_target(points: pd.DataFrame, target: float) -> pd.DataFrame:
    """Per deployment, the most tokens/s/GPU it gives at >= `target` tokens/s/user, best first
    (ties: fewer GPUs, then label): the best of its steady SLO-meeting points at or above the
    target, and of the straight line between two such neighbours on its ladder that straddle
    the target, read at the target (`interpolated`). Deployments that never reach the target
    while meeting the SLO are left out."""
    rows = []
    for label, dep in points.groupby("deployment", sort=True):
        found = _at_target(dep.sort_values("concurrency"), target)
        if found is not None:
            first = dep.iloc[0]
            rows.append({"deployment": label, "deployment_text": first["deployment_text"], "family": first["family"],
                         "gpus": int(first["gpus"]), **found})
    out = pd.DataFrame(rows, columns=["deployment", "deployment_text", "family", "gpus", Y_AT, "concurrency_from",
                                      "concurrency_to", "interpolated"])
    return out.sort_values([Y_AT, "gpus", "deployment"], ascending=[False, True, True], kind="stable",
                           ignore_index=True)


def _at_target(ladder: pd.DataFrame, target: float) -> dict[str, Any] | None:
    ok = (ladder["steady_state_reached"].astype(bool) & ladder["meets_slo"].astype(bool)).to_numpy()
    x, y, c = ladder[X].to_numpy(float), ladder[Y].to_numpy(float), ladder["concurrency"].to_numpy()
    best: dict[str, Any] | None = None
    for i in range(len(x)):
        if not (ok[i] and x[i] >= target):
            continue
        cands = [(y[i], c[i], False)]
        if i + 1 < len(x) and ok[i + 1] and x[i + 1] < target:
            share = (x[i] - target) / (x[i] - x[i + 1])
            cands.append((y[i] + share * (y[i + 1] - y[i]), c[i + 1], True))
        for value, upper, interpolated in cands:
            if best is None or value > best[Y_AT]:
                best = {Y_AT: float(value), "concurrency_from": int(c[i]), "concurrency_to": int(upper),
                        "interpolated": interpolated}
    return best
