"""perf=measured: operator tables interpolated and composed into steps (measured.py, optables.py)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from pdsim.config import PerfConfig
from pdsim.perf import MeasuredModel, RooflineModel, build_latency_model, catalog
from pdsim.perf.loggrid import LogGrid
from pdsim.perf.optables import AIC_DIR, resolve_set, table_sets

MEASURED = PerfConfig(kind="measured", engine="sglang", overhead_s=0.0)  # as the preset


def _build(model: str, hardware: str, tp: int, perf: PerfConfig = MEASURED):
    return build_latency_model(perf, catalog.load_model(model), catalog.load_hardware(hardware), tp)


def test_log_grid_exact_at_points_power_law_between_and_edges():
    df = pd.DataFrame({"m": [1, 4, 16], "latency_ms": [2.0, 8.0, 8.0]})
    grid = LogGrid.from_frame(df, ("m",), "test")
    assert grid(4) == pytest.approx(8.0, rel=1e-12)
    assert grid(2) == pytest.approx(4.0, rel=1e-12)  # sqrt(2 * 8): geometric between points
    assert grid(0.5) == pytest.approx(2.0, rel=1e-12)  # held below the first point
    assert grid(64) == pytest.approx(8.0, rel=1e-12)  # last segment (flat) extended
    df2 = pd.DataFrame({"a": [1, 1, 2, 2], "b": [1, 4, 1, 4], "latency_ms": [1.0, 4.0, 2.0, np.nan]})
    filled = LogGrid.from_frame(df2.dropna(), ("a", "b"), "test")  # the missing cell is fitted
    assert filled(2, 4) == pytest.approx(8.0, rel=1e-6)  # log t = row + col: 2 * 4
    assert filled(1, 2) == pytest.approx(2.0, rel=1e-12)


def test_gemm_operator_is_the_table_row():
    model = _build("llama3_8b", "h100", 1)
    assert isinstance(model, MeasuredModel)
    rows = pd.read_csv(AIC_DIR / "h100_sxm_sglang_0.5.10" / "gemm.csv")
    row = rows[(rows.m == 64) & (rows.n == 4096) & (rows.k == 4096)].latency_ms.item()
    assert model.gemm_s(64, 4096, 4096) == pytest.approx(row / 1e3, rel=1e-12)


def test_moe_layer_uses_the_fused_moe_table():
    model = _build("qwen3_30b_a3b", "h100", 2)
    rows = pd.read_csv(AIC_DIR / "h100_sxm_sglang_0.5.10" / "moe.csv")
    row = rows[(rows.moe_dtype == "bfloat16") & (rows.hidden_size == 2048) & (rows.moe_tp_size == 2)
               & (rows.num_tokens == 256)].latency_ms.item()
    assert model._experts_s(256) == pytest.approx(row / 1e3, rel=1e-12)


def test_steps_grow_with_batch_context_and_prompt():
    model = _build("llama3_70b", "h100", 8)
    decode = [model.decode_time_s(b, b * ctx) for b in (1, 8, 64, 256) for ctx in (512, 8192)]
    assert all(t > 0 for t in decode)
    for b in (1, 8, 64, 256):
        assert model.decode_time_s(b, b * 8192) > model.decode_time_s(b, b * 512)
    assert model.decode_time_s(256, 256 * 2048) > model.decode_time_s(8, 8 * 2048)
    prefill = [model.prefill_time_s([(n, 0)]) for n in (128, 1024, 8192)]
    assert prefill == sorted(prefill) and prefill[-1] > 8 * prefill[0]
    assert model.prefill_time_s([(1024, 4096)]) > model.prefill_time_s([(1024, 0)])


def test_mixed_step_is_one_forward():
    model = _build("llama3_8b", "h100", 1)
    items = [(512, 0)]
    mixed = model.mixed_time_s(items, 32, 32 * 1024)
    assert model.prefill_time_s(items) < mixed < model.prefill_time_s(items) + model.decode_time_s(32, 32 * 1024)
    assert model.mixed_time_s((), 32, 32 * 1024) == model.decode_time_s(32, 32 * 1024)


def test_decode_step_is_bit_identical():
    for model in (_build("llama3_70b", "a800", 8), _build("llama3_70b", "h100", 8)):  # (called; compiled)
        steps = model.decode_step(48).steps(48 * 3000, 40)
        scalar = [model.decode_time_s(48, 48 * 3000 + 48 * i) for i in range(40)]
        assert list(steps) == scalar


def test_a800_is_a100_compute_with_slower_all_reduce():
    a100, a800 = _build("llama3_70b", "a100_80g", 8), _build("llama3_70b", "a800", 8)
    assert a800.gemm_s(256, 8192, 8192) == a100.gemm_s(256, 8192, 8192)
    assert a800._allreduce_s(4096) > a100._allreduce_s(4096)
    gap_s = 2 * 80 * (a800._allreduce_s(64) - a100._allreduce_s(64))
    assert a800.decode_time_s(64, 64 * 2048) - a100.decode_time_s(64, 64 * 2048) == pytest.approx(gap_s, rel=1e-9)


def test_overheads_add_per_step_and_per_sequence():
    base = _build("llama3_8b", "h100", 1)
    perf = PerfConfig(kind="measured", overhead_s=0.002, overhead_per_seq_s=0.0001)
    with_overhead = _build("llama3_8b", "h100", 1, perf)
    assert with_overhead.decode_time_s(10, 10_000) - base.decode_time_s(10, 10_000) == pytest.approx(0.003)
    assert with_overhead.prefill_time_s([(100, 0)] * 2) - base.prefill_time_s([(100, 0)] * 2) == pytest.approx(0.0022)


@pytest.mark.parametrize("name", catalog.catalog_names("model"))
def test_every_catalog_model_builds_on_h100(name):
    tp = 8 if name in ("deepseek_v3", "opt_66b", "llama3_70b", "llama2_70b") else 1
    if catalog.load_model(name).sparse_attention_topk:  # GLM-5's DSA: refused by name
        with pytest.raises(ValueError, match=f"model {name} uses sparse attention"):
            _build(name, "h100", tp)
        return
    model = _build(name, "h100", tp)
    assert model.prefill_time_s([(1024, 0)]) > model.decode_time_s(1, 1024) > 0


def test_mla_uses_its_tables_where_the_set_has_them():
    h200 = _build("deepseek_v3", "h200", 8)  # SGLang 0.5.10 H200 set has MLA tables
    rows = pd.read_csv(AIC_DIR / "h200_sxm_sglang_0.5.10" / "mla_generation.csv")
    row = rows[(rows.num_heads == 16) & (rows.batch_size == 64) & (rows.step == 4095)].latency_ms.item()
    assert h200._decode_attention_s(64, 64 * 4095) == pytest.approx(row / 1e3, rel=1e-9)
    a100 = _build("deepseek_v3", "a100_80g", 8)  # A100 SGLang set has none: roofline attention
    assert a100._generation is None
    assert a100._decode_attention_s(64, 64 * 4096) == pytest.approx(
        a100._roofline_attention_s((), 64, 64 * 4096), rel=1e-12)
    for model in (h200, a100):
        assert model.decode_time_s(64, 64 * 4096) > model.decode_time_s(64, 64 * 512) > 0


def test_no_tables_falls_back_to_roofline_and_bad_engine_names_the_sets():
    hw = catalog.load_hardware("h100")
    hw.op_tables = ""
    fallback = build_latency_model(MEASURED, catalog.load_model("llama3_8b"), hw, 1)
    assert isinstance(fallback, RooflineModel)
    with pytest.raises(ValueError, match="engine='lmdeploy'.*this system has \\["):
        _build("llama3_8b", "h100", 1, PerfConfig(kind="measured", engine="lmdeploy"))
    # no vLLM 0.14.0 (the default) on B200: the newest set it has
    assert _build("llama3_8b", "b200", 1, PerfConfig(kind="measured", engine="vllm")).tables.source == "b200_sxm_vllm_0.24.0"


def test_table_sets_and_newest_version():
    assert "h100_sxm_sglang_0.5.10" in table_sets()
    assert resolve_set("h100_sxm", "vllm", "") == "h100_sxm_vllm_0.14.0"
    assert math.isclose(_build("llama3_8b", "h200", 1).decode_time_s(1, 100),
                        _build("llama3_8b", "h200", 1).decode_time_s(1, 100))


def test_engine_fit_recovers_known_terms():
    from pdsim.perf.engine_fit import EngineFit, fit_engine, predict_s
    from pdsim.perf.profile import ProfilePoint

    ops = _build("llama3_70b", "h100", 8)
    truth = EngineFit(prefill_scale=1.5, prefill_overhead_s=0.004, decode_scale=2.0,
                      decode_overhead_s=0.01, per_seq_s=0.0002)
    engine = truth.apply(ops)
    shapes = [ProfilePoint("prefill", b, b * n, 0, 0.0) for b in (1, 4) for n in (256, 1024, 4096)]
    shapes += [ProfilePoint("decode", b, b, b * c, 0.0) for b in (1, 8, 64) for c in (512, 4096)]
    points = [ProfilePoint(p.kind, p.num_seqs, p.new_tokens, p.context_tokens, predict_s(engine, p))
              for p in shapes]
    fit = fit_engine([(ops, p) for p in points])
    for name in ("prefill_scale", "prefill_overhead_s", "decode_scale", "decode_overhead_s", "per_seq_s"):
        assert getattr(fit, name) == pytest.approx(getattr(truth, name), rel=1e-6, abs=1e-9), name
    assert fit.perf_fields()["decode_step_scale"] == pytest.approx(2.0)


def test_cli_measured_writes_a_preset_that_reproduces_the_fit(tmp_path):
    from omegaconf import OmegaConf

    from pdsim.perf.calibrate import main
    from pdsim.perf.engine_fit import EngineFit, predict_s
    from pdsim.perf.profile import ProfilePoint, write_profile_csv

    ops = _build("llama3_8b", "h100", 1)
    engine = EngineFit(1.2, 0.003, 1.4, 0.002, 0.0001).apply(ops)
    shapes = [ProfilePoint("prefill", 1, n, 0, 0.0) for n in (128, 512, 2048)]
    shapes += [ProfilePoint("decode", b, b, b * 1024, 0.0) for b in (1, 8, 32, 128)]
    table = tmp_path / "profile.csv"
    write_profile_csv(table, [ProfilePoint(p.kind, p.num_seqs, p.new_tokens, p.context_tokens,
                                           predict_s(engine, p)) for p in shapes])
    out = tmp_path / "engine.yaml"
    args = ["--table", str(table), "--kind", "measured", "--model", "llama3_8b", "--hardware", "h100"]
    assert main([*args, "--out", str(out)]) == 0
    perf = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PerfConfig),
                                               {k: v for k, v in OmegaConf.load(out).items() if k != "defaults"}))
    refit = _build("llama3_8b", "h100", 1, perf)
    assert refit.decode_time_s(8, 8 * 1024) == pytest.approx(engine.decode_time_s(8, 8 * 1024), rel=1e-4)
    assert refit.prefill_time_s([(512, 0)]) == pytest.approx(engine.prefill_time_s([(512, 0)]), rel=1e-4)


@pytest.mark.parametrize("hw", catalog.catalog_names("hardware"))
def test_never_faster_than_the_physical_roofline(hw):
    """Every GPU (own tables or scaled ones) stays at or above 100% MFU/MBU with free launches."""
    for name, tp in (("llama3_8b", 1), ("llama3_70b", 8), ("qwen3_30b_a3b", 2)):
        m, h = catalog.load_model(name), catalog.load_hardware(hw)
        # GB200's all-reduce was measured within a 4-GPU tray: TP8 is the 4-GPU table scaled
        # (collectives.beyond_table_s), inside the 72-GPU NVLink domain
        measured = build_latency_model(MEASURED, m, h, tp)
        bound = RooflineModel(m, h, tp, mfu=1.0, mbu=1.0, overhead_s=0.0, comm_latency_s=0.0)
        for b, ctx in ((1, 512), (64, 64 * 4096)):
            assert measured.decode_time_s(b, ctx) >= bound.decode_time_s(b, ctx), (name, b, ctx)
        assert measured.prefill_time_s([(2048, 0)]) >= bound.prefill_time_s([(2048, 0)]), name


def test_a_qk_norm_over_all_heads_all_reduces_its_statistics_in_every_layer():
    """MiniMax-M2.5 (qk_norm_across_heads) at TP4 on vLLM's B200 tables: a decode step of 4
    sequences gains one all-reduce per layer of 4 x 8 bytes (16 bf16 values: below the table's
    smallest message, so its first row), 62 of them; at TP1 nothing; a per-head q/k norm nothing."""
    vllm = PerfConfig(kind="measured", engine="vllm", overhead_s=0.0)
    shape = catalog.load_model("minimax_m25")
    assert shape.qk_norm_across_heads
    hw = catalog.load_hardware("b200")
    per_head = dataclasses.replace(shape, qk_norm_across_heads=False)
    across, plain = (build_latency_model(vllm, m, hw, 4) for m in (shape, per_head))
    table = pd.read_csv(AIC_DIR / across.tables.source / "allreduce.csv.gz")
    first_row_s = table[table.num_gpus == 4].sort_values("message_size").latency_ms.iloc[0] / 1e3
    gap_s = across.decode_time_s(4, 4 * 2048) - plain.decode_time_s(4, 4 * 2048)
    assert gap_s == pytest.approx(62 * first_row_s, rel=1e-9)
    assert 62 * 3e-6 < gap_s < 62 * 20e-6  # a few microseconds each on NVLink
    prompt_gap_s = across.prefill_time_s([(8192, 0)]) - plain.prefill_time_s([(8192, 0)])
    assert prompt_gap_s == pytest.approx(62 * across._allreduce_elements_s(8192 * 8 / 2), rel=1e-9)
    tp1 = [build_latency_model(vllm, m, hw, 1).decode_time_s(4, 4 * 2048) for m in (shape, per_head)]
    assert tp1[0] == tp1[1]


def test_moe_table_set_prices_the_experts_from_another_engines_set_of_the_same_gpu():
    """perf.moe_table_set: vLLM's B200 set never measured MXFP4 x MXFP8 experts; SGLang's did (the
    same FlashInfer kernel). gpt-oss at TP1 then reads SGLang's row (64 tokens, balanced routing);
    everything else stays vLLM's. A set of another GPU, or none, is refused by name."""
    shape = dataclasses.replace(catalog.load_model("gpt_oss_120b"), moe_quant="w4a8_mxfp4_mxfp8")
    hw = catalog.load_hardware("b200")
    borrowed = PerfConfig(kind="measured", engine="vllm", overhead_s=0.0, moe_table_set="b200_sxm_sglang_0.5.14")
    model = build_latency_model(borrowed, shape, hw, 1)
    rows = pd.read_csv(AIC_DIR / "b200_sxm_sglang_0.5.14" / "moe.csv.gz")
    row = rows[(rows.moe_dtype == "w4a8_mxfp4_mxfp8") & (rows.hidden_size == 2880) & (rows.num_experts == 128)
               & (rows.moe_tp_size == 1) & (rows.moe_ep_size == 1) & (rows.distribution == "balanced")
               & (rows.num_tokens == 64)].latency_ms.item()
    assert model._experts_s(64) == pytest.approx(row / 1e3, rel=1e-12)
    own = build_latency_model(PerfConfig(kind="measured", engine="vllm", overhead_s=0.0), shape, hw, 1)
    assert own.tables.source == model.tables.source == "b200_sxm_vllm_0.24.0"
    assert own.gemm_s(64, 2880, 2880) == model.gemm_s(64, 2880, 2880)
    for bad in ("h100_sxm_sglang_0.5.14", "b200_sxm_nope_1.0"):
        with pytest.raises(ValueError, match=f"field 'moe_table_set' has unknown value '{bad}' for b200_sxm"):
            build_latency_model(dataclasses.replace(borrowed, moe_table_set=bad), shape, hw, 1)


