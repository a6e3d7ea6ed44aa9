"""Build the workload a scenario describes: synthetic or a trace, then window/limit/rescale."""

from __future__ import annotations

import numpy as np

from pdsim.config import ScenarioConfig
from pdsim.paths import resolve_data_path
from pdsim.rng import stream
from pdsim.workload.distributions import arrival_times_s
from pdsim.workload.errors import WorkloadError
from pdsim.workload.request import Workload, make_workload
from pdsim.workload.synthetic import generate_synthetic

SOURCES = ("synthetic", "mooncake", "azure", "lengths_csv", "csv")
# trace readers (loaders.py, pyarrow) are imported when a trace is read, not with the package


def build_workload(cfg: ScenarioConfig, seed: int = 0, data_dir: str = "") -> Workload:
    """The requests of scenario `cfg`, in arrival order, with ids 0..n-1."""
    where = f"scenario {cfg.name}"
    if cfg.source == "synthetic":
        return generate_synthetic(cfg, seed, data_dir)
    if cfg.source not in SOURCES:
        raise WorkloadError(where, "source", f"unknown value {cfg.source!r} (choose from {SOURCES})")
    if not cfg.path:
        raise WorkloadError(where, "path", f"source {cfg.source!r} needs a trace path")
    path = resolve_data_path(cfg.path, data_dir)
    if cfg.source == "lengths_csv":
        return _sampled_lengths(cfg, path, seed)
    from pdsim.workload import loaders

    read = {"mooncake": loaders.load_mooncake, "azure": loaders.load_azure, "csv": loaders.load_plain_csv}
    workload = read[cfg.source](path, cfg.name)
    return reshape(workload, cfg)


def reshape(workload: Workload, cfg: ScenarioConfig) -> Workload:
    """Apply the time window, the request limit, then speed-up or rate rescaling."""
    where = f"scenario {cfg.name}"
    if cfg.speedup <= 0:
        raise WorkloadError(where, "speedup", f"must be > 0, got {cfg.speedup}")
    if cfg.num_requests < 0:
        raise WorkloadError(where, "num_requests", f"must be >= 0, got {cfg.num_requests}")
    t = workload.arrival_s
    end = cfg.end_s if cfg.end_s > 0 else np.inf
    keep = np.flatnonzero((t >= cfg.start_s) & (t < end))
    if cfg.num_requests:
        keep = keep[: cfg.num_requests]
    if keep.size == 0:
        raise WorkloadError(where, "start_s/end_s", f"window [{cfg.start_s}, {cfg.end_s}) holds no requests")
    arrival = t[keep] - t[keep[0]]
    if cfg.target_rate_rps > 0:
        current = (keep.size - 1) / arrival[-1] if arrival[-1] > 0 else np.nan
        if np.isfinite(current):
            arrival = arrival * (current / cfg.target_rate_rps)
    else:
        arrival = arrival / cfg.speedup
    return _subset(workload, keep, arrival)


def _subset(workload: Workload, keep: np.ndarray, arrival_s: np.ndarray) -> Workload:
    offsets = workload.hash_offsets
    lengths = offsets[keep + 1] - offsets[keep]
    new_offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if workload.hash_values.size:
        index = np.concatenate([np.arange(offsets[i], offsets[i + 1]) for i in keep]) if lengths.sum() \
            else np.zeros(0, dtype=np.int64)
        values = workload.hash_values[index]
    else:
        values = workload.hash_values
    return Workload(
        name=workload.name,
        arrival_s=arrival_s,
        input_tokens=workload.input_tokens[keep],
        output_tokens=workload.output_tokens[keep],
        session_id=workload.session_id[keep],
        hash_offsets=new_offsets,
        hash_values=values,
        block_tokens=workload.block_tokens,
    )


def _sampled_lengths(cfg: ScenarioConfig, path, seed: int) -> Workload:
    from pdsim.workload.loaders import load_lengths_csv

    where = f"scenario {cfg.name}"
    inputs, outputs = load_lengths_csv(path)
    n = cfg.num_requests or inputs.size
    rows = stream(seed, "length_rows").integers(0, inputs.size, size=n)
    arrivals = arrival_times_s(n, cfg.rate_rps, cfg.arrival, cfg.arrival_cv, stream(seed, "arrivals"), where)
    return make_workload(cfg.name, arrivals, inputs[rows], outputs[rows])
