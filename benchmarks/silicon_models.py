"""What a silicon row runs on: its catalog model, precision and operator table set, and every
feature of it pdsim lacks (model, hardware, engine, quant mode, an MoE table for its split).

- ENGINES (silicon_engines.py): the row's `backend` -> a perf preset (scenarios/perf/<name>.yaml)
  and the operator table sets it needs (pdsim/perf/data/aic/<system>_<engine>_<version>, found at
  run time); SUPPORTED_QUANT: the GEMM / MoE quant modes the measured perf model has tables for.

Every gap is collected (not only the first), so `reason` lists all that a row would need.
"""

from __future__ import annotations

from functools import cache

from silicon_engines import ENGINES, SUPPORTED_MOE_QUANT, SUPPORTED_QUANT
from silicon_parse import MODELS, SYSTEMS, Catalog, Side, SiliconRow
from silicon_recipes import recipe_kv_dtype

MXFP4_MODES = ("w4a16_mxfp4", "w4a8_mxfp4_mxfp8")

ISSUE_PRECISION = "issue 39"


def model_gaps(row: SiliconRow, cat: Catalog) -> tuple[str | None, list[str]]:
    """(the row's catalog model or None, what pdsim lacks of it: sparse attention, quant modes)."""
    name = MODELS.get(row.model_path)
    if name is None or name not in cat.models:
        return None, [f"model {row.model_path} not in catalog"]
    dtype, moe = cat.models[name]
    gaps = []
    topk = _checkpoint_sparse_topk(name)
    if topk:
        gaps.append(f"sparse attention (DSA, index top-k {topk}) of {name} not modelled")
    quant = {"gemm_quant_mode": row.gemm_quant}
    if moe:
        quant["moe_quant_mode"] = row.moe_quant
    for field_name, mode in quant.items():
        if mode not in (SUPPORTED_MOE_QUANT if field_name == "moe_quant_mode" else SUPPORTED_QUANT):
            gaps.append(f"{field_name} {mode} not modelled ({ISSUE_PRECISION})")
    if not row.gemm_quant and row.precision not in SUPPORTED_QUANT:
        gaps.append(f"precision {row.precision} not modelled ({ISSUE_PRECISION})")
    if not row.gemm_quant and not row.precision and dtype != "bf16":
        gaps.append(f"checkpoint dtype {dtype} of {name} not modelled ({ISSUE_PRECISION})")
    return name, gaps


def engine_gaps(row: SiliconRow, cat: Catalog) -> tuple[str | None, str, list[str]]:
    """(catalog hardware, perf preset, gaps)."""
    hardware = SYSTEMS.get(row.system)
    gaps = [] if hardware in cat.hardware else [f"hardware {row.system} not in catalog ({ISSUE_PRECISION})"]
    if row.backend not in ENGINES:
        return hardware, "", [*gaps, f"backend {row.backend} not modelled (no operator tables, {ISSUE_PRECISION})"]
    engine = ENGINES[row.backend]
    if hardware in cat.hardware and not table_set_for(row, cat, hardware or ""):
        gaps.append(f"no {engine.tables} operator tables for {row.system} with {row.gemm_quant or 'bf16'} "
                    f"GEMMs ({ISSUE_PRECISION})")
    return hardware, engine.preset, gaps


def precision_of(row: SiliconRow) -> tuple[str, str]:
    """(model.gemm_quant, model.kv_dtype) of a row: its GEMM quant mode (an "fp8" row of a
    block-scaled fp8 checkpoint runs its own block scaling), and the KV dtype its engine
    defaults to for that mode (silicon_engines.Engine.quantized_kv_dtype), or a disaggregated row's recipe sets
    (silicon_recipes.recipe_kv_dtype)."""
    quant = row.gemm_quant if row.gemm_quant not in ("", "bf16") else ""
    if quant == "fp8" and _block_fp8_checkpoint(MODELS.get(row.model_path, "")):
        quant = "fp8_block"
    engine = ENGINES.get(row.backend)
    kv = engine.quantized_kv_dtype if quant and engine else "bf16"
    if row.mode == "disagg":
        kv = recipe_kv_dtype(row.backend, row.system) or kv
    return quant, kv


BLACKWELL = ("b200_sxm", "b300_sxm", "gb200", "gb300")


def moe_quant_of(row: SiliconRow) -> str:
    """model.moe_quant of a row: its MoE quant mode ("" = as the GEMMs). A checkpoint whose
    experts ship in MXFP4 (gpt-oss) runs them so whatever fp4/fp8 label the row carries (with
    MXFP8 activations under TRT-LLM on Blackwell, its default there, else 16-bit ones); an
    "fp8" row of a block-scaled fp8 checkpoint runs block scaling."""
    name = MODELS.get(row.model_path, "")
    own = _checkpoint(name)[2] if name else ""
    if own in MXFP4_MODES:  # TRT-LLM on Blackwell runs MXFP4 experts with MXFP8 activations
        return "w4a8_mxfp4_mxfp8" if row.backend == "trtllm" and row.system in BLACKWELL else own
    if row.moe_quant == "fp8" and _block_fp8_checkpoint(name):
        return "fp8_block"
    return row.moe_quant if row.moe_quant not in ("", "bf16") else ""


