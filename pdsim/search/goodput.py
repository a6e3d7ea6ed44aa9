"""Goodput: the highest arrival rate at which enough requests meet both SLOs.

The search is a bracket-then-bisect over the arrival rate: grow the rate geometrically until
attainment drops below the target, then bisect between the last passing and first failing rate
until the bracket is within `rel_tol`. Every probe is kept, so the caller can plot the
attainment-vs-rate curve that the search visited. Attainment is evaluated with the same seed at
every rate, so it is a deterministic function of the rate. `attainment_at` returns the attainment,
or (attainment, passed) when the pass verdict is not `attainment >= target` (the `percentiles`
criterion). A search that runs out of `max_probes` before the bracket is within `rel_tol` says
so (`converged` false) instead of presenting its last passing rate as the goodput.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Probe:
    rate_rps: float
    attainment: float
    passed: bool


@dataclass(frozen=True)
class GoodputResult:
    goodput_rps: float  # highest passing rate found (0 if even the lowest probe failed)
    upper_rps: float  # lowest failing rate found (inf if none failed below max_rate_rps)
    target: float
    probes: tuple[Probe, ...] = field(default_factory=tuple)
    converged: bool = True  # False: max_probes ran out before the bracket reached rel_tol

    def per_gpu(self, gpus: int) -> float:
        if gpus < 1:
            raise ValueError(f"gpus must be >= 1, got {gpus}")
        return self.goodput_rps / gpus


def find_goodput(
    attainment_at: Callable[[float], float | tuple[float, bool]],
    target: float = 0.9,
    start_rps: float = 1.0,
    rel_tol: float = 0.02,
    max_rate_rps: float = 1e5,
    min_rate_rps: float = 1e-3,
    max_probes: int = 40,
) -> GoodputResult:
    """Bracket then bisect `attainment_at(rate) >= target`; returns the passing edge."""
    if not 0 < target <= 1:
        raise ValueError(f"attainment target must be in (0, 1], got {target}")
    if start_rps <= 0 or rel_tol <= 0:
        raise ValueError(f"start_rps and rel_tol must be > 0, got {start_rps}, {rel_tol}")
    if max_probes < 2:
        raise ValueError(f"search: field 'max_probes' must be >= 2, got {max_probes}")
    probes: list[Probe] = []

    def probe(rate: float) -> bool:
        got = attainment_at(rate)
        value, passed = got if isinstance(got, tuple) else (got, got >= target)
        probes.append(Probe(rate, value, passed))
        log.info("rate %.4g req/s: attainment %.3f (%s)", rate, value, "pass" if passed else "fail")
        return passed

    lo, hi = _bracket(probe, start_rps, min_rate_rps, max_rate_rps, max_probes)
    while hi != float("inf") and lo > 0 and (hi - lo) > rel_tol * lo and len(probes) < max_probes:
        mid = (lo * hi) ** 0.5 if hi / lo > 4 else (lo + hi) / 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    converged = _settled(lo, hi, rel_tol, min_rate_rps, max_rate_rps)
    if not converged:
        log.warning("goodput search stopped after %d probes (search.max_probes) with the edge in [%.4g, %.4g) req/s",
                    len(probes), lo, hi)
    return GoodputResult(lo, hi, target, tuple(sorted(probes, key=lambda p: p.rate_rps)), converged)


def _settled(lo: float, hi: float, rel_tol: float, min_rate: float, max_rate: float) -> bool:
    """Whether the search ended for a reason other than running out of probes."""
    if hi == float("inf"):
        return lo >= max_rate
    if lo == 0:
        return hi / 2 < min_rate
    return (hi - lo) <= rel_tol * lo


def _bracket(
    probe: Callable[[float], bool], start: float, min_rate: float, max_rate: float, max_probes: int
) -> tuple[float, float]:
    """(passing rate or 0, failing rate or inf) around the edge."""
    rate = start
    if probe(rate):
        for _ in range(max_probes - 1):
            if rate >= max_rate:
                break
            nxt = min(rate * 2, max_rate)
            if not probe(nxt):
                return rate, nxt
            rate = nxt
        return rate, float("inf")
    hi = rate
    for _ in range(max_probes - 1):
        rate /= 2
        if rate < min_rate:
            return 0.0, hi
        if probe(rate):
            return rate, hi
        hi = rate
    return 0.0, hi
