"""A side's own MoE kernel table (cluster.<side>_moe_table_set).

TRT-LLM picks its MoE kernel per instance (`moe_config.backend`): the B200 fp8 recipes run DeepGEMM
on a 1k context server and TensorRT-LLM's trtllm-gen kernels on a TP generation server.
AIConfigurator's TRT-LLM set timed fp8 block-scale experts with DeepGEMM only; its SGLang set timed
the trtllm-gen kernels (through FlashInfer). Each side's latency model prices its experts from
its own set and nothing else moves.
"""

from __future__ import annotations

import dataclasses

import pytest

from pdsim.config import ClusterConfig
from pdsim.parallel import Parallel
from pdsim.perf import build_latency_model, catalog
from pdsim.perf.measured import MeasuredModel
from tests.perf.test_moe_parallel import DSV3_MOE_LAYERS, SGLANG_B200, _moe_ms

TRTLLM_B200 = "b200_sxm_trtllm_1.3.0rc20"
SHAPE = "7168,2048,8,256"  # DeepSeek-V3's routed experts: hidden, expert width, top-k, experts


def _side_model(cluster: ClusterConfig, side: str) -> MeasuredModel:
    perf = dataclasses.replace(catalog.load_perf("measured_trtllm"), engine_version="1.3.0rc20")
    model = dataclasses.replace(catalog.load_model("deepseek_v3"), gemm_quant="fp8_block", moe_quant="fp8_block")
    lat = build_latency_model(cluster.perf_for(side, perf), model, catalog.load_hardware("b200"), Parallel(8))
    assert isinstance(lat, MeasuredModel)
    return lat


def test_a_side_prices_its_experts_from_its_own_set() -> None:
    cluster = ClusterConfig(decode_moe_table_set=SGLANG_B200)
    prefill, decode = _side_model(cluster, "prefill"), _side_model(cluster, "decode")
    assert prefill.tables.source == decode.tables.source == TRTLLM_B200  # every other table stays
    for tokens in (1, 8, 32):  # MoE TP8: the experts of one layer, ms
        assert prefill._experts_s(tokens) * 1e3 == pytest.approx(
            _moe_ms(TRTLLM_B200, "fp8_block", SHAPE, "8,1", "balanced", tokens), rel=1e-9)
        assert decode._experts_s(tokens) * 1e3 == pytest.approx(
            _moe_ms(SGLANG_B200, "fp8_block", SHAPE, "8,1", "balanced", tokens), rel=1e-9)
    # one decode step of one sequence: the two differ by the experts of the 58 MoE layers alone
    deepgemm, trtllm_gen = (_moe_ms(s, "fp8_block", SHAPE, "8,1", "balanced", 1) for s in (TRTLLM_B200, SGLANG_B200))
    assert prefill.decode_time_s(1, 2048) - decode.decode_time_s(1, 2048) == pytest.approx(
        DSV3_MOE_LAYERS * (deepgemm - trtllm_gen) / 1e3, rel=1e-9)
    assert deepgemm / trtllm_gen > 2.5  # 0.106 against 0.036 ms: why the kernel matters at MoE TP8


def test_no_side_set_keeps_perf_moe_table_set() -> None:
    perf = catalog.load_perf("measured_trtllm")
    assert ClusterConfig().perf_for("decode", perf) is perf
    with pytest.raises(ValueError, match="side must be prefill, decode or colocated, got 'router'"):
        ClusterConfig().perf_for("router", perf)
