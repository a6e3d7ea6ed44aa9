"""Same seed -> identical trace; every request exactly once with a terminal status."""

from __future__ import annotations

import pandas as pd
import pytest
from simkit import make_config, synthetic

from pdsim.sim import simulate
from pdsim.trace import STATUSES

BUSY = dict(
    prefill=2, decode=2, prefix_cache=True, chunk_size_tokens=256, max_prefill_tokens=512,
    kv_capacity_tokens=3000, page_size_tokens=16,
)
FAULTY = dict(transfer_failure_prob=0.05, crash_instance="decode:1", crash_at_s=20.0, retry_failed=True)


def _run(seed: int, routing: str = "power_of_two") -> pd.DataFrame:
    cfg = make_config(cluster=BUSY, policy=dict(routing=routing, decode_reserved_tokens=4), faults=FAULTY,
                      seed=seed, record_token_times=True, timeseries_interval_s=5.0)
    return simulate(cfg, synthetic(400, seed=3, rate_rps=10)).trace


def test_same_seed_gives_an_identical_trace() -> None:
    a, b = _run(1), _run(1)
    pd.testing.assert_frame_equal(a, b)


def test_other_seed_changes_random_draws_only_where_random() -> None:
    a, b = _run(1), _run(2)
    assert not a.bootstrap_room.equals(b.bootstrap_room)


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
@pytest.mark.parametrize("routing", ["round_robin", "least_loaded"])
def test_conservation_every_request_once_with_terminal_status(mode: str, routing: str) -> None:
    cfg = make_config(cluster={**BUSY, "mode": mode, "colocated": 3}, policy=dict(routing=routing),
                      timeseries_interval_s=2.0)
    workload = synthetic(500, seed=5, rate_rps=12)
    res = simulate(cfg, workload)
    t = res.trace
    assert list(t.request_id) == list(range(len(workload)))
    assert t.status.isin(STATUSES).all()
    finished = t[t.status == "finished"]
    assert (finished.output_tokens == workload.output_tokens[finished.request_id]).all()
    assert (finished.first_token_s >= finished.arrival_s).all()
    assert (finished.last_token_s >= finished.first_token_s).all()
    assert (t["mode"] == mode).all()
    ts = res.timeseries
    assert set(ts.role) == ({"colocated"} if mode == "colocated" else {"prefill", "decode"})
    assert ts.kv_used_fraction.between(0, 1).all()


def test_colocated_prefill_priority_runs() -> None:
    cfg = make_config(cluster={**BUSY, "mode": "colocated", "colocated": 2, "colocated_schedule": "prefill_priority"})
    t = simulate(cfg, synthetic(300, seed=7, rate_rps=10)).trace
    assert (t.status == "finished").all()


def test_max_sim_time_records_the_unfinished() -> None:
    cfg = make_config(cluster=BUSY, max_sim_time_s=5.0)
    t = simulate(cfg, synthetic(200, seed=1, rate_rps=10)).trace
    assert len(t) == 200
    late = t[t.status == "failed"]
    assert len(late) > 0 and late.failure_reason.str.contains("max_sim_time_s").all()


def test_mooncake_trace_slice_runs(data_dir) -> None:
    from pdsim.workload.loaders import load_mooncake
    from pdsim.workload.request import make_workload

    workload = load_mooncake(data_dir / "traces" / "mooncake_conversation_trace.jsonl")
    n, offsets = 300, workload.hash_offsets
    hashes = [workload.hash_values[offsets[i]:offsets[i + 1]] for i in range(n)]
    small = make_workload("mooncake300", workload.arrival_s[:n], workload.input_tokens[:n],
                          workload.output_tokens[:n], hash_lists=hashes, block_tokens=workload.block_tokens)
    cfg = make_config(cluster=dict(prefill=2, decode=2, prefix_cache=True, page_size_tokens=16,
                                   kv_capacity_tokens=400_000, max_prefill_tokens=8192, chunk_size_tokens=8192),
                      perf=dict(prefill_base_s=0.02, prefill_per_token_s=0.0001, decode_base_s=0.02),
                      hardware=dict(nic_gbps=400.0), faults=dict(bootstrap_timeout_s=0.0))
    t = simulate(cfg, small).trace
    assert (t.status == "finished").all()
    assert t.cached_prefix_tokens.sum() > 0