@cache
def _catalog_model(model: str):  # noqa: ANN202 - a ModelConfig (pdsim imported lazily)
    from pdsim.perf import catalog

    return catalog.load_model(model)


def _checkpoint(model: str) -> tuple[str, str, str]:
    """(dtype, gemm_quant, moe_quant) of a catalog model as its checkpoint ships."""
    m = _catalog_model(model)
    return m.dtype, m.gemm_quant, m.moe_quant


def _checkpoint_sparse_topk(model: str) -> int:
    return int(_catalog_model(model).sparse_attention_topk)


def _block_fp8_checkpoint(model: str) -> bool:
    if not model:
        return False
    dtype, gemm, _ = _checkpoint(model)
    return dtype == "fp8" or gemm == "fp8_block"


def table_set_for(row: SiliconRow, cat: Catalog, hardware: str) -> str:
    """The operator-table set the row runs on ("" = none has the tables its precision needs)."""
    model = MODELS.get(row.model_path, "")
    return _resolve(row.backend, model if model in cat.models else "", *precision_of(row),
                    cat.hardware_tables.get(hardware, ""))


@cache
def _resolve(backend: str, model: str, quant: str, kv: str, system: str) -> str:
    import dataclasses

    from pdsim.perf.optables import resolve_set
    from pdsim.perf.table_keys import needed_tables

    engine = ENGINES[backend]
    spec_model = _catalog_model(model) if model else None
    needs = needed_tables(dataclasses.replace(spec_model, gemm_quant=quant, kv_dtype=kv)) if spec_model else ()
    if spec_model is not None and spec_model.num_experts:
        needs = (*needs, "nccl")  # MoE models: the sets with the MoE-at-scale tables (issue 40)
    try:
        return resolve_set(system, engine.tables, engine.tables_version, needs)
    except ValueError:
        return ""


def moe_kernel_overrides(row: SiliconRow, model: str, table_set: str, dtype: str) -> list[str]:
    """model.moe_quant=`dtype` (the MoE kernel a script selects) and, where the row's own table
    set never measured it at the row's expert shape and MoE split, perf.moe_table_set: the first
    set of the same GPU that did (the kernel is FlashInfer's in every engine); [] where none did."""
    from pdsim.perf.optables import sets_of_system, system_of_set
    from pdsim.perf.table_keys import moe_shape

    shape = moe_shape(_catalog_model(model))
    if not _sides_without_moe(row, table_set, dtype, shape):
        return [f"model.moe_quant={dtype}"]
    found = [name for name in sets_of_system(system_of_set(table_set))
             if not _sides_without_moe(row, name, dtype, shape)]
    return [f"model.moe_quant={dtype}", f"perf.moe_table_set={found[0]}"] if found else []


def moe_gaps(row: SiliconRow, model: str, table_set: str) -> list[str]:
    """A fused-MoE table of the row's expert shape, quant mode, MoE TP and EP for each side."""
    import dataclasses

    from pdsim.perf.table_keys import moe_shape, moe_table_dtype

    m = dataclasses.replace(_catalog_model(model), gemm_quant=precision_of(row)[0], moe_quant=moe_quant_of(row))
    shape, dtype = moe_shape(m), moe_table_dtype(m)
    return [f"no {dtype} fused-MoE table for {model} at MoE TP {side.moe_tp} x EP {side.moe_ep} in {table_set}"
            for side in _sides_without_moe(row, table_set, dtype, shape)]


def _sides_without_moe(row: SiliconRow, table_set: str, dtype: str, shape: tuple[int, int, int, int]) -> list[Side]:
    """The row's sides (aggregated, or prefill and decode) whose MoE TP x EP split `table_set` has
    no `dtype` fused-MoE grid for at expert `shape` (table_keys.moe_grid_for's fallbacks included)."""
    from pdsim.perf.optables import load_tables
    from pdsim.perf.table_keys import moe_grid_for

    tables = load_tables(table_set)
    return [side for side in (row.agg, row.prefill, row.decode)
            if side is not None and moe_grid_for(tables, dtype, shape, side.moe_tp, side.moe_ep) is None]


def version_note(row: SiliconRow, cat: Catalog, hardware: str) -> str:
    """Which operator tables stand in for the row's engine version."""
    used = table_set_for(row, cat, hardware)
    return f"{row.backend} {row.backend_version or '(unstated)'} row on {used} tables"
