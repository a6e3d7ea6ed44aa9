"""A measured silicon row -> the pdsim run it describes (hydra overrides), or why none.

The mapping is a set of small tables, one per axis, so that the precision issue (39: quant
modes, Blackwell/NVL72 hardware, TRT-LLM tables) and the MoE issue (40: expert parallelism,
attention DP) extend it by adding entries or by dropping a check, not by rewriting it. The row as
data and the catalog: silicon_parse.py; its model, precision and table set (and what pdsim
lacks of them): silicon_models.py; here, the run: the benchmark client's workload, each side's
layout and budgets (TP, attention DP and MoE EP per side; PP is not modelled), the launch
script's or recipe's settings, and the engine's constants (silicon_engines.py).
"""

from __future__ import annotations

from silicon_engines import (
    ENGINES,
    PREFILL_GRAPH_HOST_MS_PER_MOE_LAYER,
    PREFILL_GRAPH_MAX_TOKENS,
    PREFILL_HOST_MODE,
    PREFILL_HOST_MS_PER_MOE_LAYER,
    moe_fallback_overrides,
    moe_routing,
    step_overhead_s,
)
from silicon_harness import (
    adp_balance_overrides,
    deployment_for,
    inferencex_workload,
    mtp_overrides,
    tokenizer_overrides,
)
from silicon_models import (
    engine_gaps,
    model_gaps,
    moe_gaps,
    moe_kernel_overrides,
    moe_quant_of,
    precision_of,
    table_set_for,
    version_note,
)
from silicon_parse import Catalog, RowPlan, Side, SiliconRow
from silicon_recipes import (
    TRTLLM_GEN_MOE_SETS,
    moe_a2a,
    prefill_overrides,
    reads_trtllm_gen_table,
    trtllm_generation_batch,
    trtllm_moe_table_overrides,
)

from pdsim.policy.dp_dispatch import BOOTSTRAP_ROOM

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
        engine = ENGINES.get(row.backend)  # None: unsupported anyway (engine_gaps says why)
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
    model, gaps = model_gaps(row, cat)
    hardware, preset, engine_missing = engine_gaps(row, cat)
    moe = model is not None and cat.models[model][1]
    cluster, shape_gaps = _shape(row, moe, trtllm_moe)
    gaps += engine_missing + shape_gaps
    if row.concurrency <= 0:
        gaps.append("row without client concurrency")
    if row.isl_tokens <= 0 or row.osl_tokens <= 0:
        gaps.append(f"isl/osl {row.isl_tokens}/{row.osl_tokens} not positive")
    table_set = "" if gaps else table_set_for(row, cat, hardware or "")
    if not gaps and moe:
        gaps += moe_gaps(row, model or "", table_set)
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
    return RowPlan(row, overrides, note=version_note(row, cat, hardware or ""))


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


def with_overrides(overrides: tuple[str, ...], extra: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`overrides` with each `key=value` of `extra` in place of the same key's entry (or added)."""
    keys = {e.split("=", 1)[0] for e in extra}
    return (*(o for o in overrides if o.split("=", 1)[0] not in keys), *extra)


