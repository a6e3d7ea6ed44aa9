"""The loaded probe (pilot): how much slower the served cluster runs its forwards than the offline
profile says, measured on requests that are not the replay's.

On a shared host the served instances slow each other (two busy scheduler processes, their HTTP
processes, the router and the client on a few cores) and whatever else runs on the machine slows
them all; an offline profile of one process sees neither. Right after the idle probes and before
the replay, the loop sends `n` pilot requests drawn from the same workload configuration under
another seed (same rate or closed loop, same length distributions, other token ids: no prefix
shared with the replay) and takes the served forwards' slowdown against the profile
(served.slowdown). The prediction of the replay uses it (perf.*_step_scale, through engine.json's
probe entry, facts.py); nothing of the replay itself goes in.
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from analysis.fidelity.served import slowdown, steps_frame
from pdsim.config import Config
from pdsim.perf.base import LatencyModel
from pdsim.workload import Workload
from pdsim.workload.closed_loop import ClosedLoop

PILOT_SEED_OFFSET = 7919  # pilot workload seed = the replay's + this (other arrivals and lengths)
PILOT_TOKEN_SEED = 1  # the replay's token ids come from seed 0: the pilot's share no prefix with them
PROBE_KEYS = {"prefill": "served_prefill_slowdown", "decode": "served_decode_slowdown"}


class ServedCluster(Protocol):  # real.RealCluster
    def replay(self, workload: Workload, drain_timeout_s: float = ..., seed: int = ...,
               loop: ClosedLoop | None = ...) -> tuple[pd.DataFrame, dict]: ...

    def served_steps(self, since_s: float) -> list[dict[str, Any]]: ...


def pilot_workload(workload_cfg: Config, num_requests: int) -> Workload:
    """`num_requests` requests of the replay's workload configuration under the pilot's seed."""
    from pdsim.workload import build_workload

    if num_requests < 1:
        raise ValueError(f"pilot requests must be >= 1, got {num_requests}")
    scenario = dataclasses.replace(workload_cfg.scenario, num_requests=num_requests)
    return build_workload(scenario, workload_cfg.seed + PILOT_SEED_OFFSET, workload_cfg.data_dir)


def run_pilot(cluster: ServedCluster, workload_cfg: Config, num_requests: int, model: LatencyModel,
              loop: ClosedLoop | None, steps_csv: Path) -> dict[str, float]:
    """Send the pilot, write its served steps to `steps_csv`; the probe entries it adds to
    engine.json (pilot_requests, served_prefill_slowdown, served_decode_slowdown; NaN for a kind
    with no forwards). A pilot request that does not finish is an error (the cluster is not fit
    to replay on)."""
    workload = pilot_workload(workload_cfg, num_requests)
    start = time.monotonic()
    trace, _ = cluster.replay(workload, seed=PILOT_TOKEN_SEED, loop=loop)
    steps = steps_frame(cluster.served_steps(start))
    steps.to_csv(steps_csv, index=False)
    unfinished = trace[trace["status"] != "finished"]
    if len(unfinished):
        reasons = sorted(set(unfinished["failure_reason"].astype(str)))
        raise RuntimeError(f"fidelity pilot: {len(unfinished)} of {len(trace)} requests did not finish ({reasons})")
    scale = slowdown(steps, model)
    return {"pilot_requests": float(num_requests), **{PROBE_KEYS[kind]: scale[kind] for kind in PROBE_KEYS}}


def probed_step_scale(probe: dict[str, float]) -> dict[str, float]:
    """perf.*_step_scale values a probe entry carries (a kind the pilot did not see: absent)."""
    out = {}
    for kind, key in PROBE_KEYS.items():
        value = probe.get(key)
        if value is not None and math.isfinite(value) and value > 0:
            out[f"{kind}_step_scale"] = float(value)
    return out
