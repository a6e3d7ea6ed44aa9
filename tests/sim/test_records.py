"""The simulator's typed-column recorder produces exactly the shared TraceRecorder's frame."""

from __future__ import annotations

import struct

import pandas as pd
import pytest

from pdsim.sim.records import SimRecorder
from pdsim.trace import TraceRecorder

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