def _moe_row(table: str, moe_tp: int, tokens: int) -> float:
    """One MiniMax-M2.5 block-fp8 fused-MoE row (ms) of the B200 vLLM set's `table`."""
    rows = pd.read_csv(AIC_DIR / "b200_sxm_vllm_0.24.0" / f"{table}.csv.gz")
    return rows[(rows.moe_dtype == "fp8_block") & (rows.hidden_size == 3072) & (rows.num_experts == 256)
                & (rows.moe_tp_size == moe_tp) & (rows.moe_ep_size == 1) & (rows.distribution == "balanced")
                & (rows.num_tokens == tokens)].latency_ms.item()


def test_moe_fallback_table_prices_the_layers_below_its_token_count():
    """perf.moe_fallback_table: vLLM before 0.24 runs block-fp8 experts in Triton below DeepGEMM's
    128-token alignment. MiniMax-M2.5 at TP2 (experts split 2 ways): 64 tokens read the Triton row,
    128 tokens the set's own (FlashInfer) row; a dtype the fallback never measured (bf16) keeps the
    set's rows at any size."""
    shape = dataclasses.replace(catalog.load_model("minimax_m25"), moe_quant="fp8_block")
    hw = catalog.load_hardware("b200")
    own = PerfConfig(kind="measured", engine="vllm", overhead_s=0.0)
    fallback = dataclasses.replace(own, moe_fallback_table="moe_triton", moe_fallback_below_tokens=128)
    model, plain = (build_latency_model(p, shape, hw, 2) for p in (fallback, own))
    assert model._experts_s(64) == pytest.approx(_moe_row("moe_triton", 2, 64) / 1e3, rel=1e-12)
    assert plain._experts_s(64) == pytest.approx(_moe_row("moe", 2, 64) / 1e3, rel=1e-12)
    assert model._experts_s(64) > 1.1 * plain._experts_s(64)  # Triton is slower at decode sizes
    assert model._experts_s(128) == plain._experts_s(128) == pytest.approx(_moe_row("moe", 2, 128) / 1e3, rel=1e-12)
    gap_s = model.decode_time_s(64, 64 * 1024) - plain.decode_time_s(64, 64 * 1024)
    assert gap_s == pytest.approx(62 * (model._experts_s(64) - plain._experts_s(64)), rel=1e-9)  # 62 MoE layers
    bf16 = dataclasses.replace(shape, moe_quant="bf16")
    assert (build_latency_model(fallback, bf16, hw, 2)._experts_s(64)
            == build_latency_model(own, bf16, hw, 2)._experts_s(64))


