"""Lockstep: pdsim and pdreal take the same scheduling decisions on the same workload.

pdreal's real engine loops run in virtual time (lockstep_harness: a fake model timed by the very
latency model pdsim uses, a timestamped transfer fabric); pdsim simulates the same 50 requests on
the same config. Both write a DecisionLog (pdsim.policy.decisions): every prefill forward's chunks,
every decode step that admits, resumes, joins, retracts or changes the batch, every colocated
iteration. The logs must be identical and every request's timestamps equal within 1 ns.

The workload forces chunked prefill (prompts up to 4x the chunk), decode pre-allocation waits
(a 480-token decode pool with a 4-token per-request reserve) and retractions (outputs that
outgrow the reserve). A prefix-heavy workload (shared system prompts, repeated prompts, sessions'
next turns; pdsim reads hash_ids, pdreal hashes its pages' tokens) checks that both prefix caches
hit, lock and evict the same blocks, PD and colocated. Times the two sides observe differently by design are not compared:
`transfer_queue_leave_s` / `decode_waiting_enter_s` (pdsim stamps the transfer's completion
event, pdreal the poll that sees it) and `bootstrap_enter_s`-style queue entries are equal anyway.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")

from lockstep_harness import run_real  # noqa: E402

from pdsim.config import (  # noqa: E402
    ClusterConfig,
    Config,
    HardwareConfig,
    ModelConfig,
    PerfConfig,
    PolicyConfig,
    ScenarioConfig,
    SloConfig,
)
from pdsim.policy.decisions import DecisionLog  # noqa: E402
from pdsim.sim import simulate  # noqa: E402
from pdsim.workload.request import Workload, make_workload  # noqa: E402

# 4 KV bytes per token (1 layer, 1 KV head of dim 1, bf16)
MODEL = ModelConfig(name="tiny", num_layers=1, hidden_size=256, num_heads=1, num_kv_heads=1, head_dim=1,
                    ffn_size=512, vocab_size=1000)
# a NIC so fast and no latencies: the KV arrives ~1e-11 s after the last chunk is sent (pdreal's
# virtual fabric: at once); a KV reload costs 4 B / 0.4 MB/s = 1e-5 s per token
HARDWARE = HardwareConfig(name="toy", bf16_tflops=100.0, hbm_gbps=1000.0, memory_gib=16.0, gpus_per_node=1,
                          nics_per_node=1, nic_gbps=1e15, pcie_gbps=0.0004)
LINEAR = PerfConfig(kind="linear", prefill_base_s=0.01234, prefill_per_token_s=0.000137, decode_base_s=0.00731,
                    decode_per_seq_s=0.000213, decode_per_ctx_token_s=1.7e-6)
COMPARED = ("arrival_s", "route_s", "bootstrap_leave_s", "prefill_start_s", "prefill_end_s", "prealloc_leave_s",
            "running_enter_s", "first_token_s", "last_token_s")


def config(mode: str = "disaggregated", schedule: str = "mixed", perf: PerfConfig = LINEAR,
           prefix_cache: bool = False, batch_wait: tuple[int, float] = (0, 0.0), recv_interval: int = 1) -> Config:
    cluster = ClusterConfig(
        mode=mode, prefill=1, decode=1, colocated=1, page_size_tokens=8, kv_capacity_tokens=480,
        max_running_requests=6, prealloc_slots=6, max_prefill_tokens=160, chunk_size_tokens=64,
        prefix_cache=prefix_cache, control_plane_latency_s=0.0, dispatch_latency_s=0.0, link_latency_s=0.0,
        transfer_aux_bytes=0, colocated_schedule=schedule, batch_wait_iters=batch_wait[0],
        batch_wait_tokens_ratio=batch_wait[1], recv_interval_steps=recv_interval,
    )
    return Config(scenario=ScenarioConfig(name="lockstep"), model=MODEL, hardware=HARDWARE, cluster=cluster,
                  policy=PolicyConfig(decode_reserved_tokens=4, new_token_ratio=0.3), slo=SloConfig(), perf=perf,
                  seed=7, progress=False, timeseries_interval_s=0.0, record_token_times=True)


def workload(n: int = 50, seed: int = 3) -> Workload:
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(0.09, n))
    inputs = rng.integers(9, 230, n)
    outputs = rng.integers(1, 120, n)
    return make_workload("lockstep", arrival, inputs.astype(np.int64), outputs.astype(np.int64))


def prefix_workload(n: int = 50, seed: int = 11) -> Workload:
    """Prefix-heavy: 4 system prompts of 3-6 blocks of 8 tokens (a page each) under every prompt,
    then its own blocks (the last one partial); one request in five repeats an earlier prompt
    exactly (its hit stops short of the whole prompt), one in five extends an earlier one (a
    session's next turn). Hash ids are chained as in Mooncake: equal ids, equal prefixes."""
    rng = np.random.default_rng(seed)
    systems = [[10 * s + b + 1 for b in range(int(rng.integers(3, 7)))] for s in range(4)]
    hashes: list[list[int]] = []
    inputs: list[int] = []
    fresh = 1000
    for k in range(n):
        kind = rng.integers(0, 5) if k else 2
        if kind == 0:  # the same prompt again
            j = int(rng.integers(0, k))
            hashes.append(list(hashes[j]))
            inputs.append(inputs[j])
            continue
        if kind == 1:
            j = int(rng.integers(0, k))
            base = hashes[j][:inputs[j] // 8]  # the earlier prompt's full blocks
        else:
            base = list(systems[int(rng.integers(0, 4))])
        own = int(rng.integers(1, 12))
        hashes.append(base + list(range(fresh, fresh + own)))
        fresh += own
        inputs.append(8 * (len(base) + own - 1) + int(rng.integers(1, 9)))
    arrival = np.cumsum(rng.exponential(0.09, n))
    outputs = rng.integers(1, 60, n)
    return make_workload("lockstep-prefix", arrival, np.array(inputs, dtype=np.int64), outputs.astype(np.int64),
                         hash_lists=[np.array(h, dtype=np.int64) for h in hashes], block_tokens=8)


def table_perf(tmp_path: Path) -> PerfConfig:
    """A profile CSV (pdreal profile's format) with uneven measured points."""
    rows = ["kind,num_seqs,new_tokens,context_tokens,latency_s"]
    for tokens in (8, 16, 32, 64, 128, 256):
        rows.append(f"prefill,1,{tokens},0,{0.011 + 0.00015 * tokens + 3e-7 * tokens ** 1.5:.9f}")
    for n in (1, 2, 3, 4, 6, 8):
        for ctx in (16, 64, 256, 512):
            rows.append(f"decode,{n},{n},{n * ctx},{0.0069 + 0.00031 * n + 2.1e-6 * n * ctx:.9f}")
    path = tmp_path / "profile.csv"
    path.write_text("\n".join(rows) + "\n")
    return PerfConfig(kind="table", path=str(path), table_model="", table_hardware="")


def run_sim(cfg: Config, wl: Workload) -> tuple[pd.DataFrame, DecisionLog]:
    log = DecisionLog()
    return simulate(cfg, wl, decisions=log).trace, log


def assert_same_decisions(sim: DecisionLog, real: DecisionLog) -> None:
    for k, (s, r) in enumerate(zip(sim.entries, real.entries, strict=False)):
        assert (s.instance, s.kind, s.detail) == (r.instance, r.kind, r.detail), f"decision {k}: sim {s} vs real {r}"
        assert s.time_s == pytest.approx(r.time_s, abs=1e-9), f"decision {k} time: sim {s} vs real {r}"
    assert len(sim.entries) == len(real.entries), f"{len(sim.entries)} sim vs {len(real.entries)} real decisions"


def assert_same_requests(sim: pd.DataFrame, real: pd.DataFrame) -> None:
    sim, real = sim.set_index("request_id").sort_index(), real.set_index("request_id").sort_index()
    assert list(sim.index) == list(real.index)
    assert list(sim.status) == list(real.status)
    for name in ("output_tokens", "num_retractions", "bootstrap_room", "cached_prefix_tokens"):
        assert list(sim[name]) == list(real[name]), name
    for name in COMPARED:
        if name in real:
            np.testing.assert_allclose(real[name].astype(float), sim[name].astype(float), atol=1e-9, err_msg=name)
    for rid in sim.index:
        np.testing.assert_allclose(real.token_times_s[rid], sim.token_times_s[rid], atol=1e-9, err_msg=f"request {rid}")


def check(cfg: Config, wl: Workload | None = None, engines: list | None = None) -> tuple[DecisionLog, pd.DataFrame]:
    wl = wl or workload()
    sim_trace, sim_log = run_sim(cfg, wl)
    real_trace, real_log = run_real(cfg, wl, engines=engines)
    assert_same_decisions(sim_log, real_log)
    assert_same_requests(sim_trace, real_trace)
    return sim_log, sim_trace


def kinds(log: DecisionLog, key: str) -> int:
    return sum(len(dict(e.detail).get(key, ())) for e in log.entries if e.kind != "prefill")


def test_pd_1p1d_lockstep() -> None:
    log, trace = check(config())
    chunked = [e for e in log.entries if e.kind == "prefill" and any(not c[3] for c in e.detail)]
    assert chunked, "no chunked prefill"
    assert kinds(log, "retract") > 0 and trace.num_retractions.sum() > 0, "no retraction"
    assert kinds(log, "resume") > 0, "no resume"
    waits = (trace.prealloc_leave_s - trace.prealloc_enter_s) > 0.05
    assert waits.sum() >= 5, "too few pre-allocation waits"
    assert (trace.status == "finished").all()


@pytest.mark.parametrize("schedule", ["mixed", "prefill_priority"])
def test_colocated_lockstep(schedule: str) -> None:
    log, trace = check(config("colocated", schedule))
    assert kinds(log, "retract") > 0, "no retraction"
    assert any(not c[3] for e in log.entries for c in dict(e.detail)["prefill"]), "no chunked prefill"
    assert (trace.status == "finished").sum() >= 45  # a few fail alike on both sides (KV exhausted)


def test_colocated_batch_waiting_lockstep() -> None:
    """TensorRT-LLM's batch waiting (held prompts, the wait count) decided alike on both sides."""
    _, plain = check(config("colocated"))
    log, trace = check(config("colocated", batch_wait=(3, 0.9)))
    ttft = lambda t: float((t.first_token_s - t.arrival_s).mean())  # noqa: E731
    assert ttft(trace) > ttft(plain) + 0.01, (ttft(trace), ttft(plain))  # prompts were held back
    assert (trace.status == "finished").sum() >= 45


def test_colocated_receive_interval_lockstep() -> None:
    """SGLang's scheduler receive interval (arrivals taken in every 5 decode steps, at once after
    a prefill or an idle loop) decided alike on both sides, and later than without it."""
    _, plain = check(config("colocated"))
    _, trace = check(config("colocated", recv_interval=5))
    first = trace.sort_values("request_id").prefill_start_s.to_numpy()[:10]  # before the KV fills up
    assert (first >= plain.sort_values("request_id").prefill_start_s.to_numpy()[:10]).all()
    assert (first > plain.sort_values("request_id").prefill_start_s.to_numpy()[:10] + 1e-6).sum() >= 2
    assert (trace.status == "finished").sum() >= 45


@pytest.mark.parametrize("mode", ["disaggregated", "colocated"])
def test_prefix_cache_hits_agree(mode: str) -> None:
    """Both sides hit the same pages (pdreal hashes its pages' tokens, pdsim reads hash_ids) and
    evict the same blocks: equal decisions, times and cached_prefix_tokens per request."""
    engines: list = []
    log, trace = check(config(mode, prefix_cache=True), prefix_workload(), engines)
    hit = trace.cached_prefix_tokens.sum() / trace.input_tokens.sum()
    assert 0.3 < hit < 0.9 and (trace.cached_prefix_tokens % 8 == 0).all()
    assert (trace.cached_prefix_tokens < trace.input_tokens).all()
    assert engines[0].cache.evicted_blocks > 100  # the 60-page pool evicts all along
    assert trace.num_retractions.sum() > 0


def test_pd_lockstep_with_a_profiled_table(tmp_path: Path) -> None:
    check(config(perf=table_perf(tmp_path)))


def test_a_changed_decision_is_caught() -> None:
    """The comparison is not vacuous: one changed limit on one side shows up."""
    cfg = config()
    wl = workload()
    _, sim_log = run_sim(cfg, wl)
    _, real_log = run_real(replace(cfg, policy=replace(cfg.policy, decode_reserved_tokens=5)), wl)
    with pytest.raises(AssertionError):
        assert_same_decisions(sim_log, real_log)
