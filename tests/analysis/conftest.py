"""Small synthetic traces for the analysis tests, built with TraceRecorder.

All times are on a 1/1024 s grid and every TTFT is a multiple of 10/1024 s, so adding 10% of a
TTFT to a time is exact in floating point and the other metrics stay bit-identical.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest

from pdsim.trace import TraceRecorder

GRID = 1024.0


def _q(x: np.ndarray) -> np.ndarray:
    return np.round(np.asarray(x) * GRID) / GRID


def _request(rng: np.random.Generator, rid: int, arrival: float) -> dict:
    inp = int(rng.integers(64, 8192))
    out = int(rng.integers(2, 200))
    route = float(_q(arrival + 0.002))
    boot_leave = float(_q(route + rng.uniform(0.001, 0.01)))
    start = float(_q(boot_leave + rng.exponential(0.05)))
    prefill_end = float(_q(start + inp * 2e-5))
    ttft = np.ceil((prefill_end - arrival) * GRID / 10) * 10 / GRID
    first = float(arrival + ttft)
    xfer_end = float(_q(prefill_end + inp * 2e-6 + 0.001))
    running = float(_q(xfer_end + 0.003))
    last = float(_q(max(first, running) + (out - 1) * rng.uniform(0.02, 0.06)))
    return dict(
        request_id=rid,
        arrival_s=arrival,
        input_tokens=inp,
        output_tokens=out,
        mode="disaggregated",
        prefill_instance=rid % 2,
        decode_instance=rid % 3,
        route_s=route,
        bootstrap_enter_s=route,
        bootstrap_leave_s=boot_leave,
        prefill_waiting_enter_s=boot_leave,
        prefill_start_s=start,
        prefill_end_s=prefill_end,
        inflight_enter_s=prefill_end,
        inflight_leave_s=xfer_end,
        prealloc_enter_s=route,
        prealloc_leave_s=float(_q(route + 0.002)),
        transfer_queue_enter_s=float(_q(route + 0.002)),
        transfer_queue_leave_s=xfer_end,
        transfer_start_s=prefill_end,
        transfer_end_s=xfer_end,
        transfer_bytes=inp * 1000,
        decode_waiting_enter_s=xfer_end,
        running_enter_s=running,
        first_token_s=first,
        last_token_s=last,
        finish_s=float(_q(last + 0.001)),
        status="finished",
    )


def make_trace(n: int = 120, seed: int = 0, rate_rps: float = 8.0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    arrivals = _q(np.cumsum(rng.exponential(1.0 / rate_rps, size=n)))
    rec = TraceRecorder()
    for rid, arrival in enumerate(arrivals):
        if rid % 40 == 39:
            rec.add(
                dict(
                    request_id=rid,
                    arrival_s=float(arrival),
                    input_tokens=100,
                    output_tokens=10,
                    mode="disaggregated",
                    status="rejected",
                    finish_s=float(arrival),
                    failure_reason="admission",
                )
            )
            continue
        rec.add(_request(rng, rid, float(arrival)))
    return rec.to_frame()


def make_timeseries(trace: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    end = float(trace["finish_s"].max())
    rows = []
    for t in np.arange(0.0, end, 0.5):
        for iid, role in (
            (0, "prefill"),
            (1, "prefill"),
            (0, "decode"),
            (1, "decode"),
            (2, "decode"),
        ):
            rows.append(
                dict(
                    time_s=t,
                    instance_id=iid,
                    role=role,
                    waiting_len=int(rng.integers(0, 6)),
                    running_len=int(rng.integers(0, 30)),
                    kv_used_fraction=float(rng.uniform(0.1, 0.9)),
                )
            )
    return pd.DataFrame(rows)


@pytest.fixture
def trace_factory() -> Callable[..., pd.DataFrame]:
    return make_trace


@pytest.fixture
def timeseries_factory() -> Callable[..., pd.DataFrame]:
    return make_timeseries