def test_moe_fallback_table_refuses_a_missing_table_or_a_count_without_one():
    shape = catalog.load_model("minimax_m25")
    hw = catalog.load_hardware("b200")
    own = PerfConfig(kind="measured", engine="vllm", overhead_s=0.0)
    with pytest.raises(ValueError, match="field 'moe_fallback_table' has unknown value 'moe_cutlass'"):
        build_latency_model(dataclasses.replace(own, moe_fallback_table="moe_cutlass",
                                                moe_fallback_below_tokens=128), shape, hw, 2)
    with pytest.raises(ValueError, match="field 'moe_fallback_table' has unknown value 'gemm'"):
        build_latency_model(dataclasses.replace(own, moe_fallback_table="gemm", moe_fallback_below_tokens=128),
                            shape, hw, 2)
    for table, below in (("", 128), ("moe_triton", 0), ("moe_triton", -1)):
        with pytest.raises(ValueError, match=f"field 'moe_fallback_below_tokens' must be > 0 .* got {below}"):
            build_latency_model(dataclasses.replace(own, moe_fallback_table=table, moe_fallback_below_tokens=below),
                                shape, hw, 2)


def test_an_all_reduce_past_one_nvlink_domain_runs_on_nccl():
    """TP16 on H100 (8-GPU HGX nodes) under TRT-LLM's tables: the engine's custom all-reduce joins
    one node's NVLink only, so 16 ranks price NCCL's all-reduce measured on 8 GPUs (the nccl table,
    message in bytes) plus the two tree levels between the nodes (collectives.extra_steps: 2 x
    RING_HOP_S) and the bytes past the NIC; TP8 stays on the custom all-reduce table."""
    from pdsim.perf.collectives import RING_HOP_S

    trtllm = PerfConfig(kind="measured", engine="trtllm", overhead_s=0.0)
    shape, hw = catalog.load_model("deepseek_v3"), catalog.load_hardware("h100")
    tp16, tp8 = (build_latency_model(trtllm, shape, hw, tp) for tp in (16, 8))
    folder = AIC_DIR / tp16.tables.source
    nccl = pd.read_csv(folder / "nccl.csv.gz")
    row = nccl[(nccl.op == "all_reduce") & (nccl.num_gpus == 8) & (nccl.message_bytes == 4096)].latency_ms.item()
    elements = 2048  # 4096 bytes of bf16
    nic_s = 2 * 4096 * (15 / 16 / (400 / 8 * 1e9) - 7 / 8 / (hw.nvlink_gbps * 1e9))
    assert tp16._allreduce_elements_s(elements) == pytest.approx(row / 1e3 + 2 * RING_HOP_S + nic_s, rel=1e-9)
    custom = pd.read_csv(folder / "allreduce.csv.gz")
    row8 = custom[(custom.num_gpus == 8) & (custom.message_size == elements)].latency_ms.item()
    assert tp8._allreduce_elements_s(elements) == pytest.approx(row8 / 1e3, rel=1e-12)
    assert row8 < row / 3  # the custom kernel is several times NCCL's latency at small messages
