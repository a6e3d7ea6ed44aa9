"""The fidelity loop's pure parts: engine facts -> pdsim overrides, the step overhead/scale
wrapper, the served-vs-profile slowdown, the error table, the CLI's workload overrides."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.fidelity.cli import build_parser, workload_overrides
from analysis.fidelity.compare import error_table, format_scan, format_table, slo_scan, targets_met
from analysis.fidelity.facts import EngineFacts, sim_overrides
from analysis.fidelity.loop import compose
from analysis.fidelity.served import slowdown, steps_frame
from pdsim.config import PerfConfig
from pdsim.metrics import Slo
from pdsim.perf import LinearModel, StepOverheadModel, build_latency_model


def test_facts_are_read_not_retyped(engine_json: Callable[..., Path], profile_csv: Path) -> None:
    probe = {"transfer_info_s": 0.0007, "dispatch_prefill_s": 0.002, "dispatch_decode_s": 0.004,
             "kv_ready_s": 0.005, "kv_bytes": 2.0e6, "token_delivery_s": 0.0025}
    facts = EngineFacts.load(engine_json(), probe)
    cfg = compose(["scenario=chat", *sim_overrides(facts, profile_csv, "smollm2_135m", 1, 2)])
    c, p = cfg.cluster, cfg.perf
    assert (c.prefill, c.decode, c.page_size_tokens, c.kv_capacity_tokens) == (1, 2, 16, 8192)
    assert (c.max_running_requests, c.max_prefill_tokens, c.chunk_size_tokens, c.prealloc_slots) == (32, 2048, 512, 64)
    assert not c.prefix_cache and c.transfer_backend == "tcp" and c.tcp_gbps == pytest.approx(16.0)
    assert c.link_latency_s == pytest.approx(0.005 - 2.0e6 / 2.0e9)  # probe: kv ready minus its bytes
    assert c.control_plane_latency_s == pytest.approx(0.0007)
    assert c.dispatch_delay_s == pytest.approx(0.003)
    assert c.token_delivery_s == pytest.approx(0.0025)
    assert cfg.model.dtype == "fp32"
    assert (p.kind, p.path, p.prefill_step_overhead_s, p.decode_step_overhead_s) == ("table", str(profile_csv), 0.003, 0.001)


def test_without_probe_the_setup_cost_comes_from_the_one_page_transfer(engine_json: Callable[..., Path]) -> None:
    facts = EngineFacts.load(engine_json())
    page_bytes = 46080 * 16
    assert facts.link_latency_s() == pytest.approx(0.002 - page_bytes / 2.0e9)
    assert "control_plane_latency_s" not in facts.cluster_overrides()


def test_bad_engine_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "engine.json"
    path.write_text("{}")
    with pytest.raises(ValueError, match="engine.json"):
        EngineFacts.load(path)


def test_dispatch_latency_defaults_to_one_control_plane_hop() -> None:
    cfg = compose(["scenario=chat", "cluster.control_plane_latency_s=0.01"])
    assert cfg.cluster.dispatch_latency_s < 0 and cfg.cluster.dispatch_delay_s == 0.01


def test_step_overhead_and_scale_wrap_any_model() -> None:
    inner = LinearModel(prefill_base_s=0.1, prefill_per_token_s=0.01, decode_base_s=0.05,
                        decode_per_seq_s=0.01, decode_per_ctx_token_s=0.0)
    m = StepOverheadModel(inner, 0.002, 0.001, prefill_scale=2.0, decode_scale=1.5)
    assert m.prefill_time_s([(10, 0)]) == pytest.approx(2 * 0.2 + 0.002)
    assert m.decode_time_s(2, 100) == pytest.approx(1.5 * 0.07 + 0.001)
    assert m.prefill_time_s([]) == 0.0 and m.decode_time_s(0, 0) == 0.0
    assert m.mixed_time_s((), 2, 100) == m.decode_time_s(2, 100)
    with pytest.raises(ValueError):
        StepOverheadModel(inner, -1.0)


def test_default_perf_config_builds_the_bare_model() -> None:
    cfg = compose(["scenario=chat", "perf=linear"])
    assert isinstance(build_latency_model(cfg.perf, cfg.model, cfg.hardware, 1), LinearModel)
    cfg.perf = PerfConfig(kind="linear", decode_step_overhead_s=0.001)
    assert isinstance(build_latency_model(cfg.perf, cfg.model, cfg.hardware, 1), StepOverheadModel)


def test_slowdown_is_the_trimmed_ratio_of_sums_per_kind() -> None:
    model = LinearModel(prefill_base_s=0.1, prefill_per_token_s=0.0, decode_base_s=0.0,
                        decode_per_seq_s=0.05, decode_per_ctx_token_s=0.0)
    # 20 prefills (predicted 0.1 s): 18 served at 2x, one at 1x and one outlier at 50x, trimmed away
    prefill = [("prefill", 1, 0.2)] * 18 + [("prefill", 1, 0.1), ("prefill", 1, 5.0)]
    # decodes predicted 0.05 s (1 seq) and 0.15 s (3 seqs), served 0.1 s and 0.15 s: ratio of sums
    # 0.25 / 0.2 = 1.25 (the mean or median ratio would be 1.5)
    decode = [("decode", 1, 0.1), ("decode", 3, 0.15)]
    records = [{"end_s": float(i), "kind": k, "num_seqs": n, "new_tokens": 8 if k == "prefill" else n,
                "context_tokens": 0 if k == "prefill" else 50 * n, "latency_s": lat}
               for i, (k, n, lat) in enumerate(prefill + decode)]
    steps = steps_frame(records, since_s=-1.0)
    assert slowdown(steps, model) == {"prefill": pytest.approx(2.0), "decode": pytest.approx(1.25)}
    assert len(steps_frame(records, since_s=19.5)) == 2


def _trace(scale: float) -> pd.DataFrame:
    rows = []
    for i in range(10):
        first = i + 0.5 * scale * (1 + i / 10)
        rows.append({"request_id": i, "status": "finished", "arrival_s": float(i), "first_token_s": first,
                     "last_token_s": first + 0.1 * scale * 9, "finish_s": first + 0.1 * scale * 9,
                     "output_tokens": 10, "input_tokens": 32, "cached_prefix_tokens": 0,
                     "token_times_s": None})
    return pd.DataFrame(rows)


def test_error_table_and_targets() -> None:
    slo = Slo(1.0, 0.12)
    same = error_table(_trace(1.0), _trace(1.0), slo)
    assert (same["rel_err"].fillna(0) == 0).all() and targets_met(same)
    off = error_table(_trace(1.3), _trace(1.0), slo)
    row = off[(off["metric"] == "ttft_s") & (off["stat"] == "p50")].iloc[0]
    assert row["rel_err"] == pytest.approx(0.3) and row["ok"] is False and not targets_met(off)
    text = format_table(off)
    assert "| ttft_s | p50 |" in text and "NO" in text
    assert off[off["stat"] == "p99"]["target"].isna().all()


def test_slo_scan_discriminates_where_the_configured_slo_cannot() -> None:
    # real TTFTs 0.50..0.95 s, TPOT 0.1 s; sim is 1.3x slower (TTFT 0.65..1.235 s, TPOT 0.13 s)
    scan = slo_scan(_trace(1.3), _trace(1.0), Slo(1.24, 0.3), scales=(0.5, 1.0)).set_index("scale")
    assert scan.loc[1.0, "real_attainment"] == 1.0 and scan.loc[1.0, "sim_attainment"] == 1.0
    assert scan.loc[1.0, "rel_err"] == 0.0
    # at half the SLO (TTFT <= 0.62 s, TPOT <= 0.15 s) 3 real requests meet it, no simulated one
    assert scan.loc[0.5, "ttft_slo_s"] == pytest.approx(0.62) and scan.loc[0.5, "tpot_slo_s"] == pytest.approx(0.15)
    assert scan.loc[0.5, "real_attainment"] == pytest.approx(0.3) and scan.loc[0.5, "sim_attainment"] == 0.0
    assert scan.loc[0.5, "rel_err"] == pytest.approx(-1.0)
    assert "| 0.5 | 0.62 | 0.15 | 0.000 | 0.300 |" in format_scan(scan.reset_index())


def test_cli_workload_overrides_compose() -> None:
    args = build_parser().parse_args(["--requests", "7", "--input", "8:16", "--output", "2:4", "seed=3"])
    cfg = compose(workload_overrides(args))
    s = cfg.scenario
    assert (s.num_requests, s.input.low, s.input.high, s.output.low, s.output.high) == (7, 8, 16, 2, 4)
    assert s.prefix.session_turns == 1 and s.prefix.num_system_prompts == 0 and cfg.seed == 3
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--input", "9:3"])


def test_requests_csv_carries_prefix_hashes_to_pdsim_and_the_cache_flag(engine_json: Callable[..., Path],
                                                                          tmp_path: Path) -> None:
    from analysis.fidelity.real import requests_csv
    from pdsim.workload.loaders import load_plain_csv
    from pdsim.workload.request import make_workload

    wl = make_workload("w", np.array([0.0, 0.5, 1.0]), np.array([40, 20, 35]), np.array([4, 4, 4]),
                       hash_lists=[np.array([7, 8, 9]), np.array([7, 10]), np.array([], dtype=np.int64)],
                       block_tokens=16)
    real = pd.DataFrame({"request_id": [2, 0, 1], "arrival_s": [1.1, 0.1, 0.6], "input_tokens": [35, 40, 20],
                         "output_tokens": [4, 4, 4]})
    back = load_plain_csv(requests_csv(real, tmp_path / "requests.csv", wl))
    assert [r.hash_ids for r in back] == [(7, 8, 9), (7, 10), ()] and back.block_tokens == 16
    facts = EngineFacts.load(engine_json(engine={"max_prealloc_requests": 64, "prefix_cache": True}))
    assert facts.cluster_overrides()["prefix_cache"] is True
    sim, hot = _trace(1.0), _trace(1.0).assign(cached_prefix_tokens=[16] * 5 + [0] * 5)
    assert "prefix_hit_ratio" not in set(error_table(sim, sim, Slo(1.0, 0.12)).metric)  # no hits: no row
    row = error_table(sim.assign(cached_prefix_tokens=[16] * 4 + [0] * 6), hot, Slo(1.0, 0.12)).set_index("metric")
    assert (row.loc["prefix_hit_ratio", "sim"], row.loc["prefix_hit_ratio", "real"]) == (64 / 320, 80 / 320)
