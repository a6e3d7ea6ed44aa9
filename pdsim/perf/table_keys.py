"""Which measured tables a model reads: the keys its precision and MoE shape select.

GEMMs use the table of the model's `gemm_quant` where one exists (TABLE_QUANTS), never above the
same set's bf16 table; int4 weight-only has none and scales bf16 by the roofline ratio of its
weight bytes. The routed experts read the fused-MoE table at (moe dtype, shape, MoE TP x EP);
an fp8 KV cache reads the fp8 generation table (MLA keeps its own). measured.py, deepep.py,
benchmarks/silicon_rows.py and benchmarks/perf_table.py share these choices (docs/PRECISION.md).
"""

from __future__ import annotations

from collections.abc import Callable

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.perf import spec
from pdsim.perf.loggrid import LogGrid
from pdsim.perf.optables import MoeShape, OpTables, load_quant_gemm

TABLE_QUANTS = ("fp8", "fp8_block", "nvfp4")  # GEMM quant modes with their own tables


def moe_grid_for(tables: OpTables, dtype: str, shape: MoeShape, moe_tp: int, moe_ep: int,
                 distribution: str = "balanced") -> LogGrid | None:
    """The fused-MoE grid of this split, else of another split of the same GPUs (all-EP first,
    then all-TP): balanced routing moves the same expert FLOPs and bytes per GPU either way, and
    some sets measured only one of them (TRT-LLM's MXFP4 experts: EP only). None if no split of
    that GPU count was measured."""
    if not len(tables.moe):
        return None
    gpus = moe_tp * moe_ep
    for tp, ep in ((moe_tp, moe_ep), (1, gpus), (gpus, 1)):
        grid = tables.moe_grid(dtype, shape, tp, ep, distribution)
        if grid is not None:
            return grid
    return None


def moe_shape(model: ModelConfig) -> MoeShape:
    """The fused-MoE tables' key of a model's routed experts: (hidden, expert width, top-k, experts)."""
    return (model.hidden_size, model.moe_ffn_size or model.ffn_size, model.num_active_experts, model.num_experts)


def moe_table_dtype(model: ModelConfig) -> str:
    """The fused-MoE table's moe_dtype for the routed experts: model.moe_quant, else gemm_quant,
    else the checkpoint's (an fp8 checkpoint is block-scaled fp8, DeepSeek-V3's)."""
    quant = model.moe_quant or model.gemm_quant
    if quant in ("", "bf16"):
        return "fp8_block" if model.dtype == "fp8" and not quant else "bfloat16"
    if quant == "fp8" and model.dtype == "fp8":  # an fp8 checkpoint's own scaling is per block
        return "fp8_block"
    return quant


def kv_cache_dtype(model: ModelConfig) -> str:
    return model.kv_dtype or model.dtype


def needed_tables(model: ModelConfig) -> tuple[str, ...]:
    """Table files beyond the bf16 ones a model's precision needs (resolve_set's `needs`)."""
    needs = [f"gemm_{model.gemm_quant}"] if model.gemm_quant in TABLE_QUANTS else []
    if kv_cache_dtype(model) == "fp8" and not spec.is_mla(model):
        needs.append("generation_attention_fp8")
    return tuple(needs)


def gemm_table(tables: OpTables, model: ModelConfig) -> Callable[[float, float, float], float]:
    """The GEMM time (ms) of the model's quant mode: its table, never above the same set's bf16
    table at the same shape. A quantized GEMM reads fewer weight bytes at no fewer FLOP/s, so a
    table point above bf16 is a kernel the engine does not serve with (vLLM 0.24's fp8_block
    GEMMs on Blackwell read ~0.18 ms at every m for 4096 x 4096, 15-20x bf16, while its fp8
    checkpoints serve within 10% of nvfp4's TPOT; docs/MOE.md)."""
    if model.gemm_quant not in TABLE_QUANTS:
        return tables.gemm
    quant, bf16 = load_quant_gemm(tables.source, model.gemm_quant), tables.gemm
    return lambda m, n, k: min(quant(m, n, k), bf16(m, n, k))


def weight_only_ratio(model: ModelConfig, hw: HardwareConfig):  # noqa: ANN202 - a closure or None
    """int4 weight-only has no table: the bf16 GEMM scaled by the roofline ratio of reading
    int4 instead of bf16 weights (same bf16 math)."""
    if model.gemm_quant != "int4_wo":
        return None
    wbytes = spec.QUANT_WEIGHT_BYTES["int4_wo"]

    def ratio(m: float, n: float, k: float) -> float:
        compute = 2 * m * n * k / (hw.bf16_tflops * 1e12)
        def t(weight: float) -> float:
            return max(compute, (2 * (m * k + m * n) + weight * k * n) / (hw.hbm_gbps * 1e9))
        return t(wbytes) / t(2.0)
    return ratio
