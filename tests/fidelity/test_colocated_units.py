"""The fidelity loop in colocated mode, its pure parts: the served shape, engine facts -> pdsim's
colocated overrides, the probe's colocated hops, mixed steps in the served slowdown, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from analysis.fidelity.cli import build_parser
from analysis.fidelity.facts import EngineFacts, sim_overrides
from analysis.fidelity.loop import compose
from analysis.fidelity.real import ServeShape
from analysis.fidelity.served import slowdown, steps_frame
from pdreal.probe import hop_medians
from pdsim.perf import LinearModel

ENGINE = {
    "dtype": "fp32", "page_size_tokens": 16, "kv_capacity_tokens": 8192, "max_running_requests": 32,
    "max_prefill_tokens": 2048, "chunk_size_tokens": 512, "kv_bytes_per_token": 46080, "mode": "colocated",
    "engine": {"max_prealloc_requests": 64, "colocated_schedule": "prefill_priority", "new_token_ratio": 0.7},
    "transfer": {"bandwidth_bytes_per_s": 2.0e9, "one_page_transfer_s": 0.002},
    "prefill_step_overhead_s": 0.003, "decode_step_overhead_s": 0.001,
}
PROFILE = ("kind,num_seqs,new_tokens,context_tokens,latency_s\nprefill,1,16,0,0.1\nprefill,1,64,0,0.3\n"
           "decode,1,1,64,0.05\ndecode,4,4,256,0.08\n")


def _facts(tmp_path: Path, probe: dict | None = None, **extra: object) -> EngineFacts:
    path = tmp_path / "engine.json"
    path.write_text(json.dumps({**ENGINE, **extra}))
    return EngineFacts.load(path, probe)


def test_colocated_overrides_are_read_from_the_engine(tmp_path: Path) -> None:
    profile = tmp_path / "profile.csv"
    profile.write_text(PROFILE)
    facts = _facts(tmp_path, {"dispatch_colocated_s": 0.002, "token_delivery_s": 0.003})
    overrides = sim_overrides(facts, profile, "smollm2_135m", 1, 1, colocated=2)
    cfg = compose(["scenario=chat", *overrides])
    c, p = cfg.cluster, cfg.perf
    assert (c.mode, c.colocated, c.colocated_schedule) == ("colocated", 2, "prefill_priority")
    assert cfg.policy.new_token_ratio == pytest.approx(0.7)
    assert (c.page_size_tokens, c.kv_capacity_tokens, c.max_running_requests) == (16, 8192, 32)
    assert (c.max_prefill_tokens, c.chunk_size_tokens, c.prefix_cache) == (2048, 512, False)
    assert c.dispatch_delay_s == pytest.approx(0.002)
    assert not any(o.startswith(("cluster.tcp_gbps", "cluster.link_latency_s", "cluster.prealloc_slots"))
                   for o in overrides)  # nothing moves between instances
    assert (p.kind, p.prefill_step_overhead_s, p.decode_step_overhead_s) == ("table", 0.003, 0.001)


def test_colocated_overrides_simulate(tmp_path: Path) -> None:
    from pdsim.run import run_simulation

    profile = tmp_path / "profile.csv"
    profile.write_text(PROFILE)
    requests = tmp_path / "requests.csv"
    requests.write_text("request_id,arrival_s,input_tokens,output_tokens\n0,0.0,40,4\n1,0.05,20,3\n")
    overrides = ["scenario=chat", "scenario.source=csv", f"scenario.path={requests}", "scenario.num_requests=0",
                 "progress=false", *sim_overrides(_facts(tmp_path), profile, "smollm2_135m", 1, 1, colocated=1)]
    trace = run_simulation(compose(overrides), progress=False).trace
    assert (trace["status"] == "finished").all() and (trace["mode"] == "colocated").all()
    assert list(trace["output_tokens"]) == [4, 3]


def test_mode_mismatch_names_the_fix(tmp_path: Path) -> None:
    colocated = _facts(tmp_path)
    with pytest.raises(ValueError, match="profile without cluster.mode=colocated"):
        sim_overrides(colocated, tmp_path / "p.csv", "smollm2_135m", 1, 1)
    disaggregated = _facts(tmp_path, mode="disaggregated")
    with pytest.raises(ValueError, match="--colocated N"):
        sim_overrides(disaggregated, tmp_path / "p.csv", "smollm2_135m", 1, 1, colocated=1)


def test_serve_shape_carries_the_mode_to_profile_and_serve() -> None:
    shape = ServeShape(overrides=("node.threads=1",), colocated=2, colocated_schedule="prefill_priority")
    assert shape.overrides == ("node.threads=1", "cluster.mode=colocated", "cluster.colocated=2",
                               "cluster.colocated_schedule=prefill_priority")
    assert shape.name == "2C(prefill_priority)" and ServeShape().name == "1P1D"
    assert ServeShape().overrides == ()
    with pytest.raises(ValueError, match="'fifo'"):
        ServeShape(colocated=1, colocated_schedule="fifo")


def test_cli_colocated_flags() -> None:
    args = build_parser().parse_args(["--colocated", "1", "--schedule", "prefill_priority", "--requests", "10"])
    assert (args.colocated, args.schedule) == (1, "prefill_priority")
    assert build_parser().parse_args([]).colocated == 0


def test_probe_takes_the_colocated_hops() -> None:
    rows = [{"status": "finished", "mode": "colocated", "arrival_s": 0.0, "route_s": 0.001,
             "prefill_waiting_enter_s": 0.002 + i * 0.001, "prefill_end_s": 0.05, "first_token_s": 0.053}
            for i in range(3)]
    hops = hop_medians(rows)
    assert set(hops) == {"client_to_router_s", "dispatch_colocated_s", "token_delivery_s"}
    assert hops["dispatch_colocated_s"] == pytest.approx(0.003)
    assert hops["token_delivery_s"] == pytest.approx(0.003)


def test_mixed_steps_count_in_the_prefill_slowdown() -> None:
    model = LinearModel(prefill_base_s=0.1, prefill_per_token_s=0.01, decode_base_s=0.05,
                        decode_per_seq_s=0.01, decode_per_ctx_token_s=0.0)
    mixed_s = model.mixed_time_s([(10, 0), (10, 0)], 3, 300)
    records = [
        {"end_s": 1.0, "kind": "prefill", "num_seqs": 1, "new_tokens": 10, "context_tokens": 0,
         "latency_s": 2 * model.prefill_time_s([(10, 0)])},  # old records: no decode columns
        {"end_s": 2.0, "kind": "mixed", "num_seqs": 5, "new_tokens": 23, "context_tokens": 300,
         "latency_s": 2 * mixed_s, "decode_seqs": 3, "decode_context_tokens": 300},
        {"end_s": 3.0, "kind": "decode", "num_seqs": 3, "new_tokens": 3, "context_tokens": 300,
         "latency_s": 1.5 * model.decode_time_s(3, 300), "decode_seqs": 3, "decode_context_tokens": 300},
    ]
    frame = steps_frame(records)
    assert list(frame["decode_seqs"]) == [0, 3, 3]
    scale = slowdown(frame, model)
    assert scale["prefill"] == pytest.approx(2.0) and scale["decode"] == pytest.approx(1.5)
    assert math.isnan(slowdown(pd.DataFrame(frame[frame["kind"] == "decode"]), model)["prefill"])
