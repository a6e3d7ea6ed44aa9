"""`simulate(cfg, workload)`: run one configuration to completion and check its invariants.

The result holds the per-request trace (pdsim.trace schema, one row per request, each finished,
failed or rejected), the per-instance time series, per-instance and per-link statistics.
`check_invariants` runs at the end of every simulation and raises `InvariantError` when a KV
page leaked, a cache block is still referenced, a flow is still open or a request is missing or
recorded twice.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
from mypy_extensions import mypyc_attr
from tqdm import tqdm

from pdsim.config import Config
from pdsim.policy.decisions import DecisionLog
from pdsim.sim.cluster import Simulation
from pdsim.sim.events import NoEventsLeft, now_s
from pdsim.sim.records import delivered
from pdsim.trace import STATUSES
from pdsim.workload.request import Workload

log = logging.getLogger(__name__)


@mypyc_attr(native_class=False)
class InvariantError(RuntimeError):
    """The simulation ended in an inconsistent state (a simulator bug, never a user error)."""


@mypyc_attr(native_class=False)
class SimulationStuck(RuntimeError):
    """No event left but some requests never reached a terminal status."""


@dataclass
class SimResult:
    trace: pd.DataFrame
    timeseries: pd.DataFrame
    instance_stats: dict[str, dict[str, Any]]
    link_stats: dict[str, dict[str, float]] = field(default_factory=dict)
    sim_time_s: float = 0.0
    wall_s: float = 0.0
    events: int = 0  # simpy events scheduled
    scaling_events: list[dict[str, Any]] = field(default_factory=list)  # role moves (sim/scaling.py)


def simulate(
    cfg: Config, workload: Workload, progress: bool = False, decisions: DecisionLog | None = None
) -> SimResult:
    """Simulate `workload` on the cluster `cfg` describes; deterministic for a given cfg.seed.
    `decisions`: a log every instance writes its scheduling decisions into (None = off)."""
    t0 = time.perf_counter()
    sim = Simulation(cfg, workload)
    for inst in sim.instances:
        inst.decisions = decisions
    # (no bar at all when off: a disabled tqdm still builds its lock, importing multiprocessing, ~5 ms)
    bar = tqdm(total=len(workload), unit="req", desc="pdsim") if progress else None
    with bar if bar is not None else nullcontext(), _rare_gc():
        sim.on_terminal = bar.update if bar is not None else None
        _run(sim)
    check_invariants(sim)
    wall_s = time.perf_counter() - t0
    trace = delivered(sim.recorder.to_frame(), cfg.cluster.token_delivery_s)
    log.info("simulated %d requests to t=%.3f s in %.2f s wall", len(trace), now_s(sim.events), wall_s)
    return SimResult(
        trace=trace,
        timeseries=sim.sampler.to_frame(),
        instance_stats=instance_stats(sim),
        link_stats=link_stats(sim),
        sim_time_s=float(now_s(sim.events)),
        wall_s=wall_s,
        events=sim.events.scheduled(),
        scaling_events=list(sim.scaler.events) if sim.scaler is not None else [],
    )


@contextmanager
def _rare_gc(first_generation: int = 1_000_000) -> Iterator[None]:
    """Run the cyclic garbage collector rarely during a run. A run frees what it allocates by
    reference counting and creates almost no cyclic garbage until its end (a 20k-request run with
    the collector off leaves its RSS unchanged), while each collection walks the live objects:
    with the default threshold (700 allocations) that was ~10% of a run, with 20,000 ~4% of a
    128-instance one. What exists before the run (config, workload, tables) is frozen out of the
    walks. Restored after."""
    old = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(old[0], first_generation), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)
        gc.unfreeze()


def _run(sim: Simulation) -> None:
    env, limit_s = sim.env, sim.cfg.max_sim_time_s
    if len(sim.workload) == 0:
        return
    until = env.any_of([sim.done, env.timeout(limit_s)]) if limit_s > 0 else sim.done
    try:
        env.events.run_until(until)  # (env.run(until=until), its loop compiled)
    except NoEventsLeft:
        raise SimulationStuck(_stuck_message(sim)) from None
    if not sim.done.triggered:
        _abort_unfinished(sim, f"unfinished at max_sim_time_s={limit_s}")


def _abort_unfinished(sim: Simulation, reason: str) -> None:
    for sr in list(sim.active.values()):
        sim.abort(sr, reason)
    for req in list(sim.workload)[sim.arrived:sim.total_requests]:
        sim.recorder.add({
            "request_id": req.request_id, "session_id": req.session_id, "arrival_s": req.arrival_s,
            "input_tokens": req.input_tokens, "output_tokens": req.output_tokens, "mode": sim.mode,
            "status": "failed", "failure_reason": f"not arrived by max_sim_time_s={sim.cfg.max_sim_time_s}",
        })


def _stuck_message(sim: Simulation) -> str:
    stuck = list(sim.active.values())[:5]
    where = [f"request {sr.rid} (poll {sr.poll.name}, times {sorted(sr.marked_times())})" for sr in stuck]
    return (
        f"simulation stuck at t={now_s(sim.events):.6f} s: {len(sim.active)} of {len(sim.workload)} requests "
        f"never reached a terminal status, e.g. {'; '.join(where)}"
    )


def check_invariants(sim: Simulation) -> None:
    """Raise InvariantError unless every resource is clean and every request recorded once."""
    problems: list[str] = []
    for inst in sim.instances:
        kv = getattr(inst, "kv", None)
        try:
            (kv.check_invariants if kv is not None else inst.pool.check_invariants)(final=True)
        except RuntimeError as exc:
            problems.append(str(exc))
        held = getattr(inst, "dp_rank", None)  # attention-DP balance: the requests each rank holds
        if held:
            problems.append(f"{inst.name}: DP ranks still hold requests {sorted(held)[:10]}")
    if sim.network.flows:
        problems.append(f"{len(sim.network.flows)} network flows still open")
    if sim.active:
        problems.append(f"requests {sorted(sim.active)[:10]} never reached a terminal status")
    if len(sim.recorder) != sim.total_requests:
        problems.append(f"trace has {len(sim.recorder)} rows for {sim.total_requests} requests")
    if not set(sim.recorder.statuses()) <= set(STATUSES):
        problems.append("trace has rows without a terminal status")
    if problems:
        raise InvariantError("; ".join(problems))


def instance_stats(sim: Simulation) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for inst in sim.instances:
        stats = inst.stats()
        pool = inst.kv.pool if hasattr(inst, "kv") else inst.pool
        stats["kv_capacity_tokens"] = pool.capacity_tokens
        stats["retractions"] = getattr(inst, "retractions", 0)
        out[inst.name] = stats
    return out


def link_stats(sim: Simulation) -> dict[str, dict[str, float]]:
    now = now_s(sim.events)
    return {
        name: {
            "bytes_moved": res.bytes_moved,
            "mean_utilization": res.bytes_moved / (res.capacity_bytes_per_s * now) if now > 0 else 0.0,
        }
        for name, res in sim.network.resources.items()
        if res.bytes_moved > 0
    }
