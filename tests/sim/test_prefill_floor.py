"""The host launch floor under steps that carry prompt tokens (perf.prefill_host_s_per_moe_layer)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from simkit import make_config, make_requests, rounded, timeline

from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.perf import LinearModel, StepOverheadModel, build_latency_model
from pdsim.sim import simulate

INNER = LinearModel(prefill_base_s=0.01, prefill_per_token_s=0.0001, decode_base_s=0.005,
                    decode_per_seq_s=0.001, decode_per_ctx_token_s=0.0)


def test_floor_holds_short_prefills_and_hides_under_long_ones() -> None:
    m = StepOverheadModel(INNER, prefill_overhead_s=0.003, decode_overhead_s=0.002, prefill_floor_s=0.05)
    # 100 tokens: forward 0.02 < floor 0.05, so 0.05 + 3 ms overhead
    assert m.prefill_time_s([(100, 0)]) == pytest.approx(0.053)
    # 1000 tokens: forward 0.11 > floor, so the forward + 3 ms
    assert m.prefill_time_s([(1000, 0)]) == pytest.approx(0.113)
    # decode-only steps (CUDA graphs) keep their time: 5 ms + 4 x 1 ms + 2 ms
    assert m.decode_time_s(4, 4000) == pytest.approx(0.011)
    assert m.decode_step(4).time_s(4000) == pytest.approx(0.011)
    # a mixed step carries prompt tokens: floored, plus the larger overhead
    assert m.mixed_time_s([(100, 0)], 4, 4000) == pytest.approx(0.053)
    assert m.prefill_time_s([]) == 0.0


def test_serial_host_time_adds_to_every_prompt_step() -> None:
    m = StepOverheadModel(INNER, prefill_overhead_s=0.003, decode_overhead_s=0.002, prefill_floor_s=0.05,
                          prefill_host_serial=True)
    # 100 tokens: forward 0.02 + host 0.05 + 3 ms overhead; 1000 tokens: 0.11 + 0.05 + 0.003
    assert m.prefill_time_s([(100, 0)]) == pytest.approx(0.073)
    assert m.prefill_time_s([(1000, 0)]) == pytest.approx(0.163)
    # decode-only steps keep their time; a mixed step (forward 0.01 + 0.0001 x 100 + 4 x 1 ms) pays it
    assert m.decode_time_s(4, 4000) == pytest.approx(0.011)
    assert m.mixed_time_s([(100, 0)], 4, 4000) == pytest.approx(0.024 + 0.05 + 0.003)


def test_steps_within_the_graph_size_pay_no_host_time() -> None:
    # graphs up to 512 tokens: a 100-token prompt step keeps its forward (0.02 + 3 ms overhead)
    m = StepOverheadModel(INNER, prefill_overhead_s=0.003, prefill_floor_s=0.1, graph_max_tokens=512)
    assert m.prefill_time_s([(100, 0)]) == pytest.approx(0.023)
    # cached context is not computed: 400 new tokens over 5000 cached still fit (0.01 + 0.04 + 3 ms)
    assert m.prefill_time_s([(400, 5000)]) == pytest.approx(0.053)
    # 600 new tokens run eagerly: the forward 0.07 waits on the 0.1 s floor
    assert m.prefill_time_s([(300, 0), (300, 0)]) == pytest.approx(0.103)
    # mixed: 500 prompt + 12 decodes = 512 tokens replay graphs (forward 0.06 + 0.012 decode, plus
    # 3 ms); a 13th decode makes the step eager and the floor holds it
    assert m.mixed_time_s([(500, 0)], 12, 0) == pytest.approx(0.075)
    assert m.mixed_time_s([(500, 0)], 13, 0) == pytest.approx(0.103)
    serial = StepOverheadModel(INNER, prefill_floor_s=0.1, prefill_host_serial=True, graph_max_tokens=512)
    assert serial.mixed_time_s([(500, 0)], 12, 0) == pytest.approx(0.072)
    assert serial.mixed_time_s([(500, 0)], 13, 0) == pytest.approx(0.073 + 0.1)
    # graphed steps pay their own host time: 0.072 + 0.02 serial, max(0.072, 0.08) as a floor
    replays = StepOverheadModel(INNER, prefill_floor_s=0.1, prefill_host_serial=True, graph_max_tokens=512,
                                graph_floor_s=0.02)
    assert replays.mixed_time_s([(500, 0)], 12, 0) == pytest.approx(0.092)
    assert replays.prefill_time_s([(600, 0)]) == pytest.approx(0.07 + 0.1)  # eager: the eager host time
    floored = StepOverheadModel(INNER, prefill_floor_s=0.1, graph_max_tokens=512, graph_floor_s=0.08)
    assert floored.mixed_time_s([(500, 0)], 12, 0) == pytest.approx(0.08)


def test_negative_floor_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="prefill_floor_s"):
        StepOverheadModel(INNER, prefill_floor_s=-0.001)


def _model(layers: int, experts: int = 0, dense_layers: int = 0) -> ModelConfig:
    return ModelConfig(name="m", num_layers=layers, hidden_size=256, num_heads=1, num_kv_heads=1, head_dim=250,
                       ffn_size=512, vocab_size=1000, num_experts=experts, num_active_experts=min(experts, 2),
                       moe_ffn_size=128 if experts else 0, num_dense_layers=dense_layers)


def test_build_scales_the_floor_by_moe_layers() -> None:
    hw = HardwareConfig(name="toy", bf16_tflops=100.0, hbm_gbps=1000.0, memory_gib=16.0)
    perf = PerfConfig(kind="linear", prefill_base_s=0.001, prefill_per_token_s=0.0, prefill_host_s_per_moe_layer=0.002)
    model = build_latency_model(perf, _model(30, experts=8, dense_layers=3), hw, 1)
    assert model.prefill_time_s([(10, 0)]) == pytest.approx(0.054)  # 27 MoE layers x 2 ms
    dense = build_latency_model(perf, _model(30), hw, 1)
    assert dense.prefill_time_s([(10, 0)]) == pytest.approx(0.001)  # no MoE layer: no floor
    plain = build_latency_model(replace(perf, prefill_host_s_per_moe_layer=0.0), _model(30, experts=8), hw, 1)
    assert isinstance(plain, LinearModel)  # no floor: the model as it was
    with pytest.raises(ValueError, match="'prefill_host_s_per_moe_layer' must be >= 0, got -0.001"):
        build_latency_model(replace(perf, prefill_host_s_per_moe_layer=-0.001), _model(30, experts=8), hw, 1)
    serial = build_latency_model(replace(perf, prefill_host_mode="serial"), _model(30, experts=8, dense_layers=3), hw, 1)
    assert serial.prefill_time_s([(10, 0)]) == pytest.approx(0.055)  # 1 ms forward + 27 x 2 ms
    graphed = build_latency_model(replace(perf, prefill_graph_max_tokens=16), _model(30, experts=8), hw, 1)
    assert graphed.prefill_time_s([(10, 0)]) == pytest.approx(0.001)  # 10 tokens replay graphs
    assert graphed.prefill_time_s([(17, 0)]) == pytest.approx(0.060)  # 17 run eagerly: 30 x 2 ms
    with pytest.raises(ValueError, match="'prefill_graph_max_tokens' must be >= 0, got -1"):
        build_latency_model(replace(perf, prefill_graph_max_tokens=-1), _model(30, experts=8), hw, 1)
    replayed = build_latency_model(replace(perf, prefill_graph_max_tokens=16, prefill_graph_host_s_per_moe_layer=0.001,
                                           prefill_host_mode="serial"), _model(30, experts=8), hw, 1)
    assert replayed.prefill_time_s([(10, 0)]) == pytest.approx(0.031)  # 1 ms forward + 30 x 1 ms
    assert replayed.prefill_time_s([(17, 0)]) == pytest.approx(0.061)  # eager: + 30 x 2 ms
    with pytest.raises(ValueError, match="'prefill_graph_host_s_per_moe_layer' must be >= 0, got -0.5"):
        build_latency_model(replace(perf, prefill_graph_host_s_per_moe_layer=-0.5), _model(30, experts=8), hw, 1)
    with pytest.raises(ValueError, match=r"'prefill_host_mode' must be one of \['floor', 'serial'\], got 'both'"):
        build_latency_model(replace(perf, prefill_host_mode="both"), _model(30, experts=8), hw, 1)


def test_colocated_timeline_with_a_launch_floor() -> None:
    # the tiny model as one MoE layer: a 0.5 s floor per MoE layer holds every prefill step at 0.5 s
    cfg = make_config(cluster=dict(mode="colocated", colocated_schedule="prefill_priority"),
                      perf=dict(prefill_host_s_per_moe_layer=0.5))
    cfg = replace(cfg, model=replace(cfg.model, num_experts=4, num_active_experts=1, moe_ffn_size=128))
    res = simulate(cfg, make_requests([(0.0, 100, 3), (0.0, 100, 3)]))
    end = 0.001 + 0.5  # both prompts in one step: forward 0.1 + 0.2 = 0.3 s, floored at 0.5 s
    for rid in (0, 1):
        assert timeline(res.trace, rid, ("prefill_end_s", "first_token_s", "last_token_s")) == rounded(
            [("prefill_end_s", end), ("first_token_s", end), ("last_token_s", end + 0.02)])
