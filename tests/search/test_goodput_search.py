"""Goodput bisection on attainment curves with known answers."""

from __future__ import annotations

import pytest

from pdsim.search.goodput import find_goodput


def test_step_curve_found_within_tolerance():
    edge = 7.3
    result = find_goodput(lambda r: 1.0 if r <= edge else 0.4, target=0.9, start_rps=1.0, rel_tol=0.01)
    assert result.goodput_rps <= edge < result.upper_rps
    assert (result.upper_rps - result.goodput_rps) <= 0.01 * result.goodput_rps
    rates = [p.rate_rps for p in result.probes]
    assert rates == sorted(rates) and {1.0, 2.0, 4.0, 8.0} <= set(rates)


def test_search_downwards_when_start_fails():
    result = find_goodput(lambda r: max(0.0, 1 - r / 0.5), target=0.9, start_rps=10.0, rel_tol=0.02)
    assert result.goodput_rps == pytest.approx(0.05, rel=0.02)
    assert result.goodput_rps <= 0.05


def test_never_passing_gives_zero_and_always_passing_hits_cap():
    assert find_goodput(lambda r: 0.0, min_rate_rps=0.01).goodput_rps == 0.0
    capped = find_goodput(lambda r: 1.0, start_rps=1.0, max_rate_rps=64.0)
    assert capped.goodput_rps == 64.0 and capped.upper_rps == float("inf")
    assert capped.per_gpu(8) == 8.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="target"):
        find_goodput(lambda r: 1.0, target=1.5)
    with pytest.raises(ValueError, match="gpus"):
        find_goodput(lambda r: 1.0, max_rate_rps=2).per_gpu(0)
