"""The simulator's typed-column recorder produces exactly the shared TraceRecorder's frame."""

from __future__ import annotations

import math
import struct

import pandas as pd
import pytest
from simkit import make_config, make_requests

from pdsim.sim import state
from pdsim.sim.cluster import Simulation
from pdsim.sim.records import SimRecorder
from pdsim.sim.state import (
    FINISH_S,
    FIRST_TOKEN_S,
    PREALLOC_ENTER_S,
    ROUTE_S,
    TIME_COLUMNS,
    SimRequest,
    record_row,
    time_column,
)
from pdsim.trace import TraceRecorder
from pdsim.workload.request import Request

ROWS = [
    dict(request_id=2, arrival_s=0.5, input_tokens=10, output_tokens=3, mode="disaggregated", status="finished",
         prefill_instance=1, decode_instance=0, route_s=0.5, first_token_s=0.7, last_token_s=0.9,
         token_times_s=[0.7, 0.8, 0.9], bootstrap_room=2**62 + 5, transfer_bytes=12345, num_retractions=2),
    dict(request_id=0, arrival_s=0.0, input_tokens=7, output_tokens=4, mode="disaggregated", status="failed",
         failure_reason="transfer_failed: prefill:0 -> decode:0", session_id=3, cached_prefix_tokens=64),
    dict(request_id=1, arrival_s=0.1, input_tokens=5, output_tokens=1, mode="disaggregated", status="rejected",
         failure_reason="early_reject"),
]


def test_sim_recorder_frame_equals_trace_recorder_frame() -> None:
    shared, sim = TraceRecorder(), SimRecorder(3)
    for row in ROWS:
        shared.add(row)
        sim.add(row)
    assert len(sim) == 3 and sim.statuses() == ["finished", "failed", "rejected"]
    pd.testing.assert_frame_equal(sim.to_frame(), shared.to_frame(), check_exact=True)
    pd.testing.assert_frame_equal(SimRecorder(0).to_frame(), TraceRecorder().to_frame(), check_exact=True)


def test_sim_recorder_rejects_bad_rows() -> None:
    rec = SimRecorder(2)
    rec.add(dict(request_id=0, status="finished"))
    with pytest.raises(ValueError, match="recorded twice"):
        rec.add(dict(request_id=0, status="finished"))
    with pytest.raises(ValueError, match="not in"):
        rec.add(dict(request_id=1, status="lost"))
    with pytest.raises(KeyError, match="colour"):
        rec.add(dict(request_id=1, status="finished", colour="red"))
    with pytest.raises(struct.error):  # a value its column cannot hold: nothing of the row is kept
        rec.add(dict(request_id=1, status="finished", arrival_s="soon"))
    rec.add(dict(request_id=1, status="finished", arrival_s=2.5))
    assert len(rec) == 2 and rec.to_frame()["arrival_s"].tolist()[1] == 2.5


