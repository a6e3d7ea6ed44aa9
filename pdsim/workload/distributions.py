"""Arrival processes and token-length distributions for synthetic workloads."""

from __future__ import annotations

import numpy as np

from pdsim.config import LengthDist
from pdsim.paths import resolve_data_path
from pdsim.workload.errors import WorkloadError

ARRIVALS = ("poisson", "gamma")
LENGTH_KINDS = ("fixed", "random", "uniform", "lognormal", "empirical")


def interarrival_gaps_s(
    n: int, rate_rps: float, arrival: str, cv: float, rng: np.random.Generator, where: str
) -> np.ndarray:
    """n gaps with mean 1/rate: exponential (Poisson) or gamma with coefficient of variation cv."""
    if rate_rps <= 0:
        raise WorkloadError(where, "rate_rps", f"must be > 0, got {rate_rps}")
    if arrival == "poisson":
        return rng.exponential(1.0 / rate_rps, size=n)
    if arrival == "gamma":
        if cv <= 0:
            raise WorkloadError(where, "arrival_cv", f"must be > 0, got {cv}")
        shape = 1.0 / (cv * cv)
        return rng.gamma(shape, 1.0 / (rate_rps * shape), size=n)
    raise WorkloadError(where, "arrival", f"unknown value {arrival!r} (choose from {ARRIVALS})")


def arrival_times_s(
    n: int, rate_rps: float, arrival: str, cv: float, rng: np.random.Generator, where: str
) -> np.ndarray:
    """Arrival times starting at 0 (the first request arrives at t=0)."""
    gaps = interarrival_gaps_s(n, rate_rps, arrival, cv, rng, where)
    times = np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.zeros(0)
    return times


def sample_lengths(
    dist: LengthDist, n: int, rng: np.random.Generator, where: str, data_dir: str = ""
) -> np.ndarray:
    """n token lengths (int64, >= 1) drawn from `dist`."""
    if dist.kind == "fixed":
        _check_positive(dist.value, f"{where}.value", where)
        return np.full(n, dist.value, dtype=np.int64)
    if dist.kind == "random":
        return _bench_serving_random(dist, n, rng, where)
    if dist.low < 1 or dist.high < dist.low:
        raise WorkloadError(where, "low/high", f"need 1 <= low <= high, got {dist.low}..{dist.high}")
    if dist.kind == "uniform":
        return rng.integers(dist.low, dist.high + 1, size=n, dtype=np.int64)
    if dist.kind == "lognormal":
        if dist.mean <= 0 or dist.sigma < 0:
            raise WorkloadError(where, "mean/sigma", f"need mean > 0, sigma >= 0, got {dist.mean}, {dist.sigma}")
        mu = np.log(dist.mean) - dist.sigma**2 / 2
        raw = rng.lognormal(mu, dist.sigma, size=n)
        return np.clip(np.rint(raw), dist.low, dist.high).astype(np.int64)
    if dist.kind == "empirical":
        values = _empirical_values(dist, where, data_dir)
        return np.clip(rng.choice(values, size=n, replace=True), dist.low, dist.high).astype(np.int64)
    raise WorkloadError(where, "kind", f"unknown value {dist.kind!r} (choose from {LENGTH_KINDS})")


def _bench_serving_random(dist: LengthDist, n: int, rng: np.random.Generator, where: str) -> np.ndarray:
    """sglang bench_serving's random dataset: uniform integers in [max(int(value * range_ratio),
    1), value] (its `sample_random_requests`; its output lengths' floor is 0, here 1: a request
    makes at least its first token)."""
    _check_positive(dist.value, f"{where}.value", where)
    if not 0.0 <= dist.range_ratio <= 1.0:
        raise WorkloadError(where, "range_ratio", f"must be in [0, 1], got {dist.range_ratio}")
    low = max(int(dist.value * dist.range_ratio), 1)
    return rng.integers(low, dist.value + 1, size=n, dtype=np.int64)


def _check_positive(value: int, field: str, where: str) -> None:
    if value < 1:
        raise WorkloadError(where, field, f"must be >= 1, got {value}")


def _empirical_values(dist: LengthDist, where: str, data_dir: str) -> np.ndarray:
    import pandas as pd

    if not dist.path or not dist.column:
        raise WorkloadError(where, "path/column", "empirical lengths need both a CSV path and a column")
    path = resolve_data_path(dist.path, data_dir)
    if not path.is_file():
        raise WorkloadError(str(path), "path", "file not found")
    frame = pd.read_csv(path)
    if dist.column not in frame.columns:
        raise WorkloadError(str(path), dist.column, f"column missing (have {list(frame.columns)})")
    values = frame[dist.column].to_numpy()
    if values.size == 0:
        raise WorkloadError(str(path), dist.column, "no rows")
    if (values < 1).any():
        raise WorkloadError(str(path), dist.column, f"length must be >= 1, got {values[values < 1][0]}")
    return values.astype(np.int64)
