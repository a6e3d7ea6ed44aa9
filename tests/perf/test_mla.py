"""MLA's projections kernel by kernel (pdsim/perf/mla.py): the shapes each GEMM is read at, the
replicated down-projection, kv_b for prompt tokens against the absorbed BMMs for decode tokens,
read from the shipped mla_bmm rows, and where they enter the measured and the DP step."""

from __future__ import annotations

import csv
import dataclasses
import gzip

import pytest

from pdsim.config import ModelConfig
from pdsim.parallel import Parallel
from pdsim.perf import build_latency_model, catalog
from pdsim.perf.dp_attention import DataParallelModel
from pdsim.perf.measured import MeasuredModel
from pdsim.perf.mla import MlaProjections, bmm_dtype, load_bmm
from pdsim.perf.optables import AIC_DIR

SGLANG_B200 = "b200_sxm_sglang_0.5.14"


@pytest.fixture(scope="module")
def dsv3() -> ModelConfig:
    return dataclasses.replace(catalog.load_model("deepseek_v3"), gemm_quant="fp8_block", moe_quant="fp8_block")


def _recorder() -> tuple[list[tuple[float, float, float]], object]:
    calls: list[tuple[float, float, float]] = []

    def gemm_s(m: float, n: float, k: float) -> float:
        calls.append((m, n, k))
        return 1.0  # one second a GEMM: the sums count kernels
    return calls, gemm_s


def _bmm_ms(op: str, dtype: str, tokens: int, heads: int) -> float:
    with gzip.open(AIC_DIR / SGLANG_B200 / "mla_bmm.csv.gz", "rt") as f:
        for row in csv.DictReader(f):
            if (row["op"], row["bmm_dtype"], int(row["num_tokens"]), int(row["num_heads"])) == (op, dtype, tokens, heads):
                return float(row["latency_ms"])
    raise AssertionError(f"no {op} {dtype} row at {tokens} tokens, {heads} heads")


def test_every_token_runs_three_gemms_at_their_own_shapes(dsv3: ModelConfig) -> None:
    calls, gemm_s = _recorder()
    assert MlaProjections(dsv3, 8, gemm_s).common_s(4) == 3.0
    # hidden 7168 -> 1536 + 512 + 64 on every rank; 1536 -> 16 heads x 192; 16 x 128 -> 7168
    assert calls == [(4, 2112, 7168), (4, 16 * 192, 1536), (4, 7168, 16 * 128)]
    calls.clear()
    MlaProjections(dsv3, 1, gemm_s).common_s(4)
    assert calls[0] == (4, 2112, 7168)  # the down-projection does not shrink with TP
    assert calls[1:] == [(4, 128 * 192, 1536), (4, 7168, 128 * 128)]


def test_prompt_tokens_run_kv_b_and_decode_tokens_the_absorbed_bmms(dsv3: ModelConfig) -> None:
    calls, gemm_s = _recorder()
    bmm = load_bmm(SGLANG_B200, dsv3)
    assert bmm is not None and bmm_dtype(dsv3) == "fp8"
    mla = MlaProjections(dsv3, 8, gemm_s, bmm)
    pre, post = _bmm_ms("mla_gen_pre", "fp8", 4, 16), _bmm_ms("mla_gen_post", "fp8", 4, 16)
    assert mla.split_s(0, 4) == pytest.approx((pre + post) / 1e3, rel=1e-12)
    assert calls == []  # decode alone: no kv_b GEMM
    # a prompt of 300 new tokens after 200 cached ones plus the 4 decodes: kv_b over 500 tokens
    assert mla.split_s(500, 4) == pytest.approx(1.0 + (pre + post) / 1e3, rel=1e-12)
    assert calls == [(500, 16 * 256, 512)]
    calls.clear()
    assert MlaProjections(dsv3, 8, gemm_s).split_s(0, 4) == 1.0  # no BMM rows: kv_b's FLOPs
    assert calls == [(4, 16 * 256, 512)]


def test_bmm_dtype_follows_the_checkpoint_and_sets_without_rows_have_none(dsv3: ModelConfig) -> None:
    bf16 = dataclasses.replace(dsv3, gemm_quant="", moe_quant="")
    assert bmm_dtype(bf16) == "bfloat16" and bmm_dtype(dsv3) == "fp8"
    pre, _ = load_bmm(SGLANG_B200, bf16)  # type: ignore[misc]
    assert pre(4, 16) == pytest.approx(_bmm_ms("mla_gen_pre", "bfloat16", 4, 16), rel=1e-12)
    assert load_bmm("h200_sxm_sglang_0.5.10", dsv3) is None


def test_the_decode_step_carries_the_bmms_and_the_replicated_down_projection(dsv3: ModelConfig) -> None:
    perf = dataclasses.replace(catalog.load_perf("measured"), engine_version="0.5.14")
    b200 = catalog.load_hardware("b200")
    model = build_latency_model(perf, dsv3, b200, 8)
    assert isinstance(model, MeasuredModel)
    layers, n = 61, 4
    bmm_s = layers * (_bmm_ms("mla_gen_pre", "fp8", n, 16) + _bmm_ms("mla_gen_post", "fp8", n, 16)) / 1e3
    assert model.mla_split_s(0, n) == pytest.approx(bmm_s, rel=1e-12)
    context = n * 1000
    step = model.decode_time_s(n, context)
    compiled = model.decode_step(n).time_s(context)
    assert compiled == pytest.approx(step, rel=1e-9)  # the compiled step adds the same
    assert step == pytest.approx(model._per_token_s(n) + model._lm_head_s(n) + bmm_s + model.overhead_s
                                 + model.overhead_per_seq_s * n + layers * model._decode_attention_s(n, context), rel=1e-12)
    # a prompt step: kv_b over its tokens, no BMM
    assert model.mla_split_s(1000, 0) == pytest.approx(layers * model.gemm_s(1000, 16 * 256, 512), rel=1e-12)
    # attention DP: each rank's decode pays the BMMs of its own sequences (16 over 8 ranks: 2)
    dp = build_latency_model(perf, dsv3, b200, Parallel(1, 8, 8))
    assert isinstance(dp, DataParallelModel)
    rank_bmm = dp.rank.mla_split_s(0, 2)
    assert rank_bmm == pytest.approx(layers * (_bmm_ms("mla_gen_pre", "fp8", 2, 128)
                                               + _bmm_ms("mla_gen_post", "fp8", 2, 128)) / 1e3, rel=1e-12)
    assert dp._decode_fixed_s(16) == pytest.approx(
        dp.rank.rank_fixed_s(2, 2) + rank_bmm + dp.moe_s(16, 2, False) + dp.rank.overhead_s + dp.rank.overhead_per_seq_s * 2)
