"""Roofline and step-cost behaviour: growth laws, MoE/MLA effects, TP communication."""

from __future__ import annotations

import dataclasses

import pytest

from pdsim.perf import cost, spec
from pdsim.perf.roofline import RooflineModel


@pytest.fixture()
def l70(models, hardware):
    return RooflineModel(models["llama3_70b"], hardware["h100"], 8)


def test_prefill_quadratic_at_long_context(l70, models, hardware):
    lengths = [32_768 * k for k in (1, 2, 3, 4)]
    t = [l70.prefill_time_s([(n, 0)]) for n in lengths]
    second = [t[i + 2] - 2 * t[i + 1] + t[i] for i in range(2)]
    assert second[0] > 0 and second[1] == pytest.approx(second[0], rel=0.01)  # exactly quadratic
    small = RooflineModel(models["llama3_8b"], hardware["h100"], 1)
    ratios = [
        small.prefill_time_s([(2 * n, 0)]) / small.prefill_time_s([(n, 0)])
        for n in (1024, 65_536, 262_144)
    ]
    assert (
        ratios[0] < 2.2 and ratios == sorted(ratios) and 3.3 < ratios[-1] < 4.0
    )  # -> 4x per doubling
    short = l70.prefill_time_s([(2048, 0)]) / l70.prefill_time_s([(1024, 0)])
    assert 1.5 < short < 2.2  # GEMM-dominated: ~linear


def test_attention_pairs_causal():
    assert cost.attention_pairs([(4, 0)]) == 10  # 1 + 2 + 3 + 4
    assert cost.attention_pairs([(2, 3)]) == 2 * 3 + 3
    assert cost.attention_pairs([(4, 0), (2, 3)]) == 19


def test_decode_grows_with_batch_and_context(l70):
    by_batch = [l70.decode_time_s(b, b * 2048) for b in (1, 8, 64, 256)]
    assert by_batch == sorted(by_batch) and by_batch[-1] > by_batch[0]
    by_ctx = [l70.decode_time_s(32, 32 * c) for c in (128, 1024, 8192, 32768)]
    assert by_ctx == sorted(by_ctx) and by_ctx[-1] > 2 * by_ctx[0]
    assert l70.decode_time_s(0, 0) == 0.0 and l70.prefill_time_s([]) == 0.0


def test_decode_batch1_is_weight_bandwidth_bound(models, hardware):
    m = RooflineModel(models["llama3_70b"], hardware["h100"], 1, mbu=1.0, overhead_s=0.0)
    weights_s = 141.1e9 / 3.35e12  # 70.55B bf16 params over 3.35 TB/s
    assert m.decode_time_s(1, 1) == pytest.approx(weights_s, rel=0.02)


def test_mixed_between_parts_and_sum(l70):
    prefill = l70.prefill_time_s([(512, 0)])
    decode = l70.decode_time_s(32, 32 * 1024)
    mixed = l70.mixed_time_s([(512, 0)], 32, 32 * 1024)
    assert max(prefill, decode) <= mixed < prefill + decode  # weights read once


def test_tp_speeds_up_and_costs_allreduce(models, hardware):
    tp1 = RooflineModel(models["llama3_8b"], hardware["h100"], 1)
    tp4 = RooflineModel(models["llama3_8b"], hardware["h100"], 4)
    assert tp4.prefill_time_s([(4096, 0)]) < tp1.prefill_time_s([(4096, 0)])
    step = cost.prefill_cost(models["llama3_8b"], [(4096, 0)], 4)
    assert step.num_allreduces == 64 and step.allreduce_bytes == 4096 * 4096 * 2
    assert (
        tp4.terms(step).comm_s > 0
        and tp1.terms(cost.prefill_cost(models["llama3_8b"], [(4096, 0)], 1)).comm_s == 0
    )
    pcie = RooflineModel(models["llama3_8b"], hardware["l40s"], 4)
    assert pcie.terms(step).comm_s > tp4.terms(step).comm_s  # no NVLink: PCIe all-reduce


def test_moe_decode_reads_only_touched_experts(models):
    qwen = models["qwen3_30b_a3b"]
    assert cost.experts_touched(qwen, 1) == pytest.approx(8)
    assert cost.experts_touched(qwen, 10_000) == pytest.approx(128)
    small = cost.decode_cost(qwen, 1, 1024, 1).bytes
    big = cost.decode_cost(qwen, 256, 256 * 1024, 1).bytes
    assert small < 0.25 * big  # batch 1 loads ~8 of 128 experts
    flops_per_token = cost.decode_cost(qwen, 1, 1, 1).flops
    embedding_table = qwen.vocab_size * qwen.hidden_size  # looked up, not multiplied
    assert flops_per_token == pytest.approx(2 * (3.34e9 - embedding_table), rel=0.02)


def test_mla_decode_reads_latent_kv(models, hardware):
    ds = models["deepseek_v3"]
    step = cost.decode_cost(ds, 64, 64 * 4096, 8)
    attention = next(op for op in step.ops if op.name == "attention_decode")
    assert attention.bytes == pytest.approx((64 * 4096 + 64) * 576 * 61 * 2)
    fp8 = RooflineModel(ds, hardware["h200"], 8)
    assert fp8.prefill_time_s([(8192, 0)]) < RooflineModel(
        ds, hardware["a100_80g"], 8
    ).prefill_time_s([(8192, 0)])


def test_bad_efficiency_names_field(models, hardware):
    with pytest.raises(ValueError, match="'mfu'"):
        RooflineModel(models["llama3_8b"], hardware["h100"], 1, mfu=1.5)


def test_qk_norm_statistics_all_reduce_once_a_layer_under_tp(models, hardware):
    """spec.tp_all_reduces: two activation all-reduces a layer under TP, plus one of the q/k-norm
    statistics (8 bytes a token) a full-attention layer where the norm spans all heads."""
    minimax, qwen35 = models["minimax_m25"], models["qwen35_397b_a17b"]
    assert spec.tp_all_reduces(minimax, 1) == (0, 0)
    assert spec.tp_all_reduces(minimax, 4) == (124, 62)
    assert spec.tp_all_reduces(models["llama3_70b"], 8) == (160, 0)
    hybrid = dataclasses.replace(qwen35, qk_norm_across_heads=True)  # 60 layers, 45 of them linear
    assert spec.tp_all_reduces(hybrid, 2) == (120, 15)
    step = cost.step_cost(minimax, [(1000, 0)], 3, 3000, 4)
    assert (step.num_allreduces, step.num_stat_allreduces, step.stat_allreduce_bytes) == (124, 62, 1003 * 8)
    per_head = dataclasses.replace(minimax, qk_norm_across_heads=False)
    model, plain = RooflineModel(minimax, hardware["h100"], 4), RooflineModel(per_head, hardware["h100"], 4)
    link = hardware["h100"].nvlink_gbps * 1e9
    want = 62 * (model.comm_latency_s + 2 * 3 / 4 * 1003 * 8 / link)
    plain_step = cost.step_cost(per_head, [(1000, 0)], 3, 3000, 4)
    assert model.terms(step).comm_s - plain.terms(plain_step).comm_s == pytest.approx(want, rel=1e-12)
    assert model.mixed_time_s([(1000, 0)], 3, 3000) - plain.mixed_time_s([(1000, 0)], 3, 3000) == pytest.approx(
        want, rel=1e-9)
