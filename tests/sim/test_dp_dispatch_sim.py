"""A prefill instance of two attention-DP ranks under SGLang's dispatch (bootstrap_room % dp):
the timeline worked out from the trace's rooms, against the balanced spread of the same load."""

from __future__ import annotations

import pytest

from pdsim.cli import compose_config
from pdsim.config import Config
from pdsim.perf import build_latency_model, prefill_ranks_time_s
from pdsim.run import run_simulation

PROMPT_TOKENS, DP = 1024, 2


def _cfg(dispatch: str) -> Config:
    # one prompt per rank per forward (1024 tokens a rank); all 8 requests arrive at t = 0
    return compose_config([
        "model=deepseek_v3", "hardware=b200", "perf=measured", "perf.engine_version=0.5.14",
        "model.gemm_quant=fp8_block", "model.moe_quant=fp8_block", "cluster.mode=disaggregated",
        "cluster.prefill=1", "cluster.decode=1", "cluster.prefill_tp=1", f"cluster.prefill_dp={DP}",
        f"cluster.prefill_moe_ep={DP}", "cluster.decode_tp=8", "cluster.decode_moe_ep=8",
        "cluster.kv_capacity_tokens=65536", f"cluster.max_prefill_tokens={PROMPT_TOKENS}",
        f"cluster.chunk_size_tokens={PROMPT_TOKENS}", f"cluster.prefill_dp_dispatch={dispatch}",
        "scenario=bench_random", "scenario.num_requests=8", "scenario.concurrency=8",
        f"scenario.input.value={PROMPT_TOKENS}", "scenario.input.range_ratio=1.0", "scenario.output.value=4",
        "scenario.output.range_ratio=1.0", "progress=false",
    ])


def test_each_rank_works_through_its_own_queue() -> None:
    cfg = _cfg("bootstrap_room")
    trace = run_simulation(cfg).trace.sort_values("request_id")  # (run checks the end-of-run invariants)
    assert (trace["status"] == "finished").all()
    start_s = trace["bootstrap_leave_s"].max()
    assert (trace["bootstrap_leave_s"] == start_s).all()  # every prompt waits before the first forward
    latency = build_latency_model(cfg.perf, cfg.model, cfg.hardware, cfg.cluster.parallel("prefill"))
    queues = [[rid for rid, room in zip(trace["request_id"], trace["bootstrap_room"], strict=True) if room % DP == rank]
              for rank in range(DP)]
    expected, now = {}, start_s
    for forward in range(max(len(q) for q in queues)):  # forward f: the f-th prompt of every rank that has one
        ranks = [[(PROMPT_TOKENS, 0)] if forward < len(q) else [] for q in queues]
        now += prefill_ranks_time_s(latency, ranks)
        expected.update({q[forward]: now for q in queues if forward < len(q)})
    got = dict(zip(trace["request_id"], trace["prefill_end_s"], strict=True))
    assert got == pytest.approx(expected, rel=1e-12)
    balanced = run_simulation(_cfg("balanced")).trace
    assert balanced["prefill_end_s"].nunique() == 8 // DP  # two prompts a forward, wherever they came from
    assert trace["prefill_end_s"].nunique() == max(len(q) for q in queues)
