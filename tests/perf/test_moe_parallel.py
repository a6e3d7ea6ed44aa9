"""MoE at scale (issue 40) pinned by hand: sliding-window pairs, how a step spreads over DP ranks,
collectives past the measured GPU counts, expert-parallel experts and the DP exchange read from
the shipped tables, per-layout KV capacity, the layer kinds, config errors, and one small
DP8/EP8 run."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import math
from itertools import pairwise

import pandas as pd
import pytest

from pdsim.cli import check_overrides, compose_config
from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.parallel import Parallel
from pdsim.perf import build_latency_model, catalog, cost, prefill_ranks_time_s, spec
from pdsim.perf.capacity import instance_kv_capacity_tokens, weight_bytes_per_gpu
from pdsim.perf.collectives import RING_HOP_S, beyond_table_s, extra_steps
from pdsim.perf.dp_attention import DataParallelModel, spread
from pdsim.perf.layer_kinds import linear_attention_layer_s, window_pairs
from pdsim.perf.measured import build_measured
from pdsim.perf.optables import AIC_DIR, load_tables
from pdsim.perf.table_keys import moe_grid_for

SGLANG_B200 = "b200_sxm_sglang_0.5.14"
DSV3_MOE_LAYERS = 61 - 3  # deepseek_v3: 61 layers, the first 3 dense
DSV3_HIDDEN_BYTES = 7168 * 2  # one token's bf16 hidden state


def _rows(table_set: str, name: str) -> list[dict[str, str]]:
    with gzip.open(AIC_DIR / table_set / f"{name}.csv.gz", "rt") as f:
        return list(csv.DictReader(f))


def _moe_ms(table_set: str, dtype: str, shape: str, tp_ep: str, distribution: str, tokens: int) -> float:
    """The one moe.csv row of this dtype, 'hidden,inter,topk,experts', 'moe_tp,moe_ep', routing, tokens."""
    key = ",".join((dtype, shape, tp_ep, distribution, str(tokens)))
    cols = ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size",
            "distribution", "num_tokens")
    [ms] = [float(r["latency_ms"]) for r in _rows(table_set, "moe") if ",".join(r[c] for c in cols) == key]
    return ms


def _nccl_s(op: str, gpus: int, nbytes: float) -> float:
    """The nccl table's `op` over `gpus` GPUs at `nbytes`: straight line in log-log between the
    two measured sizes around it (s)."""
    points = sorted((float(r["message_bytes"]), float(r["latency_ms"])) for r in _rows(SGLANG_B200, "nccl")
                    if r["op"] == op and int(r["num_gpus"]) == gpus)
    (x0, y0), (x1, y1) = next((a, b) for a, b in pairwise(points) if a[0] <= nbytes <= b[0])
    u = math.log(nbytes / x0) / math.log(x1 / x0)
    return y0 * (y1 / y0) ** u / 1e3


def _exchange_s(tokens: int) -> float:
    nbytes = tokens * DSV3_HIDDEN_BYTES
    return _nccl_s("all_gather", 8, nbytes) + _nccl_s("reduce_scatter", 8, nbytes)


@pytest.fixture(scope="module")
def b200() -> HardwareConfig:
    return catalog.load_hardware("b200")


@pytest.fixture(scope="module")
def sglang() -> PerfConfig:
    return dataclasses.replace(catalog.load_perf("measured"), engine_version="0.5.14")


@pytest.fixture(scope="module")
def dsv3() -> ModelConfig:
    return dataclasses.replace(catalog.load_model("deepseek_v3"), gemm_quant="fp8_block", moe_quant="fp8_block")


@pytest.fixture(scope="module")
def dp8(sglang: PerfConfig, dsv3: ModelConfig, b200: HardwareConfig) -> DataParallelModel:
    model = build_latency_model(sglang, dsv3, b200, Parallel(1, 8, 8))
    assert isinstance(model, DataParallelModel) and model.rank.tables.source == SGLANG_B200
    return model


# -- layer kinds: sliding windows --------------------------------------------------------------
def test_window_pairs_by_hand() -> None:
    assert window_pairs([(4, 0)], 2) == 1 + 2 + 2 + 2  # positions 1..4 see min(p, 2) keys
    assert window_pairs([(2, 3)], 4) == 4 + 4  # positions 4 and 5, each capped at 4
    assert window_pairs([(1000, 0)], 128) == 128 * 129 / 2 + 872 * 128
    inside = [(10, 5), (3, 0)]  # every query sees at most 15 keys < the window
    assert window_pairs(inside, 64) == cost.attention_pairs(inside) == 10 * 5 + 55 + 6


# -- attention DP: the spread, collectives, the step --------------------------------------------
def test_spread_over_two_ranks() -> None:
    # decodes 3 + 2 (the first rank takes the remainder), context 500 * 3 // 5 = 300 and 200;
    # chunks largest first onto the fewest tokens: 100 -> rank 1 (2 < 3), 50 -> rank 0 (3 < 102),
    # 30 -> rank 0 (53 < 102)
    shares = spread([(100, 0), (50, 0), (30, 0)], 5, 500, 2)
    assert shares == [(((50, 0), (30, 0)), 3, 300), (((100, 0),), 2, 200)]


def test_spread_ties_and_context() -> None:
    assert [s[0] for s in spread([(8, 0), (8, 0), (8, 0)], 0, 0, 4)] == [((8, 0),), ((8, 0),), ((8, 0),), ()]
    shares = spread([], 7, 1000, 3)  # 3, 2, 2 decodes: 1000*3//7 = 428, 1000*2//7 = 285 twice,
    assert [(s[1], s[2]) for s in shares] == [(3, 430), (2, 285), (2, 285)]  # the 2 left to rank 0
    assert sum(s[2] for s in shares) == 1000


def test_beyond_table_ring_and_nic() -> None:
    h100, gb200 = catalog.load_hardware("h100"), catalog.load_hardware("gb200")
    mib = float(1 << 20)
    assert beyond_table_s(h100, 8, 8, mib, 1) == 0.0
    # 16 GPUs leave the 8-GPU node: 8 more ring steps, and each GPU's 15/16 of the message over
    # its NIC share (8 x 400 Gb/s / 8 GPUs = 50 GB/s) instead of 7/8 of it over NVLink (450 GB/s)
    want = 8 * RING_HOP_S + mib * 15 / 16 / 50e9 - mib * 7 / 8 / 450e9
    assert beyond_table_s(h100, 8, 16, mib, 1) == pytest.approx(want, rel=1e-12)
    # an all-reduce over two nodes: NCCL's tree between the nodes, 2 x log2(2) = 2 steps
    assert beyond_table_s(h100, 8, 16, mib, 2) == pytest.approx(2 * RING_HOP_S + 2 * (want - 8 * RING_HOP_S), rel=1e-12)
    # TP64 over 8 nodes: up and down a 3-level tree (not 56 ring steps)
    want = 6 * RING_HOP_S + 2 * (mib * 63 / 64 / 50e9 - mib * 7 / 8 / 450e9)
    assert beyond_table_s(h100, 8, 64, mib, 2) == pytest.approx(want, rel=1e-12)
    assert [extra_steps(8, g, 8, 2) for g in (8, 9, 16, 17, 64, 72)] == [0, 2, 2, 4, 6, 8]
    # inside an NVL72 domain the switches reduce and multicast (NVLS): no extra steps; past it an
    # all-reduce climbs the tree between the 2 domains, a ring steps once per GPU past the domain
    assert [extra_steps(8, g, 72, 2) for g in (16, 72, 144)] == [0, 0, 2]
    assert [extra_steps(4, g, 72, 1) for g in (32, 72, 144)] == [0, 0, 72]
    # NVL72 keeps 64 GPUs on NVLink (900 GB/s): only the ring's larger share of the bytes
    want = mib * (63 / 64 - 7 / 8) / 900e9
    assert beyond_table_s(gb200, 8, 64, mib, 1) == pytest.approx(want, rel=1e-12)
    want = 72 * RING_HOP_S + mib * 143 / 144 / 50e9 - mib * 7 / 8 / 900e9  # 144 GPUs cross it
    assert beyond_table_s(gb200, 8, 144, mib, 1) == pytest.approx(want, rel=1e-12)


def test_dp8_decode_is_busiest_rank_plus_moe(dp8: DataParallelModel) -> None:
    rank = dp8.rank
    assert rank.moe_experts_s(8) == pytest.approx(DSV3_MOE_LAYERS * 0.1044e-3, rel=1e-9)  # moe.csv, 8 tokens
    assert dp8.collective_s("all_gather", 8 * DSV3_HIDDEN_BYTES) == pytest.approx(
        _nccl_s("all_gather", 8, 8 * DSV3_HIDDEN_BYTES), rel=1e-9)
    expected = (rank.rank_s((), 1, 1000) + DSV3_MOE_LAYERS * (0.1044e-3 + _exchange_s(8))
                + rank.overhead_s + rank.overhead_per_seq_s)
    assert dp8.decode_time_s(8, 8 * 1000) == pytest.approx(expected, rel=1e-9)
    times = [dp8.decode_time_s(n, 1000 * n) for n in range(1, 40)]
    assert all(b >= a for a, b in pairwise(times))  # one more sequence never speeds a step up


def test_dp8_prefill_of_eight_prompts(dp8: DataParallelModel) -> None:
    rank, prompt = dp8.rank, (512, 0)
    # one prompt per rank: the rank part of one prompt, the experts over all 4096 tokens
    expected = (rank.rank_s((prompt,), 0, 0) + DSV3_MOE_LAYERS * (2.025e-3 + _exchange_s(8 * 512))
                + rank.overhead_s + rank.overhead_per_seq_s)
    assert dp8.prefill_time_s([prompt] * 8) == pytest.approx(expected, rel=1e-9)
    assert dp8.prefill_time_s([prompt]) < dp8.prefill_time_s([prompt] * 8) < 8 * dp8.prefill_time_s([prompt])


def test_dp8_prefill_placed_by_the_scheduler(dp8: DataParallelModel) -> None:
    """cluster.prefill_dp_dispatch=bootstrap_room: the chunks stay where the ranks took them."""
    rank, prompt = dp8.rank, (512, 0)
    spread_ranks = [[prompt]] * 8  # where the balanced spread puts 8 prompts: the same forward
    assert dp8.prefill_ranks_time_s(spread_ranks) == pytest.approx(dp8.prefill_time_s([prompt] * 8), rel=1e-12)
    # all 8 on rank 0: that rank's part of 8 prompts, the experts still over all 4096 tokens,
    # and the per-sequence overhead of the 8 sequences on that rank
    piled = [[prompt] * 8] + [[]] * 7
    expected = (rank.rank_s((prompt,) * 8, 0, 0) + DSV3_MOE_LAYERS * (2.025e-3 + _exchange_s(8 * 512))
                + rank.overhead_s + 8 * rank.overhead_per_seq_s)
    assert dp8.prefill_ranks_time_s(piled) == pytest.approx(expected, rel=1e-9)
    assert dp8.prefill_ranks_time_s(piled) > dp8.prefill_time_s([prompt] * 8)
    assert dp8.prefill_ranks_time_s([[]] * 8) == 0.0
    with pytest.raises(ValueError, match="a forward over 2 ranks on an instance of dp=8"):
        dp8.prefill_ranks_time_s([[prompt], []])


def test_placed_prefill_through_the_wrappers(sglang: PerfConfig, dsv3: ModelConfig, b200: HardwareConfig) -> None:
    """The step-overhead wrapper prices a placed forward as it prices a spread one; a model
    without ranks takes the chunks together."""
    perf = dataclasses.replace(sglang, prefill_step_overhead_s=0.002)
    model = build_latency_model(perf, dsv3, b200, Parallel(1, 8, 8))
    prompt = (512, 0)
    assert prefill_ranks_time_s(model, [[prompt]] * 8) == pytest.approx(model.prefill_time_s([prompt] * 8), rel=1e-12)
    plain = build_latency_model(perf, dsv3, b200, Parallel(8, 1, 8))
    assert prefill_ranks_time_s(plain, [[prompt], [prompt, prompt]]) == pytest.approx(
        plain.prefill_time_s([prompt] * 3), rel=1e-12)


# -- expert parallelism from the fused-MoE tables ----------------------------------------------
@pytest.mark.parametrize("distribution", ["balanced", "power_law_1.01"])
def test_ep8_experts_are_the_table_row(sglang: PerfConfig, dsv3: ModelConfig, b200: HardwareConfig,
                                       distribution: str) -> None:
    perf = dataclasses.replace(sglang, moe_distribution=distribution)
    rank = build_measured(perf, dsv3, b200, Parallel(1, 8, 8))
    assert (rank.tp, rank.moe_ep, rank.moe_gpus) == (1, 8, 8)
    row = _moe_ms(SGLANG_B200, "fp8_block", "7168,2048,8,256", "1,8", distribution, 64)
    assert rank._experts_s(64) * 1e3 == pytest.approx(row, rel=1e-9)


def test_moe_grid_falls_back_to_the_same_gpus() -> None:
    tables, shape = load_tables("b200_sxm_trtllm_1.3.0rc20"), (2880, 2880, 4, 128)  # gpt-oss: EP only
    assert tables.moe_grid("w4a16_mxfp4", shape, 4, 2) is None
    grid = moe_grid_for(tables, "w4a16_mxfp4", shape, 4, 2)
    row = _moe_ms("b200_sxm_trtllm_1.3.0rc20", "w4a16_mxfp4", "2880,2880,4,128", "1,8", "balanced", 64)
    assert grid is not None and grid(64) == pytest.approx(row, rel=1e-9)
    assert moe_grid_for(tables, "w4a16_mxfp4", shape, 3, 1) is None  # no split of 3 GPUs measured


# -- capacity --------------------------------------------------------------------------------
def test_capacity_dp8_ep8_by_hand(dsv3: ModelConfig, b200: HardwareConfig) -> None:
    per_gpu = 180 * 0.9 * 2**30 - 2.0 * 2**30  # memory_gib x utilisation - reserved_gib
    experts = 3 * 7168 * 2048 * 256 * DSV3_MOE_LAYERS * (1 + 4 / (128 * 128))  # fp8_block bytes
    assert spec.routed_expert_params(dsv3) * spec.expert_weight_bytes(dsv3) == pytest.approx(experts, rel=1e-12)
    total = spec.weight_bytes(dsv3)
    kv_token = 61 * (512 + 64) * 2  # MLA latent, bf16, whole on every rank
    dp8 = Parallel(1, 8, 8)
    assert weight_bytes_per_gpu(dsv3, dp8) == pytest.approx(total - experts + experts / 8, rel=1e-12)  # TP1 ranks
    assert instance_kv_capacity_tokens(dsv3, b200, dp8, 0.9) == int((per_gpu - (total - experts + experts / 8))
                                                                    // kv_token) * 8
    # MLA's fused down-projection (7168 -> 1536 + 512 + 64) is whole on every TP rank, fp8_block
    replicated = 61 * 7168 * (1536 + 512 + 64) * (1 + 4 / (128 * 128))
    assert spec.replicated_weight_bytes(dsv3) == pytest.approx(replicated, rel=1e-12)
    assert replicated / 2**30 == pytest.approx(0.86, abs=0.01)  # ~0.75 GiB more per GPU at TP8 than an even split
    tp8 = instance_kv_capacity_tokens(dsv3, b200, Parallel(8), 0.9)
    assert tp8 == spec.kv_capacity_tokens(dsv3, b200, 8, 0.9) == int(
        (per_gpu - (total - replicated) / 8 - replicated) // kv_token)
    assert weight_bytes_per_gpu(dsv3, Parallel(8, 1, 8)) == pytest.approx(
        (total - experts - replicated) / 8 + replicated + experts / 8, rel=1e-12)
    dense = catalog.load_model("qwen3_32b")
    assert spec.replicated_weight_bytes(dense) == 0.0  # no MLA: everything splits evenly


# -- layer kinds: measured sliding and linear attention, sparse refused ------------------------
def test_gpt_oss_sliding_layers(sglang: PerfConfig, b200: HardwareConfig) -> None:
    model = catalog.load_model("gpt_oss_120b")
    m = build_measured(sglang, model, b200, Parallel(1))
    assert (model.num_layers, model.num_sliding_layers, model.sliding_window_tokens) == (36, 18, 128)
    decode = 18 * m._decode_attention_s(4, 4000) + 18 * m._decode_attention_s(4, 4 * 128)
    assert m._attention_layers_s((), 4, 4000) == pytest.approx(decode, rel=1e-12)
    short = 18 * m._decode_attention_s(4, 400) * 2  # under the window: both kinds see it all
    assert m._attention_layers_s((), 4, 400) == pytest.approx(short, rel=1e-12)
    prompt = ((1000, 0),)
    full = m._prefill_attention_s(prompt)
    sliding = full * (128 * 129 / 2 + 872 * 128) / (1000 * 1001 / 2)
    assert m._attention_layers_s(prompt, 0, 0) == pytest.approx(18 * full + 18 * sliding, rel=1e-12)


def test_qwen35_linear_attention_roofline(b200: HardwareConfig) -> None:
    model = catalog.load_model("qwen35_397b_a17b")
    # tp 4: 16 value heads and 4 key heads of 128; conv state 3 x (2*4*128 + 16*128) bf16,
    # recurrent 16 x 128 x 128 fp32, per layer
    state = 3 * (2 * 4 * 128 + 16 * 128) * 2 + 16 * 128 * 128 * 4
    assert spec.state_bytes_per_request_per_rank(model, 4) == 45 * state
    flops = 4 * 16 * 6 * 128 * 128  # 4 decode tokens, no chunked-prefill term
    expected = max(flops / (2250e12 * 0.5), 2 * 4 * state / (8000e9 * 0.7))
    assert linear_attention_layer_s(model, b200, 4, (), 4, 0.5, 0.7) == pytest.approx(expected, rel=1e-12)


def test_sparse_attention_refused(sglang: PerfConfig, b200: HardwareConfig) -> None:
    with pytest.raises(ValueError, match="uses sparse attention"):
        build_latency_model(sglang, catalog.load_model("glm5"), b200, 8)


# -- config and perf-kind errors ---------------------------------------------------------------
COLOCATED = ["cluster.mode=colocated", "cluster.colocated=1"]


@pytest.mark.parametrize(("overrides", "needle"), [
    (["model=deepseek_v3", "cluster.colocated_dp=8", "cluster.colocated_moe_ep=3"],
     "cluster: field 'colocated_moe_ep' = 3 does not divide the instance's 8 GPUs (tp 1 x dp 8)"),
    (["model=llama3_8b", "cluster.colocated_tp=2", "cluster.colocated_moe_ep=2"],
     "cluster: field 'colocated_moe_ep' = 2 needs an MoE model; llama3_8b is dense"),
    (["model=deepseek_v3", "cluster.colocated_dp=0"], "cluster: field 'colocated_dp' = 0 must be >= 1"),
])
def test_parallel_config_errors(overrides: list[str], needle: str) -> None:
    message = check_overrides(COLOCATED + overrides)
    assert message is not None and "\n" not in message and needle in message


def test_roofline_refuses_dp(dsv3: ModelConfig, b200: HardwareConfig) -> None:
    with pytest.raises(ValueError, match="models tensor parallelism only"):
        build_latency_model(catalog.load_perf("roofline"), dsv3, b200, Parallel(1, 2))


def test_parallel_layout_text() -> None:
    layout = Parallel(1, 8, 8)
    assert (layout.gpus, layout.moe_tp, layout.plain_tp, layout.text) == (8, 1, False, "TP1xDP8/EP8")
    assert (Parallel(4, 2).text, Parallel(8).plain_tp) == ("TP4xDP2", True)


# -- one end-to-end run ------------------------------------------------------------------------
def test_dp8_ep8_colocated_run(dsv3: ModelConfig, b200: HardwareConfig) -> None:
    from pdsim.run import run_simulation

    cfg = compose_config([
        "model=deepseek_v3", "hardware=b200", "perf=measured", "perf.engine_version=0.5.14",
        "model.gemm_quant=fp8_block", "model.moe_quant=fp8_block", *COLOCATED, "cluster.colocated_tp=1",
        "cluster.colocated_dp=8", "cluster.colocated_moe_ep=8", "scenario=bench_random",
        "scenario.num_requests=16", "scenario.concurrency=8", "scenario.input.value=256",
        "scenario.output.value=8", "progress=false",
    ])
    out = run_simulation(cfg)  # simulate() checks the end-of-run invariants (no page leaked)
    assert len(out.trace) == 16 and (out.trace["status"] == "finished").all()
    assert (out.trace["output_tokens"] == 8).all()
    [stats] = out.summary["instances"].values()
    tokens = instance_kv_capacity_tokens(dsv3, b200, Parallel(1, 8, 8), 0.9)
    assert stats["kv_capacity_tokens"] == tokens // 16 * 16  # whole pages of 16 tokens
    assert out.summary["gpus"] == 8  # tp 1 x dp 8 (pdsim.search.rows.gpus_of)


def test_dp8_compiled_decode_step_is_the_same_float(dp8: DataParallelModel) -> None:
    """decode_step's TableStep (the simulator's hot path) gives decode_time_s bit for bit, and
    the busiest of 8 ranks holds ceil(n / 8) sequences."""
    for n in (1, 7, 8, 9, 64, 300):
        step = dp8.decode_step(n)
        for ctx in (n, n * 100, n * 1000 + 7, n * 40_000):
            assert step.time_s(ctx) == dp8.decode_time_s(n, ctx), (n, ctx)
    # 9 and 16 sequences: the busiest rank holds 2 either way; only the MoE layers differ
    assert dp8.decode_time_s(9, 9000) == pytest.approx(dp8.decode_time_s(16, 16_000) - (
        dp8.rank.moe_experts_s(16) - dp8.rank.moe_experts_s(9)) - 58 * (
        dp8._moe_exchange_s(16) - dp8._moe_exchange_s(9)), rel=1e-12)


def test_quant_gemm_never_above_bf16() -> None:
    """vLLM 0.24's fp8_block GEMM table on B200 reads ~0.18 ms at m=8 for 4096 x 4096 (about
    19x its bf16 table): the model takes the bf16 time there, and the fp8_block time where it
    is the faster one (m=4096 is not: 0.18 > 0.09 either)."""
    perf = dataclasses.replace(catalog.load_perf("measured_vllm"), engine_version="0.24.0")
    model = dataclasses.replace(catalog.load_model("llama3_8b"), gemm_quant="fp8_block")
    lat = build_measured(perf, model, catalog.load_hardware("b200"), Parallel(1))
    gemm = pd.read_csv(AIC_DIR / "b200_sxm_vllm_0.24.0" / "gemm.csv.gz")
    block = pd.read_csv(AIC_DIR / "b200_sxm_vllm_0.24.0" / "gemm_fp8_block.csv.gz")

    def at(df: pd.DataFrame, m: int) -> float:
        row = df[(df.m == m) & (df.n == 4096) & (df.k == 4096)]
        return float(row[row.columns[-1]].item())

    assert at(block, 8) > 10 * at(gemm, 8)
    assert lat.gemm_s(8, 4096, 4096) == pytest.approx(at(gemm, 8) / 1e3, rel=1e-9)