def test_record_row_records_the_row_the_trace_schema_describes() -> None:
    """The simulator's rows go to the recorder value by value (no dict per row): the frame equals
    the shared recorder's for the same row written out by hand, in both modes."""
    req = Request(4, 1.5, 100, 8, (1, 2), 16, 7)
    sr = SimRequest(req, prompt_tokens=100, token_times=[2.0, 2.5])
    for name, t_s in dict(route_s=1.5, prefill_end_s=1.75, first_token_s=2.0, finish_s=2.5).items():
        sr.mark(time_column(name), t_s)
    sim_run = Simulation(make_config(cluster=dict(prefill=4, decode=2)), make_requests([(0.0, 8, 2)]))
    sr.prefill, sr.decode = sim_run.prefill[3], sim_run.decode[1]
    sr.prompt.cached_tokens, sr.load.loaded_tokens, sr.load.kv_load_s, sr.load.skipped_tokens = 64, (16, 0, 32), 0.25, 5
    sr.generated, sr.bootstrap_room, sr.send.transfer_bytes, sr.num_retractions = 6, 2**62 + 1, 4096, 1
    expected = dict(request_id=4, session_id=7, arrival_s=1.5, input_tokens=100, output_tokens=6,
                    cached_prefix_tokens=64, cached_tokens_gpu=16, cached_tokens_host=16, cached_tokens_store=32,
                    kv_load_s=0.25, kv_load_skipped_tokens=5, prefill_instance=3, bootstrap_room=2**62 + 1,
                    transfer_bytes=4096, num_retractions=1, status="finished", token_times_s=[2.0, 2.5],
                    route_s=1.5, prefill_end_s=1.75, first_token_s=2.0, finish_s=2.5)
    for mode, decode_index in (("disaggregated", 1), ("colocated", 3)):
        shared, sim = TraceRecorder(), SimRecorder(5)
        shared.add({**expected, "mode": mode, "decode_instance": decode_index})
        record_row(sim, sr, mode, "finished", "")
        pd.testing.assert_frame_equal(sim.to_frame(), shared.to_frame(), check_exact=True)
    sim = SimRecorder(5)
    record_row(sim, sr, "disaggregated", "failed", "transfer_failed")
    assert sim.to_frame()["output_tokens"].tolist() == [8]  # the request's, not the tokens generated
    sim = SimRecorder(5)
    sr.send.transfer_bytes = 2**64  # int64 cannot hold it; floats go first
    sr.set_time(FIRST_TOKEN_S, 9.0)
    sr.mark(PREALLOC_ENTER_S, 1.8)  # (a time the recorded row does not have: NaN there)
    with pytest.raises((OverflowError, ValueError)):  # (compiled, mypyc says ValueError)
        record_row(sim, sr, "disaggregated", "finished", "")
    sr.send.transfer_bytes = 4096
    sr.set_time(FIRST_TOKEN_S, 2.0)
    sr.times[PREALLOC_ENTER_S] = math.nan
    with pytest.raises(ValueError, match="status 'lost'"):
        record_row(sim, sr, "disaggregated", "lost", "")
    record_row(sim, sr, "disaggregated", "finished", "")  # nothing of the refused rows was kept
    frame = sim.to_frame()
    assert len(sim) == 1 and frame["first_token_s"].tolist() == [2.0] and frame["transfer_bytes"].tolist() == [4096]
    assert frame["prealloc_enter_s"].isna().all()


def test_trace_times_are_marked_once_set_over_and_named() -> None:
    for k, name in enumerate(TIME_COLUMNS):  # each constant is its column's index, named after it
        assert getattr(state, name.upper()) == k == time_column(name)
    sr = SimRequest(Request(3, 0.0, 10, 2, (), 16, 0))
    assert not sr.has_time(ROUTE_S) and sr.marked_times() == []
    sr.mark(ROUTE_S, 1.25)
    sr.mark(ROUTE_S, 2.0)  # (first occurrence wins)
    sr.set_time(FINISH_S, 3.0)
    sr.set_time(FINISH_S, 3.5)  # (set over)
    assert sr.has_time(ROUTE_S) and sr.marked_times() == ["route_s", "finish_s"]
    assert [sr.times[ROUTE_S], sr.times[FINISH_S]] == [1.25, 3.5]
    for bad in ("lunch_s", "arrival_s", ""):
        with pytest.raises(KeyError, match=rf"'{bad}' is not a trace time \(pdsim.trace: route_s"):
            time_column(bad)
    sr.reset_attempt()
    assert sr.marked_times() == [] and sr.attempt == 1


def test_a_request_not_placed_has_no_instances_to_reach() -> None:
    sr = SimRequest(Request(9, 0.0, 10, 2, (), 16, 0))
    with pytest.raises(RuntimeError, match=r"request 9 \(attempt 0\) has no prefill instance"):
        sr.prefill_side()
    with pytest.raises(RuntimeError, match=r"request 9 \(attempt 0\) has no decode instance"):
        sr.decode_side()
    sim_run = Simulation(make_config(cluster=dict(prefill=2, decode=2)), make_requests([(0.0, 8, 2)]))
    sr.prefill, sr.decode = sim_run.prefill[1], sim_run.decode[0]
    assert sr.prefill_side() is sim_run.prefill[1] and sr.decode_side() is sim_run.decode[0]
