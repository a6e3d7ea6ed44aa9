"""The closed loop's steady-state window, its summary, and sglang's random length draw."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pdsim.config import LengthDist
from pdsim.metrics import Slo, summarize
from pdsim.summary import format_summary
from pdsim.workload.closed_loop import ClosedLoop, steady_window
from pdsim.workload.distributions import sample_lengths
from pdsim.workload.errors import WorkloadError


def test_window_by_hand() -> None:
    # C=2, six requests (sent, ended): two at t=0, then each sent at an end.
    sent = np.array([0.0, 0.0, 1.0, 2.0, 3.0, 3.5])
    ends = np.array([1.0, 2.0, 3.0, 3.5, 6.0, 4.0])
    w = steady_window(sent, ends, concurrency=2, warmup_requests=2)
    # opens when request #2 (0-based, send order) is sent: t=1; closes at the (6-2+1)=5th end:
    # sorted ends 1, 2, 3, 3.5, 4, 6 -> 4.0 (a client ended and had nothing left to send)
    assert (w.start_s, w.end_s, w.length_s) == (1.0, 4.0, 3.0)
    assert list(w.counted) == [False, False, True, True, True, True]  # sent in [1, 4), however late they end


def test_a_whole_run_without_warmup_counts_every_request() -> None:
    # bench_serving (InferenceX): no warm-up in the statistics, the whole run averaged: the
    # first wave, the drain and every request between, from the first send to the last end
    sent = np.array([0.0, 0.0, 1.0, 2.0, 3.0, 3.5])
    ends = np.array([1.0, 2.0, 3.0, 3.5, 6.0, 4.0])
    w = ClosedLoop(2, warmup_requests=0, barrier=True).window(sent, ends)
    assert (w.start_s, w.end_s) == (0.0, 6.0) and w.counted.all()
    assert not ClosedLoop(2, warmup_requests=0, barrier=True).at_barrier(0)  # nobody waits


def test_window_with_think_time_and_more_warmup() -> None:
    sent = np.array([0.0, 0.0, 1.5, 2.5, 3.5, 4.0])
    ends = np.array([1.0, 2.0, 3.0, 3.5, 6.0, 4.0])
    w = steady_window(sent, ends, concurrency=2, warmup_requests=3, think_s=0.5)
    assert (w.start_s, w.end_s) == (2.5, 4.5)  # request #3 sent at 2.5; 5th of (end + 0.5) = 4.5
    assert list(w.counted) == [False, False, False, True, True, True]


def test_too_few_requests_reach_no_steady_state() -> None:
    w = steady_window(np.zeros(3), np.array([1.0, 2.0, 3.0]), concurrency=3, warmup_requests=3)
    assert not w.reached and not w.counted.any()
    # a window exists (opens at 1, closes at the 4th of 6 ends = 4) but counts 2 < C = 3 requests
    sent = np.array([0.0, 0.0, 0.0, 1.0, 2.0, 3.5])
    ends = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert not steady_window(sent, ends, concurrency=3, warmup_requests=4).reached
    assert steady_window(sent, ends, concurrency=3, warmup_requests=3).reached  # 3 counted


def _trace(sent: list[float], ends: list[float], outputs: int = 5) -> pd.DataFrame:
    n = len(sent)
    first = np.asarray(sent) + 0.1
    return pd.DataFrame({
        "request_id": np.arange(n), "arrival_s": sent, "finish_s": ends, "first_token_s": first,
        "last_token_s": ends, "prefill_end_s": first, "output_tokens": [outputs] * n, "input_tokens": [10] * n,
        "cached_prefix_tokens": [0] * n, "status": ["finished"] * n, "token_times_s": [None] * n,
    })


def test_summary_counts_the_window_only() -> None:
    trace = _trace([0.0, 0.0, 1.0, 2.0, 3.0, 3.5], [1.0, 2.0, 3.0, 3.5, 6.0, 4.0])
    s = summarize(trace, Slo(1.0, 1.0), loop=ClosedLoop(2, warmup_requests=2), gpus=2)
    loop = s["closed_loop"]
    assert (loop["counted_requests"], loop["window_start_s"], loop["window_end_s"]) == (4, 1.0, 4.0)
    assert s["requests"] == 4
    # completions inside (1, 4]: ends 2, 3, 3.5, 4 -> 4 requests, 20 tokens over 3 s
    assert s["throughput_rps"] == pytest.approx(4 / 3) and s["output_tokens_per_s"] == pytest.approx(20 / 3)
    assert s["output_tokens_per_s_per_gpu"] == pytest.approx(10 / 3)
    # latency over the counted: e2e of requests 2..5 = 2, 1.5, 3, 0.5
    assert s["e2e_s"]["mean"] == pytest.approx(7.0 / 4)
    tpot = (np.array([3.0, 3.5, 6.0, 4.0]) - np.array([1.1, 2.1, 3.1, 3.6])) / 4
    assert s["tokens_per_s_per_user"]["mean"] == pytest.approx(float(np.mean(1 / tpot)))
    assert s["tokens_per_s_per_user"]["p50"] == pytest.approx(float(np.median(1 / tpot)))
    text = format_summary(s, "t")
    assert "steady-state window 1.00-4.00 s counts 4" in text and "per GPU (2 GPUs)" in text


def test_summary_warns_without_a_steady_state() -> None:
    trace = _trace([0.0, 0.0], [1.0, 2.0])
    s = summarize(trace, Slo(1.0, 1.0), loop=ClosedLoop(2, warmup_requests=2))
    assert not s["closed_loop"]["steady_state_reached"] and s["requests"] == 2
    assert "WARNING closed loop: concurrency 2 with 2 requests never reached a steady state" in format_summary(s, "t")


def test_random_lengths_follow_bench_serving() -> None:
    rng = np.random.default_rng(0)
    lengths = sample_lengths(LengthDist(kind="random", value=100, range_ratio=0.5), 5000, rng, "w")
    assert lengths.min() == 50 and lengths.max() == 100  # [max(int(100 * 0.5), 1), 100], both ends
    assert abs(lengths.mean() - 75) < 1
    ones = sample_lengths(LengthDist(kind="random", value=100, range_ratio=1.0), 10, rng, "w")
    assert list(ones) == [100] * 10
    floor = sample_lengths(LengthDist(kind="random", value=3, range_ratio=0.0), 200, rng, "w")
    assert floor.min() == 1  # never a zero-token request


def test_random_lengths_reject_a_bad_ratio() -> None:
    with pytest.raises(WorkloadError, match="range_ratio.*must be in \\[0, 1\\], got 1.5"):
        sample_lengths(LengthDist(kind="random", value=100, range_ratio=1.5), 1, np.random.default_rng(0), "w")
