"""MoE, MLA and NCCL tables of the quantized sets (extract_moe.py) through optables' loaders."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from pdsim.perf.optables import (
    AIC_DIR,
    COLLECTIVES,
    _set_version,
    load_mla,
    load_mla_bmm,
    load_tables,
    resolve_set,
    table_sets,
)

SET = "h200_sxm_sglang_0.5.14"
DEEPSEEK = (7168, 2048, 8, 256)  # hidden, expert inter, top-k, routed experts
NEW_SETS = [s for s in table_sets() if not s.endswith(("_0.5.10", "_0.14.0"))]


def _moe_rows(name: str, **where: object) -> pd.DataFrame:
    df = pd.read_csv(AIC_DIR / name / "moe.csv.gz")
    for column, value in where.items():
        df = df[df[column] == value]
    return df.set_index("num_tokens").latency_ms


def test_moe_grid_returns_the_shipped_rows_at_grid_points():
    grid = load_tables(SET).moe_grid("fp8_block", DEEPSEEK, 1)
    rows = _moe_rows(SET, moe_dtype="fp8_block", hidden_size=7168, num_experts=256, moe_tp_size=1,
                     moe_ep_size=1, distribution="balanced")
    assert rows[64] == 1.399  # the file itself (AIConfigurator 0.12.0, H200, SGLang 0.5.14)
    for tokens in (1, 64, 4096):
        assert grid(tokens) == pytest.approx(rows[tokens], rel=1e-12)
    between, u = grid(96), math.log(96 / 64) / math.log(2)  # log-log between 64 and 128
    assert rows[64] < between < rows[128]
    assert math.log(between) == pytest.approx(
        math.log(rows[64]) + u * (math.log(rows[128]) - math.log(rows[64])), rel=1e-12)


def test_moe_grid_keys_on_ep_and_routing_and_none_for_an_absent_shape():
    tables = load_tables(SET)
    ep1, ep4 = tables.moe_grid("fp8_block", DEEPSEEK, 1), tables.moe_grid("fp8_block", DEEPSEEK, 1, 4)
    skewed = tables.moe_grid("fp8_block", DEEPSEEK, 1, 4, "power_law_1.01")
    rows = _moe_rows(SET, moe_dtype="fp8_block", hidden_size=7168, num_experts=256, moe_tp_size=1,
                     moe_ep_size=4, distribution="power_law_1.01")
    assert ep1 is not None and ep4 is not None and skewed is not None
    assert ep4(4096) != ep1(4096) and skewed(4096) != ep4(4096)
    assert skewed(4096) == pytest.approx(rows[4096], rel=1e-12)
    assert tables.moe_grid("fp8_block", (7168, 2048, 8, 999), 1) is None  # no such shape
    assert tables.moe_grid("nvfp4", DEEPSEEK, 1) is None  # Hopper: no nvfp4 MoE rows
    assert tables.moe_grid("fp8_block", DEEPSEEK, 1, 4, "uniform") is None


def test_old_sets_load_unchanged_as_ep1_balanced():
    old = load_tables("h100_sxm_sglang_0.5.10")
    rows = pd.read_csv(AIC_DIR / "h100_sxm_sglang_0.5.10" / "moe.csv")
    row = rows[(rows.moe_dtype == "bfloat16") & (rows.hidden_size == 2048) & (rows.moe_tp_size == 2)]
    grid = old.moe_grid("bfloat16", (2048, 768, 8, 128), 2)
    assert grid is not None and grid(1) == pytest.approx(row[row.num_tokens == 1].latency_ms.item(), rel=1e-12)
    assert old.moe_grid("bfloat16", (2048, 768, 8, 128), 2, 1, "balanced") is grid
    assert old.moe_grid("bfloat16", (2048, 768, 8, 128), 2, 2) is None
    assert old.collective("all_reduce") == {}


@pytest.mark.parametrize("name", NEW_SETS)
def test_every_new_set_has_moe_nccl_and_mla(name):
    tables = load_tables(name)
    assert len(tables.moe) and set(tables.moe.distribution) == {"balanced", "power_law_1.01"}
    assert sorted(tables.collective("all_reduce")) in ([2, 4, 8], [2, 4])  # GB200/GB300: 2 and 4
    if "_vllm_" in name:  # vLLM: whole-module MLA tables only
        assert tables.mla_context is None
        assert load_mla(name, "generation", "fp8", "fp8_block")(16, 1, 32, 4096) > 0
    else:
        assert tables.mla_context is not None and tables.mla_generation is not None
        assert load_mla(name, "generation", "fp8")(16, 1, 32, 4096) > 0
    assert load_mla_bmm(name, "mla_gen_pre")(64, 16) > 0


def test_collectives_grow_with_message_size_where_bandwidth_bound():
    for name in NEW_SETS:
        tables = load_tables(name)
        for op in COLLECTIVES:
            for gpus, grid in tables.collective(op).items():
                sizes = [2.0**k for k in range(20, 31)]  # 1 MiB .. 1 GiB
                times = [grid(s) for s in sizes]
                assert times == sorted(times), (name, op, gpus)
                assert times[-1] > 20 * grid(512), (name, op, gpus)
    nccl = pd.read_csv(AIC_DIR / SET / "nccl.csv.gz")
    row = nccl[(nccl.op == "alltoall") & (nccl.num_gpus == 8) & (nccl.message_bytes == 2**24)]
    assert load_tables(SET).collective("alltoall")[8](2**24) == pytest.approx(row.latency_ms.item(), rel=1e-12)
    with pytest.raises(ValueError, match="'broadcast'"):
        load_tables(SET).collective("broadcast")


def test_mla_fp8_kv_table_differs_and_matches_its_file():
    bf16, fp8 = load_tables(SET).mla_generation, load_mla(SET, "generation", "fp8")
    rows = pd.read_csv(AIC_DIR / SET / "mla_generation_fp8.csv.gz")
    row = rows[(rows.num_heads == 16) & (rows.batch_size == 64) & (rows.step == 4095)].latency_ms.item()
    assert fp8(16, 1, 64, 4095) == pytest.approx(row, rel=1e-9)
    assert bf16 is not None and bf16(16, 1, 64, 4095) != fp8(16, 1, 64, 4095)
    with pytest.raises(ValueError, match="no mla_context_module"):
        load_mla(SET, "context", gemm_type="bfloat16")
    with pytest.raises(ValueError, match="'decode'"):
        load_mla(SET, "decode")


def test_resolve_set_can_require_the_new_tables():
    assert resolve_set("b300_sxm", "sglang", "", ("moe", "mla_context", "nccl")) == "b300_sxm_sglang_0.5.14"
    assert resolve_set("h100_sxm", "vllm", "", ("mla_context_module",)) == "h100_sxm_vllm_0.24.0"
    assert resolve_set("h100_sxm", "sglang", "", ("nccl",)) == "h100_sxm_sglang_0.5.14"


def test_table_set_versions_order_as_pep_440():
    """The newest qualifying set is picked by PEP 440, as release_before compares: a release
    candidate comes before its release, and numbers compare as numbers."""
    def key(name: str):
        return _set_version(name, len("b200_sxm_trtllm_"))

    assert key("b200_sxm_trtllm_1.3.0rc20") < key("b200_sxm_trtllm_1.3.0") < key("b200_sxm_trtllm_1.3.1rc1")
    assert max(["b200_sxm_trtllm_0.14.0", "b200_sxm_trtllm_0.9.0"], key=key) == "b200_sxm_trtllm_0.14.0"
    with pytest.raises(ValueError, match="table set 'b200_sxm_trtllm_nightly-x' .* no PEP 440 version"):
        key("b200_sxm_trtllm_nightly-x")
