"""Goodput bisection on attainment curves with known answers."""

from __future__ import annotations

import pytest

from pdsim.search.goodput import find_goodput
from pdsim.search.task import floor_pct, format_goodput


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


def test_too_few_probes_is_reported_not_hidden():
    edge = 7.3
    short = find_goodput(lambda r: 1.0 if r <= edge else 0.4, start_rps=1.0, rel_tol=0.01, max_probes=5)
    # 1, 2, 4, 8 bracket the edge, one bisection (6) is all that is left: [6, 8) is not within 1%
    assert (short.goodput_rps, short.upper_rps, len(short.probes), short.converged) == (6.0, 8.0, 5, False)
    text = format_goodput(short, 1)
    assert "WARNING: search.max_probes=5 ran out" in text and "[6, 8) req/s" in text
    assert find_goodput(lambda r: 1.0 if r <= edge else 0.4, rel_tol=0.01).converged
    with pytest.raises(ValueError, match="max_probes"):
        find_goodput(lambda r: 1.0, max_probes=1)


def test_pass_verdict_may_differ_from_attainment():
    # the percentiles criterion: attainment alone does not decide the verdict
    result = find_goodput(lambda r: (0.95, r <= 3.0), start_rps=1.0, rel_tol=0.05)
    assert result.goodput_rps <= 3.0 < result.upper_rps and all(p.attainment == 0.95 for p in result.probes)


def test_table_rounds_attainment_down():
    assert floor_pct(0.8995) == "89.9" and floor_pct(0.9) == "90.0" and floor_pct(1.0) == "100.0"
    result = find_goodput(lambda r: 0.8995, start_rps=1.0, min_rate_rps=0.4)
    assert "89.9%  fail" in format_goodput(result, 1) and "90.0%" not in format_goodput(result, 1)
