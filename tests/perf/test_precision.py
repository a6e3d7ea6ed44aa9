"""Precision as an axis: GEMM quant modes and KV dtype in weights, KV, peaks, tables, topology."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from pdsim.config import PerfConfig
from pdsim.perf import build_latency_model, catalog, spec
from pdsim.perf.optables import AIC_DIR, resolve_set
from pdsim.perf.roofline import gemm_tflops
from pdsim.perf.table_keys import needed_tables

FP8 = PerfConfig(kind="measured", engine="sglang", overhead_s=0.0)


def _model(name: str = "llama3_70b", **precision: str):
    return dataclasses.replace(catalog.load_model(name), **precision)


def test_weight_bytes_follow_the_gemm_quant_mode_embeddings_stay_bf16():
    bf16, fp8, fp4 = _model(), _model(gemm_quant="fp8"), _model(gemm_quant="nvfp4")
    emb = spec.embedding_params(bf16)
    linear = spec.param_count(bf16) - emb
    assert spec.weight_bytes(bf16) == spec.param_count(bf16) * 2
    assert spec.weight_bytes(fp8) == linear + 2 * emb
    assert spec.weight_bytes(fp4) == int(linear * (0.5 + 1 / 16)) + 2 * emb
    assert spec.weight_bytes(_model(gemm_quant="bf16")) == spec.weight_bytes(bf16)


def test_kv_dtype_halves_kv_bytes_and_raises_capacity():
    h100 = catalog.load_hardware("h100")
    bf16, fp8kv = _model(gemm_quant="fp8"), _model(gemm_quant="fp8", kv_dtype="fp8")
    assert spec.kv_bytes_per_token(fp8kv) * 2 == spec.kv_bytes_per_token(bf16)
    assert spec.kv_capacity_tokens(fp8kv, h100, 4, 0.9) == pytest.approx(
        2 * spec.kv_capacity_tokens(bf16, h100, 4, 0.9), rel=1e-6)
    with pytest.raises(ValueError, match="does not fit"):  # 131 GiB of bf16 weights on one H100
        spec.kv_capacity_tokens(_model(), h100, 1, 0.9)


def test_gemm_peaks_per_quant_mode():
    b200, h100 = catalog.load_hardware("b200"), catalog.load_hardware("h100")
    assert gemm_tflops(_model(), b200) == b200.bf16_tflops
    assert gemm_tflops(_model(gemm_quant="fp8_block"), b200) == b200.fp8_tflops
    assert gemm_tflops(_model(gemm_quant="nvfp4"), b200) == b200.fp4_tflops
    assert gemm_tflops(_model(gemm_quant="nvfp4"), h100) == h100.fp8_tflops  # no FP4 on Hopper
    assert gemm_tflops(_model(gemm_quant="int4_wo"), h100) == h100.bf16_tflops


def test_table_set_resolution_by_needed_tables():
    assert resolve_set("h100_sxm", "sglang", "", ()) == "h100_sxm_sglang_0.5.10"  # bf16 default
    assert needed_tables(_model(gemm_quant="fp8", kv_dtype="fp8")) == ("gemm_fp8", "generation_attention_fp8")
    assert resolve_set("h100_sxm", "sglang", "", ("gemm_fp8",)) == "h100_sxm_sglang_0.5.14"
    assert resolve_set("b300_sxm", "trtllm", "", ("gemm_nvfp4",)) == "b300_sxm_trtllm_1.3.0rc20"
    with pytest.raises(ValueError, match=r"h100_sxm.*gemm_nvfp4"):
        resolve_set("h100_sxm", "trtllm", "", ("gemm_nvfp4",))
    with pytest.raises(ValueError, match="engine_version"):
        resolve_set("h100_sxm", "sglang", "9.9", ())


def test_measured_model_reads_the_quant_tables():
    h100 = catalog.load_hardware("h100")
    fp8 = build_latency_model(FP8, _model("llama3_8b", gemm_quant="fp8"), h100, 1)
    rows = pd.read_csv(AIC_DIR / "h100_sxm_sglang_0.5.14" / "gemm_fp8.csv.gz")
    row = rows[(rows.m == 64) & (rows.n == 4096) & (rows.k == 4096)].latency_ms.item()
    assert fp8.gemm_s(64, 4096, 4096) == pytest.approx(row / 1e3, rel=1e-9)
    bf16 = build_latency_model(FP8, _model("llama3_8b"), h100, 1)
    assert fp8.decode_time_s(8, 8 * 1024) < 0.8 * bf16.decode_time_s(8, 8 * 1024)  # half the weights
    fp8kv = build_latency_model(FP8, _model("llama3_8b", gemm_quant="fp8", kv_dtype="fp8"), h100, 1)
    assert fp8kv.decode_time_s(64, 64 * 8192) < fp8.decode_time_s(64, 64 * 8192)  # half the KV read
    w4 = build_latency_model(FP8, _model("llama3_8b", gemm_quant="int4_wo"), h100, 1)
    assert w4.decode_time_s(1, 1024) < bf16.decode_time_s(1, 1024)
    assert w4.prefill_time_s([(8192, 0)]) == pytest.approx(bf16.prefill_time_s([(8192, 0)]), rel=0.01)


def test_precision_fields_are_validated_with_one_line_errors():
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR

    register_configs()
    with initialize_config_dir(config_dir=str(SCENARIOS_DIR), version_base="1.3"):
        ok = to_config(compose("config", overrides=["model=llama3_8b", "model.gemm_quant=nvfp4",
                                                    "model.kv_dtype=fp8", "hardware=gb300"]))
        assert (ok.model.gemm_quant, ok.model.kv_dtype, ok.hardware.fp4_tflops) == ("nvfp4", "fp8", 15000)
        with pytest.raises(ValueError, match=r"^model: field 'gemm_quant' has unknown value 'fp6'"):
            to_config(compose("config", overrides=["model=llama3_8b", "model.gemm_quant=fp6"]))


def test_nvl72_domain_spans_nodes():
    from pdsim.config import ClusterConfig
    from pdsim.sim.events import SimEnvironment
    from pdsim.sim.network import Network
    from pdsim.sim.topology import Topology

    gb300 = catalog.load_hardware("gb300")
    assert (gb300.gpus_per_node, gb300.nvlink_domain_gpus) == (4, 72)
    for hw, over_nvlink in ((gb300, True), (catalog.load_hardware("b300"), False)):
        topo = Topology(Network(SimEnvironment()), ClusterConfig(), hw)
        topo.place("prefill:0", 8)  # fills the first node(s)
        topo.place("decode:0", 8)
        path = topo.path("prefill:0", "decode:0")
        assert (path[0].name.endswith("nvl_out")) is over_nvlink


def test_frontier_deployments_take_precision_as_an_axis():
    from pdsim.search.deployments import deployment_config, parse_label

    dep = parse_label("co-tp2x8@fp8.kvfp8")
    assert (dep.precision, dep.label, dep.text) == ("fp8.kvfp8", "co-tp2x8@fp8.kvfp8", "colocated 8xTP2 fp8.kvfp8")
    assert parse_label("pd-tp4x2-tp8x1@nvfp4").precision == "nvfp4"
    assert parse_label("co-tp2x8").precision == ""
    with pytest.raises(ValueError, match="^frontier: precision 'fp6'"):
        parse_label("co-tp2x8@fp6")
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR
    from pdsim.search.deployments import frontier_deployments

    register_configs()
    with initialize_config_dir(config_dir=str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=[
            "model=llama3_70b", "hardware=h100", "frontier.gpus=8", "frontier.modes=[colocated]",
            "frontier.precisions=[bf16,fp8.kvfp8]"]))
    labels = [d.label for d in frontier_deployments(cfg)]
    # 131 GiB of bf16 weights need TP2 on 80 GB H100s; fp8's 68 GiB fit one GPU
    assert "co-tp1x8@fp8.kvfp8" in labels and "co-tp1x8@bf16" not in labels and "co-tp2x4@bf16" in labels
    run = deployment_config(cfg, parse_label("co-tp1x8@fp8.kvfp8"))
    assert (run.model.gemm_quant, run.model.kv_dtype, run.cluster.colocated) == ("fp8", "fp8", 8)


def test_plan_fits_tps_at_the_models_precision():
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR
    from pdsim.search.planner import fitting_tps

    register_configs()
    with initialize_config_dir(config_dir=str(SCENARIOS_DIR), version_base="1.3"):
        base = ["model=llama3_70b", "hardware=h100", "plan.gpus=8"]
        bf16 = to_config(compose("config", overrides=base))
        fp8 = to_config(compose("config", overrides=[*base, "model.gemm_quant=fp8", "model.kv_dtype=fp8"]))
    assert 1 not in fitting_tps(bf16) and 1 in fitting_tps(fp8)
