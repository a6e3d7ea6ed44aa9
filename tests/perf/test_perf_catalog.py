"""Catalog YAMLs compose with hydra, and derived sizes match published figures."""

from __future__ import annotations

import csv

import pytest
from hydra import compose, initialize_config_dir

from pdsim.config import register_configs, to_config
from pdsim.paths import SCENARIOS_DIR
from pdsim.perf import build_latency_model, catalog, spec

GIB = 1024**3
# Published totals (model cards / papers), in billions of parameters, and our tolerance.
PUBLISHED_PARAMS_B = {
    "opt_13b": 12.85,  # OPT paper, Table 1 (13B)
    "opt_66b": 65.7,
    "llama2_70b": 68.98,  # HF model card: 68,976,648,192
    "llama3_8b": 8.03,
    "llama3_70b": 70.55,
    "qwen3_32b": 32.8,
    "qwen3_30b_a3b": 30.5,
    "deepseek_v3": 671.0,
    "smollm2_135m": 0.1345,
    # the MoE models of the silicon dev split (sources in each yaml; tests/perf/test_catalog_moe.py)
    "gpt_oss_120b": 116.83,
    "kimi_k25": 1040.0,
    "qwen3_235b_a22b": 235.0,
    "minimax_m25": 230.0,
    "glm5": 744.0,
    "qwen35_397b_a17b": 397.0,
}
# active figures counted as pdsim counts them (embeddings included); gpt-oss and MiniMax publish
# theirs without embedding tables: test_catalog_moe.py
PUBLISHED_ACTIVE_B = {"qwen3_30b_a3b": 3.3, "deepseek_v3": 37.0, "kimi_k25": 32.6, "qwen3_235b_a22b": 22.0,
                      "glm5": 40.0, "qwen35_397b_a17b": 17.0}
MODELS = catalog.catalog_names("model")
HARDWARE = catalog.catalog_names("hardware")
PERFS = {
    "linear": "llama3_8b",
    "roofline": "llama3_70b",
    "distserve_a100": "opt_13b",
    "splitwise": "llama2_70b",
    "measured": "llama3_70b",
}


@pytest.fixture(scope="module")
def composer():
    register_configs()
    with initialize_config_dir(config_dir=str(SCENARIOS_DIR), version_base="1.3"):
        yield lambda overrides: to_config(compose("config", overrides=overrides))


def test_catalog_is_complete():
    assert set(PUBLISHED_PARAMS_B) <= set(MODELS)
    assert {"a100_80g", "a800", "h100", "h800", "h200", "b200", "l40s"} <= set(HARDWARE)


@pytest.mark.parametrize("name", MODELS)
def test_model_composes(composer, name):
    cfg = composer([f"model={name}", "hardware=h100", "perf=roofline"])
    assert cfg.model.name == name
    assert build_latency_model(cfg.perf, cfg.model, cfg.hardware, 8).decode_time_s(4, 4096) > 0


@pytest.mark.parametrize("name", HARDWARE)
def test_hardware_composes(composer, name):
    cfg = composer(["model=llama3_70b", f"hardware={name}", "perf=roofline"])
    hw = cfg.hardware
    assert hw.name == name and hw.bf16_tflops > 100 and hw.hbm_gbps > 500 and hw.memory_gib >= 48
    assert hw.fp8_tflops == 0 or hw.fp8_tflops >= 2 * hw.bf16_tflops - 10


@pytest.mark.parametrize("perf,model", sorted(PERFS.items()))
def test_perf_composes(composer, calibration_file, perf, model):
    cfg = composer([f"model={model}", "hardware=a100_80g", f"perf={perf}"])
    assert cfg.perf.kind in ("linear", "roofline", "fitted", "table", "measured")
    if cfg.perf.path:
        calibration_file(cfg.perf.path.split("/")[-1])
    tp = 2 if model == "opt_13b" else 8
    latency = build_latency_model(cfg.perf, cfg.model, cfg.hardware, tp)
    assert latency.prefill_time_s([(1024, 0)]) > latency.decode_time_s(1, 1024) > 0


@pytest.mark.parametrize("name", MODELS)
def test_param_counts_match_published(models, name):
    assert spec.param_count(models[name]) / 1e9 == pytest.approx(
        PUBLISHED_PARAMS_B[name], rel=0.015
    )
    if name in PUBLISHED_ACTIVE_B:
        assert spec.active_param_count(models[name]) / 1e9 == pytest.approx(
            PUBLISHED_ACTIVE_B[name], rel=0.03
        )


def test_kv_bytes_per_token(models):
    assert spec.kv_bytes_per_token(models["llama3_70b"]) == 320 * 1024  # 80 x 2 x 8 x 128 x 2 B
    opt66_512 = spec.kv_bytes_per_token(models["opt_66b"]) * 512
    assert opt66_512 / GIB == pytest.approx(1.13, abs=0.01)  # 1.125 GiB
    # MLA: (512 latent + 64 rope) x 61 layers x 2 B, kept whole on every TP rank
    ds = models["deepseek_v3"]
    assert spec.kv_bytes_per_token(ds) == 576 * 61 * 2
    assert spec.kv_bytes_per_token_per_rank(ds, 8) == spec.kv_bytes_per_token(ds)
    # GQA: 8 KV heads split over 8 ranks; replicated beyond
    l70 = models["llama3_70b"]
    assert spec.kv_bytes_per_token_per_rank(l70, 8) == 40 * 1024
    assert spec.kv_bytes_per_token_per_rank(l70, 16) == 40 * 1024


def test_weights_and_capacity_errors(models, hardware):
    assert spec.weight_bytes(models["deepseek_v3"]) == spec.param_count(
        models["deepseek_v3"]
    )  # fp8
    with pytest.raises(ValueError, match="does not fit"):
        spec.kv_capacity_tokens(models["llama3_70b"], hardware["h100"], 1, 0.9)
    with pytest.raises(ValueError, match="pipeline"):
        spec.kv_capacity_tokens(models["llama3_8b"], hardware["h100"], 1, 0.9, pp=0)


def test_kv_capacity_matches_distserve(models, hardware, calibration_file):
    """DistServe's max_num_tokens per (model, tp, pp) on A100-80GB, at 95% utilisation."""
    names = {"facebook/opt-13b": "opt_13b", "facebook/opt-66b": "opt_66b"}
    with calibration_file("distserve_max_num_tokens.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r["model"] in names]
    assert len(rows) > 40
    for r in rows:
        ours = spec.kv_capacity_tokens(
            models[names[r["model"]]], hardware["a100_80g"], int(r["tp"]), 0.95, pp=int(r["pp"])
        )
        assert ours == pytest.approx(int(r["max_num_tokens"]), rel=0.02), r


def test_capacity_grows_with_tp_and_pp(models, hardware):
    m, hw = models["llama3_70b"], hardware["h100"]
    tp2 = spec.kv_capacity_tokens(m, hw, 2, 0.9)
    assert spec.kv_capacity_tokens(m, hw, 4, 0.9) > 2 * tp2
    assert spec.kv_capacity_tokens(m, hw, 2, 0.9, pp=2) == pytest.approx(
        spec.kv_capacity_tokens(m, hw, 4, 0.9), rel=1e-6
    )
