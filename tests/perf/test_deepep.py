"""DeepEP (perf.moe_a2a=deepep, pdsim/perf/deepep.py) pinned by hand against the shipped tables:
a decode step and a prompt step of an attention-DP instance, the bytes past the NVLink domain,
another quant mode rescaled, the compiled decode step, the errors, and a run."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from pdsim.cli import compose_config
from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.parallel import Parallel
from pdsim.perf import build_latency_model, catalog
from pdsim.perf.dp_attention import DataParallelModel
from pdsim.perf.optables import AIC_DIR, load_tables

GB300 = "gb300_sglang_0.5.14"
MOE_LAYERS = 58  # DeepSeek-V3: 61 layers, the first 3 dense
HIDDEN, TOPK = 7168, 8


def _moe_ms(table_set: str, phase: str, ep: int, tokens: int) -> float:
    df = pd.read_csv(AIC_DIR / table_set / "deepep_moe.csv.gz")
    row = df[(df.phase == phase) & (df.moe_dtype == "fp8_block") & (df.hidden_size == HIDDEN)
             & (df.num_experts == 256) & (df.moe_ep_size == ep) & (df.distribution == "balanced")
             & (df.num_tokens == tokens)]
    return float(row.latency_ms.item())


def _a2a_ms(table_set: str, mode: str, tokens: int) -> float:
    """dispatch + combine of one rank's `tokens` (DeepSeek-V3's key)."""
    df = pd.read_csv(AIC_DIR / table_set / "deepep_a2a.csv.gz")
    row = df[(df["mode"] == mode) & (df.hidden_size == HIDDEN) & (df.topk == TOPK) & (df.num_experts == 256)
             & (df.num_tokens == tokens)]
    return float(row.dispatch_ms.item() + row.combine_ms.item())


@pytest.fixture(scope="module")
def perf() -> PerfConfig:
    return dataclasses.replace(catalog.load_perf("measured"), engine_version="0.5.14", moe_a2a="deepep")


@pytest.fixture(scope="module")
def dsv3() -> ModelConfig:
    return dataclasses.replace(catalog.load_model("deepseek_v3"), gemm_quant="fp8_block", moe_quant="fp8_block")


@pytest.fixture(scope="module")
def gb300() -> HardwareConfig:
    return catalog.load_hardware("gb300")


def _model(perf: PerfConfig, dsv3: ModelConfig, hw: HardwareConfig, layout: Parallel) -> DataParallelModel:
    model = build_latency_model(perf, dsv3, hw, layout)
    assert isinstance(model, DataParallelModel) and model.deepep is not None
    return model


def test_decode_step_is_busiest_rank_plus_dispatch_experts_combine(perf: PerfConfig, dsv3: ModelConfig,
                                                                    gb300: HardwareConfig) -> None:
    dp32 = _model(perf, dsv3, gb300, Parallel(1, 32, 32))
    rank = dp32.rank
    # 4096 decodes over 32 ranks: 128 on each; the generation table at EP32 over all 4096 tokens,
    # the low-latency dispatch and combine of 128 tokens per rank
    layer_ms = _moe_ms(GB300, "generation", 32, 4096) + _a2a_ms(GB300, "ll", 128)
    expected = (rank.rank_s((), 128, 128 * 1000) + MOE_LAYERS * layer_ms / 1e3
                + rank.overhead_s + 128 * rank.overhead_per_seq_s)
    assert dp32.decode_time_s(4096, 4096 * 1000) == pytest.approx(expected, rel=1e-9)
    assert layer_ms < 0.25  # ~0.09 ms of experts + ~0.08 ms of dispatch/combine
    allgather = build_latency_model(dataclasses.replace(perf, moe_a2a="allgather"), dsv3, gb300, Parallel(1, 32, 32))
    assert allgather.decode_time_s(4096, 4096 * 1000) > 4 * expected  # every GPU ran all 4096 tokens
    for n in (1, 31, 32, 33, 500, 4096):  # the compiled decode step agrees bit for bit
        assert dp32.decode_step(n).time_s(n * 900) == dp32.decode_time_s(n, n * 900)


def test_prompt_step_uses_the_normal_kernels(perf: PerfConfig, dsv3: ModelConfig, gb300: HardwareConfig) -> None:
    dp16 = _model(perf, dsv3, gb300, Parallel(1, 16, 16))
    rank, prompt = dp16.rank, (512, 0)
    # 16 prompts of 512 tokens, one per rank: the context table at EP16 over 8192 tokens, the
    # normal dispatch and combine of 512 tokens per rank
    layer_ms = _moe_ms(GB300, "context", 16, 8192) + _a2a_ms(GB300, "normal", 512)
    expected = (rank.rank_s((prompt,), 0, 0) + MOE_LAYERS * layer_ms / 1e3
                + rank.overhead_s + rank.overhead_per_seq_s)
    assert dp16.prefill_time_s([prompt] * 16) == pytest.approx(expected, rel=1e-9)


def test_past_the_nvlink_domain_the_bytes_cross_the_nic(perf: PerfConfig, dsv3: ModelConfig) -> None:
    b200 = catalog.load_hardware("b200")  # 8 GPUs per NVLink domain, 8 x 400 Gb/s NICs per node
    dp16 = _model(perf, dsv3, b200, Parallel(1, 16, 16))
    inside = dataclasses.replace(b200, nvlink_domain_gpus=16)
    near = _model(perf, dsv3, inside, Parallel(1, 16, 16))
    # 64 tokens per rank, top-8, fp8 dispatch + bf16 combine; half the experts in the other node
    nic_bytes_per_s = 400e9 / 8
    extra = 64 * TOPK * HIDDEN * (1 + 2) * (16 - 8) / 16 / nic_bytes_per_s
    assert dp16.decode_time_s(1024, 1024 * 500) - near.decode_time_s(1024, 1024 * 500) == pytest.approx(
        MOE_LAYERS * extra, rel=1e-9)


def test_another_quant_mode_is_the_measured_one_rescaled(perf: PerfConfig, dsv3: ModelConfig,
                                                         gb300: HardwareConfig) -> None:
    fp4 = dataclasses.replace(dsv3, gemm_quant="nvfp4", moe_quant="nvfp4")
    dp32 = _model(perf, fp4, gb300, Parallel(1, 32, 32))
    standard = load_tables(GB300)
    shape = (HIDDEN, 2048, TOPK, 256)
    ratio = (standard.moe_grid("nvfp4", shape, 1, 32)(4096) / standard.moe_grid("fp8_block", shape, 1, 32)(4096))
    expected_ms = _moe_ms(GB300, "generation", 32, 4096) * ratio + _a2a_ms(GB300, "ll", 128)
    assert dp32.deepep.layer_s(4096, 128, prompt=False) == pytest.approx(expected_ms / 1e3, rel=1e-9)


def test_errors_name_the_field_and_the_set(perf: PerfConfig, dsv3: ModelConfig, gb300: HardwareConfig) -> None:
    with pytest.raises(ValueError, match=r"perf: field 'moe_a2a' must be one of \['allgather', 'deepep'\], got 'x'"):
        build_latency_model(dataclasses.replace(perf, moe_a2a="x"), dsv3, gb300, Parallel(1, 8, 8))
    trtllm = dataclasses.replace(catalog.load_perf("measured_trtllm"), moe_a2a="deepep")
    with pytest.raises(ValueError, match="table set gb300_trtllm_1.3.0rc20 has no deepep_moe or deepep_a2a"):
        build_latency_model(trtllm, dsv3, gb300, Parallel(1, 8, 8))
    # no attention DP, or no EP: nothing to dispatch between ranks, the setting does not apply
    assert not isinstance(build_latency_model(perf, dsv3, gb300, Parallel(8, 1, 8)), DataParallelModel)
    assert build_latency_model(perf, dsv3, gb300, Parallel(1, 8, 1)).deepep is None


def test_each_side_names_its_own_exchange(perf: PerfConfig, dsv3: ModelConfig, gb300: HardwareConfig) -> None:
    """A layout's moe_a2a overrides perf.moe_a2a; "" keeps it (a prefill may all-gather while its
    decode runs DeepEP, as srt-slurm's GB300 fp4 recipes deploy)."""
    gather = dataclasses.replace(perf, moe_a2a="allgather")
    assert build_latency_model(gather, dsv3, gb300, Parallel(1, 32, 32, "deepep")).deepep is not None
    assert build_latency_model(perf, dsv3, gb300, Parallel(1, 32, 32, "allgather")).deepep is None
    assert build_latency_model(perf, dsv3, gb300, Parallel(1, 32, 32, "")).deepep is not None  # perf's deepep
    with pytest.raises(ValueError, match=r"cluster: field 'decode_moe_a2a' = 'nccl' must be one of "
                                         r"\['', 'allgather', 'deepep'\]"):
        compose_config(["model=deepseek_v3", "hardware=gb300", "perf=measured", "cluster.mode=disaggregated",
                        "cluster.decode_tp=1", "cluster.decode_dp=8", "cluster.decode_moe_ep=8",
                        "cluster.decode_moe_a2a=nccl"])


def test_wide_ep_disaggregated_run() -> None:
    from pdsim.run import run_simulation

    cfg = compose_config([
        "model=deepseek_v3", "hardware=gb300", "perf=measured", "perf.engine_version=0.5.14",
        "model.gemm_quant=fp8_block", "model.moe_quant=fp8_block", "cluster.decode_moe_a2a=deepep",
        "cluster.mode=disaggregated", "cluster.prefill=1", "cluster.decode=1", "cluster.prefill_tp=1",
        "cluster.prefill_dp=8", "cluster.prefill_moe_ep=8", "cluster.decode_tp=1", "cluster.decode_dp=32",
        "cluster.decode_moe_ep=32", "scenario=bench_random", "scenario.num_requests=64",
        "scenario.concurrency=32", "scenario.input.value=512", "scenario.output.value=8", "progress=false",
    ])
    out = run_simulation(cfg)  # the end-of-run invariants are checked inside
    assert len(out.trace) == 64 and (out.trace["status"] == "finished").all()
    tpot = (out.trace["last_token_s"] - out.trace["first_token_s"]) / 7
    assert 0.005 < tpot.median() < 0.05  # 32 decodes on 32 ranks: one each, ~10-20 ms a step
