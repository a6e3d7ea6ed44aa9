"""A measured silicon row (silicon_dev.csv's columns) -> the pdsim run it describes, or why none.

The mapping is a set of small tables, one per axis, so that the precision issue (39: quant
modes, Blackwell/NVL72 hardware, TRT-LLM tables) and the MoE issue (40: expert parallelism,
attention DP) extend it by adding entries or by dropping a check, not by rewriting it:

- MODELS: the row's `model_path` -> a catalog model (scenarios/model/<name>.yaml);
- SYSTEMS: the row's `system` -> a catalog hardware entry (scenarios/hardware/<name>.yaml);
- ENGINES: the row's `backend` -> a perf preset (scenarios/perf/<name>.yaml) and the operator
  table sets it needs (pdsim/perf/data/aic/<system>_<engine>_<version>, found at run time);
- SUPPORTED_QUANT: the GEMM / MoE quant modes the measured perf model has tables for
  (silicon_engines.py, with the engine constants);
- parallelism: TP, attention DP and MoE EP per side; PP is not modelled.

Every gap is collected (not only the first), so `reason` lists all that a row would need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import cache

from silicon_engines import (
    ENGINES,
    PREFILL_GRAPH_HOST_MS_PER_MOE_LAYER,
    PREFILL_GRAPH_MAX_TOKENS,
    PREFILL_HOST_MODE,
    PREFILL_HOST_MS_PER_MOE_LAYER,
    SUPPORTED_MOE_QUANT,
    SUPPORTED_QUANT,
    moe_fallback_overrides,
    moe_routing,
    step_overhead_s,
)
from silicon_harness import (
    adp_balance_overrides,
    deployment_for,
    harness_of,
    inferencex_layout,
    inferencex_workload,
    measured_date,
    mtp_draft_tokens,
    mtp_overrides,
    tokenizer_overrides,
)
from silicon_recipes import (
    TRTLLM_GEN_MOE_SETS,
    moe_a2a,
    prefill_overrides,
    reads_trtllm_gen_table,
    recipe_kv_dtype,
    trtllm_generation_batch,
    trtllm_moe_table_overrides,
)

from pdsim.policy.dp_dispatch import BOOTSTRAP_ROOM

# model_path -> catalog model. Instruct / quantized checkpoints share their base model's
# architecture (config.json); their quantization comes from the row's quant modes.
MODELS: dict[str, str] = {
    "Qwen/Qwen3-32B": "qwen3_32b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3_32b",
    "meta-llama/Llama-3.1-70B": "llama3_70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3_8b",
    "deepseek-ai/DeepSeek-V3": "deepseek_v3",
    "deepseek-ai/DeepSeek-R1": "deepseek_v3",  # same architecture as V3 (config.json)
    "nvidia/DeepSeek-R1-NVFP4": "deepseek_v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek_v3",
    "openai/gpt-oss-120b": "gpt_oss_120b",
    "moonshotai/Kimi-K2.5": "kimi_k25",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3_235b_a22b",
    "MiniMaxAI/MiniMax-M2.5": "minimax_m25",
    "zhipuai/GLM-5": "glm5",
    "Qwen/Qwen3.5-397B-A17B": "qwen35_397b_a17b",
}
# silicon system -> catalog hardware (the operator tables of that GPU: hardware.op_tables)
SYSTEMS: dict[str, str] = {"h100_sxm": "h100", "b200_sxm": "b200", "h200_sxm": "h200", "b300_sxm": "b300",
                           "gb200": "gb200", "gb300": "gb300"}


ISSUE_PRECISION = "issue 39"


@dataclass(frozen=True)
class Side:
    """One engine shape: tensor parallel size and the parallelism pdsim does not model yet."""

    tp: int
    pp: int = 1
    attention_dp: int = 1
    moe_tp: int = 1
    moe_ep: int = 1
    workers: int = 1


@dataclass(frozen=True)
class SiliconRow:
    """The fields of one measured row that decide its pdsim run (and the measured latencies)."""

    id: str
    model_path: str
    system: str
    backend: str
    backend_version: str
    mode: str  # agg | disagg
    isl_tokens: int
    osl_tokens: int
    concurrency: int  # closed-loop clients (0 = the row does not say)
    precision: str
    gemm_quant: str
    moe_quant: str
    agg: Side | None
    prefill: Side | None
    decode: Side | None
    measured_ttft_ms: float
    measured_tpot_ms: float
    harness: str = "aiperf"  # the benchmark client that measured it: HARNESSES
    measured: str = ""  # measurement date (YYYY-MM-DD) from silicon_data_source, "" where none
    mtp_draft_tokens: int = 0  # speculative decoding the run used, where its image says (MTP_IMAGES)


@dataclass(frozen=True)
class RowPlan:
    """The pdsim run of a row: hydra overrides over config.yaml, or the features it lacks."""

    row: SiliconRow
    overrides: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    note: str = ""  # e.g. which table version stands in for the row's engine version

    @property
    def supported(self) -> bool:
        return not self.missing


@dataclass
class Catalog:
    """What pdsim has: catalog models (with their dtype and MoE-ness) and operator table sets."""

    models: dict[str, tuple[str, bool]]  # name -> (dtype, is_moe)
    hardware: set[str]
    table_sets: list[str]  # "<system>_<engine>_<version>"
    hardware_tables: dict[str, str] = field(default_factory=dict)  # hardware -> op_tables system


def _int(value: str) -> int:
    return int(float(value)) if value.strip() else 0


def _side(raw: dict[str, str], prefix: str) -> Side | None:
    tp = _int(raw.get(f"{prefix}tp_size", ""))
    if tp <= 0:
        return None
    get = lambda name: _int(raw.get(f"{prefix}{name}", "")) or 1  # noqa: E731
    workers = _int(raw.get(f"{prefix}num_workers", "")) if prefix else 1
    return Side(tp, get("pp_size"), get("attention_dp_size"), get("moe_tp_size"), get("moe_ep_size"), workers)


def _agg_side(raw: dict[str, str]) -> Side | None:
    """An aggregated row's engine; an InferenceX row's as its launch script ran it (inferencex_layout)."""
    side = _side(raw, "") if raw["mode"] == "agg" else None
    if side is None or harness_of(raw.get("silicon_data_source", "")) != "inferencex":
        return side
    tp, dp, moe_tp, moe_ep = inferencex_layout(raw["backend"], side.tp, side.attention_dp, side.moe_tp, side.moe_ep)
    return replace(side, tp=tp, attention_dp=dp, moe_tp=moe_tp, moe_ep=moe_ep)


def concurrency_of(raw: dict[str, str]) -> int:
    """Client concurrency: `silicon_concurrency=` in silicon_data_source, else batch_size (agg)."""
    found = re.search(r"silicon_concurrency=(\d+)", raw.get("silicon_data_source", ""))
    if found:
        return int(found.group(1))
    return _int(raw.get("batch_size", "")) if raw.get("mode") == "agg" else 0


def parse_row(raw: dict[str, str]) -> SiliconRow:
    """One CSV row (silicon_dev.csv's header) as a SiliconRow; ValueError names the bad field."""
    try:
        agg, source = _agg_side(raw), raw.get("silicon_data_source", "")
        return SiliconRow(
            id=raw["id"], model_path=raw["model_path"], system=raw["system"], backend=raw["backend"],
            backend_version=raw.get("backend_version", ""), mode=raw["mode"],
            isl_tokens=_int(raw["isl"]), osl_tokens=_int(raw["osl"]), concurrency=concurrency_of(raw),
            precision=raw.get("precision", ""), gemm_quant=raw.get("gemm_quant_mode", ""),
            moe_quant=raw.get("moe_quant_mode", ""),
            agg=agg,
            prefill=_side(raw, "prefill_"), decode=_side(raw, "decode_"),
            measured_ttft_ms=float(raw.get("silicon_ttft_ms") or "nan"),
            measured_tpot_ms=float(raw.get("silicon_tpot_ms") or "nan"),
            harness=harness_of(source),
            measured=measured_date(source),
            mtp_draft_tokens=mtp_draft_tokens(raw["backend"], raw["model_path"], source,
                                              agg.attention_dp if agg is not None else 1),
        )
    except KeyError as exc:
        raise ValueError(f"row {raw.get('id', '?')}: missing column {exc.args[0]}") from None
    except ValueError as exc:
        raise ValueError(f"row {raw.get('id', '?')}: {exc}") from None


# AIConfigurator's aiperf template: 2 C warm-up requests, then 20 C profiled
MIN_REQUESTS, WARMUP_PER_CLIENT, PROFILED_PER_CLIENT = 60, 2, 20
# AIPerf's synthetic dataset: 100 prompts (--num-dataset-entries), drawn in shuffled passes by
# one sampler over warm-up and profiling, so a run of more than 100 requests repeats prompts
AIPERF_PROMPTS = 100
# whether the engine serves a repeated prompt from its prefix cache as AIConfigurator's templates
# deploy it: vLLM (prefix caching on by default since V1) and SGLang (radix cache) unless the
# template disables them, which it does not by default; TRT-LLM's template writes
# `enable_block_reuse: false` unless asked (extra_engine_args.*.yaml.j2)
PREFIX_CACHE = {"vllm": True, "sglang": True, "trtllm": False}
CACHE_BLOCK_TOKENS = 16  # the engines' KV page (vLLM block-size 16; a repeat hits all but its last block)
SCENARIO = "bench_random"


def load_catalog() -> Catalog:
    """pdsim's catalog models, hardware and operator table sets, read from this checkout."""
    from pdsim.perf import catalog, spec
    from pdsim.perf.optables import table_sets

    models = {}
    for name in catalog.catalog_names("model"):
        m = catalog.load_model(name)
        models[name] = (m.dtype, spec.is_moe(m))
    hardware = set(catalog.catalog_names("hardware"))
    tables = {name: catalog.load_hardware(name).op_tables for name in hardware}
    return Catalog(models, hardware, table_sets(), tables)


# How the replay runs each row's benchmark client: "harness" (default) as the row's own harness
# did (harness_of: AIPerf's phases or InferenceX's bench_serving run), "aiperf" AIPerf's phases
# for every row, "steady" one continuous loop and its steady-state window (silicon_harness.py).
PHASES = ("harness", "aiperf", "steady")
# Where a TRT-LLM row's fp8 block-scale experts are priced: "tables" the TRT-LLM set's own rows
# (DeepGEMM, what AIConfigurator timed); "recipe" the kernel its recipe or launch script chose per
# side, trtllm-gen from the SGLang set of the GPU where it chose TRTLLM; "recipe_tp" (default) the
# same on the sides without expert parallelism only, where SGLang runs the kernel as TRT-LLM does
# (silicon_recipes.reads_trtllm_gen_table; docs/SILICON.md "TRT-LLM's MoE kernel per side")
TRTLLM_MOE_SOURCES = ("tables", "recipe", "recipe_tp")
TRTLLM_MOE_DEFAULT = "recipe_tp"


def requests_for(concurrency: int) -> int:
    """Requests a closed loop of `concurrency` clients sends: warm-up (2 C) plus 20 C profiled."""
    return max(MIN_REQUESTS, (WARMUP_PER_CLIENT + PROFILED_PER_CLIENT) * concurrency)


def workload_overrides(row: SiliconRow, prefix_cache: str = "off", phases: str = "harness") -> list[str]:
    """The row's benchmark as pdsim replays it (PHASES): AIPerf's closed loop, warm-up and prompt
    pool, or InferenceX's bench_serving run; prefix_cache "off" (every repeat computed again) or
    "engine" (the engine's default as AIConfigurator's templates deploy it, PREFIX_CACHE)."""
    if prefix_cache not in ("off", "engine"):
        raise ValueError(f"prefix_cache must be 'off' or 'engine', got {prefix_cache!r}")
    if phases not in PHASES:
        raise ValueError(f"phases must be one of {PHASES}, got {phases!r}")
    c = row.concurrency
    tokenize = tokenizer_overrides(row.harness, row.agg is not None)  # the row's client's prompts, its frontend
    if phases == "harness" and row.harness == "inferencex":
        return [*inferencex_workload(c, row.isl_tokens, row.osl_tokens), *tokenize]
    cache = prefix_cache == "engine" and PREFIX_CACHE.get(row.backend, False)
    return [*tokenize, f"scenario.concurrency={c}", f"scenario.input.value={row.isl_tokens}",
            f"scenario.output.value={row.osl_tokens}", f"scenario.num_requests={requests_for(c)}",
            f"scenario.warmup_requests={WARMUP_PER_CLIENT * c}",
            f"scenario.warmup_barrier={str(phases != 'steady').lower()}",
            f"scenario.prefix.prompt_pool={AIPERF_PROMPTS}", f"scenario.prefix.block_tokens={CACHE_BLOCK_TOKENS}",
            f"cluster.prefix_cache={str(cache).lower()}"]


def _model_gaps(row: SiliconRow, cat: Catalog) -> tuple[str | None, list[str]]:
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


def _engine_gaps(row: SiliconRow, cat: Catalog) -> tuple[str | None, str, list[str]]:
    """(catalog hardware, perf preset, gaps)."""
    hardware = SYSTEMS.get(row.system)
    gaps = [] if hardware in cat.hardware else [f"hardware {row.system} not in catalog ({ISSUE_PRECISION})"]
    if row.backend not in ENGINES:
        return hardware, "", [*gaps, f"backend {row.backend} not modelled (no operator tables, {ISSUE_PRECISION})"]
    engine = ENGINES[row.backend]
    if hardware in cat.hardware and not _table_set(row, cat, hardware or ""):
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


MXFP4_MODES = ("w4a16_mxfp4", "w4a8_mxfp4_mxfp8")
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


def _table_set(row: SiliconRow, cat: Catalog, hardware: str) -> str:
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


def _side_gaps(side: Side, label: str, moe: bool) -> list[str]:
    """What pdsim cannot express of one engine shape (pdsim/parallel.py: TP x attention DP,
    MoE TP x EP over the same GPUs)."""
    where = f"{label} " if label else ""
    gaps = []
    if side.pp > 1:
        gaps.append(f"{where}pipeline parallelism (pp_size={side.pp}) not modelled")
    gpus = side.tp * side.attention_dp
    if moe and side.moe_tp * side.moe_ep != gpus:
        gaps.append(f"{where}MoE TP {side.moe_tp} x EP {side.moe_ep} != TP {side.tp} x attention DP "
                    f"{side.attention_dp} GPUs")
    if not moe and (side.moe_ep > 1 or side.attention_dp > 1):
        gaps.append(f"{where}attention DP / EP on a dense model not modelled")
    return gaps


def _layout(row: SiliconRow, side: Side, prefix: str) -> list[str]:
    """cluster overrides of one side's layout (prefix: colocated | prefill | decode)."""
    return [f"cluster.{prefix}_tp={side.tp}", f"cluster.{prefix}_dp={side.attention_dp}",
            f"cluster.{prefix}_moe_ep={side.moe_ep}", f"cluster.{prefix}_moe_a2a={moe_a2a(row.backend, row.system, row.precision, prefix)}"]


# Per-forward token budget as AIConfigurator's benchmark rules deploy an engine
# (generator/rule_plugin/benchmark/{vllm,sglang,trtllm}.rule): vLLM max-num-batched-tokens and
# TRT-LLM max_num_tokens = max_batch_size + isl + 1500 (TRT-LLM's rounded up to its 32-token KV
# block) on an aggregated engine, isl + 1500 on a prefill engine; SGLang max-prefill-tokens =
# isl + 1500 with --enable-mixed-chunk on an aggregated engine. vLLM V1 always chunks a prompt
# that overflows the budget, TRT-LLM does not (the templates leave enable_chunked_prefill false);
# SGLang chunks at its default chunked-prefill-size (pdsim's 8192). max_batch_size = the row's
# concurrency. These set how many prompts one forward takes, which decides TTFT under load: a
# wave of C prompts goes through one or two prompts per forward, not 8192 tokens at a time.
BUDGET_SLACK_TOKENS, TRTLLM_BLOCK_TOKENS, SGLANG_CHUNK_TOKENS = 1500, 32, 8192


def budget_overrides(row: SiliconRow, aggregated: bool) -> list[str]:
    """The engine's per-forward token budget and chunking for the row (pdsim overrides)."""
    c, isl = row.concurrency, row.isl_tokens
    if row.backend == "sglang":
        return [f"cluster.max_prefill_tokens={isl + BUDGET_SLACK_TOKENS}", f"cluster.chunk_size_tokens={SGLANG_CHUNK_TOKENS}"]
    budget = (c if aggregated else 0) + isl + BUDGET_SLACK_TOKENS
    if row.backend == "trtllm":
        budget = -(-budget // TRTLLM_BLOCK_TOKENS) * TRTLLM_BLOCK_TOKENS
        return [f"cluster.max_prefill_tokens={budget}", "cluster.chunk_size_tokens=0"]
    return [f"cluster.max_prefill_tokens={budget}", f"cluster.chunk_size_tokens={budget}"]


def _disagg_budget(row: SiliconRow, prefill: Side, decode: Side) -> list[str]:
    """A disaggregated row's prefill budget: its srt-slurm recipe's (silicon_recipes), else the
    rules' (budget_overrides)."""
    recipe = prefill_overrides(row.backend, row.system, row.precision, row.isl_tokens, prefill, decode)
    return recipe or budget_overrides(row, aggregated=False)


def _shape(row: SiliconRow, moe: bool, trtllm_moe: str) -> tuple[list[str], list[str]]:
    """(cluster overrides, gaps) for the row's deployment (`trtllm_moe`: TRTLLM_MOE_SOURCES)."""
    c = row.concurrency
    running = f"cluster.max_running_requests={max(256, c)}"
    if row.mode == "agg":
        if row.agg is None:
            return [], ["agg row without tp_size"]
        engine = ENGINES.get(row.backend)  # None: unsupported anyway (_engine_gaps says why)
        schedule = f"cluster.colocated_schedule={engine.colocated_schedule if engine else 'mixed'}"
        return (["cluster.mode=colocated", "cluster.colocated=1", *_layout(row, row.agg, "colocated"), schedule,
                 running, *budget_overrides(row, aggregated=True)],
                _side_gaps(row.agg, "", moe))
    if row.mode != "disagg":
        return [], [f"mode {row.mode} unknown (agg | disagg)"]
    p, d = row.prefill, row.decode
    if p is None or d is None or p.workers <= 0 or d.workers <= 0:
        return [], ["disagg row without worker counts"]
    batch = trtllm_generation_batch(row.system, row.precision, row.isl_tokens, row.osl_tokens, p, d, c) \
        if row.backend == "trtllm" else 0
    if batch:  # the recipe's generation slots per rank (silicon_recipes.TRTLLM_GENERATION)
        running = f"cluster.max_running_requests={batch}"
    overrides = ["cluster.mode=disaggregated", f"cluster.prefill={p.workers}", f"cluster.decode={d.workers}",
                 *_layout(row, p, "prefill"), *_layout(row, d, "decode"), running, *_disagg_budget(row, p, d)]
    if row.backend == "sglang" and p.attention_dp > 1:  # SGLang's prefill DP follows the bootstrap room
        overrides.append(f"cluster.prefill_dp_dispatch={BOOTSTRAP_ROOM}")
    if row.backend == "trtllm":  # the sides whose recipe runs trtllm-gen MoE
        overrides += trtllm_moe_table_overrides(row.system, row.precision, row.isl_tokens, p, d, trtllm_moe)
    return overrides, _side_gaps(p, "prefill", moe) + _side_gaps(d, "decode", moe)


def plan_row(row: SiliconRow, cat: Catalog, prefix_cache: str = "off", phases: str = "harness",
             trtllm_moe: str = TRTLLM_MOE_DEFAULT) -> RowPlan:
    """The row's pdsim run (hydra overrides), or every feature it lacks."""
    model, gaps = _model_gaps(row, cat)
    hardware, preset, engine_gaps = _engine_gaps(row, cat)
    moe = model is not None and cat.models[model][1]
    cluster, shape_gaps = _shape(row, moe, trtllm_moe)
    gaps += engine_gaps + shape_gaps
    if row.concurrency <= 0:
        gaps.append("row without client concurrency")
    if row.isl_tokens <= 0 or row.osl_tokens <= 0:
        gaps.append(f"isl/osl {row.isl_tokens}/{row.osl_tokens} not positive")
    table_set = "" if gaps else _table_set(row, cat, hardware or "")
    if not gaps and moe:
        gaps += _moe_gaps(row, model or "", table_set)
    if gaps:
        return RowPlan(row, missing=tuple(gaps))
    overrides = (
        f"scenario={SCENARIO}", f"model={model}", f"hardware={hardware}", f"perf={preset}",
        f"perf.engine_version={table_set.rsplit('_', 1)[1]}",
        f"perf.overhead_s={step_overhead_s(row.backend, table_set)}",
        f"perf.prefill_host_s_per_moe_layer={PREFILL_HOST_MS_PER_MOE_LAYER.get(row.backend, 0.0) / 1e3}",
        f"perf.prefill_host_mode={PREFILL_HOST_MODE.get(row.backend, 'floor')}",
        f"perf.prefill_graph_max_tokens={PREFILL_GRAPH_MAX_TOKENS.get(row.backend, 0)}",
        f"perf.prefill_graph_host_s_per_moe_layer={PREFILL_GRAPH_HOST_MS_PER_MOE_LAYER.get(row.backend, 0.0) / 1e3}",
        f"perf.moe_distribution={moe_routing(table_set)}",
        *moe_fallback_overrides(row.backend, row.backend_version, row.measured, table_set),
        f"model.gemm_quant={precision_of(row)[0]}", f"model.kv_dtype={precision_of(row)[1]}",
        f"model.moe_quant={moe_quant_of(row)}",
        *workload_overrides(row, prefix_cache, phases), "progress=false", *cluster,
    )
    if phases == "harness" and row.harness == "inferencex" and row.agg is not None:
        overrides = with_overrides(overrides, _script_overrides(row, row.agg, model or "", table_set, trtllm_moe))
    return RowPlan(row, overrides, note=_version_note(row, cat, hardware or ""))


def _script_overrides(row: SiliconRow, agg: Side, model: str, table_set: str, trtllm_moe: str) -> list[str]:
    """What an aggregated InferenceX row's launch script set: its MTP script's settings where the
    row ran MTP (silicon_harness.mtp_overrides), else the script version of its date (none known:
    nothing) and the MoE kernel it selects; under attention DP, TensorRT-LLM's balance as the
    script set it."""
    balance = adp_balance_overrides(row.backend, row.model_path, agg.attention_dp)
    if row.mtp_draft_tokens:
        return [*mtp_overrides(row.mtp_draft_tokens, row.isl_tokens, row.concurrency, agg.attention_dp, row.precision),
                *balance]
    deployment = deployment_for(row.backend, row.model_path, row.precision, row.system, agg.tp, row.measured)
    if deployment is None:
        return balance
    script = deployment.overrides(row.isl_tokens, row.osl_tokens, agg.tp, row.concurrency)
    kernel = moe_kernel_overrides(row, model, table_set, deployment.moe_quant) if deployment.moe_quant else []
    if (reads_trtllm_gen_table(trtllm_moe, agg.moe_ep) and row.system in TRTLLM_GEN_MOE_SETS
            and deployment.runs_trtllm_gen_moe(row.isl_tokens, row.osl_tokens, row.concurrency)):
        kernel.append(f"cluster.colocated_moe_table_set={TRTLLM_GEN_MOE_SETS[row.system]}")
    return [*script, *kernel, *balance]


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


def with_overrides(overrides: tuple[str, ...], extra: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`overrides` with each `key=value` of `extra` in place of the same key's entry (or added)."""
    keys = {e.split("=", 1)[0] for e in extra}
    return (*(o for o in overrides if o.split("=", 1)[0] not in keys), *extra)


def _moe_gaps(row: SiliconRow, model: str, table_set: str) -> list[str]:
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


def _version_note(row: SiliconRow, cat: Catalog, hardware: str) -> str:
    """Which operator tables stand in for the row's engine version."""
    used = _table_set(row, cat, hardware)
    return f"{row.backend} {row.backend_version or '(unstated)'} row on {used} tables"
