"""The serving engines as the silicon rows ran them: which perf preset and operator tables each
maps to, and the engine constants that no operator table measures (step overhead, the eager
prefill's host time, the small-batch MoE kernel, the routing the MoE tables are read at).

Each constant is one number per engine (or engine and table version), chosen on the dev split's
samples A + B and checked on the held-back sample C where it says so; nothing is per row.
silicon_rows.py turns a row into a pdsim run with them (silicon_models.py checks what it runs on).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Engine:
    """How a serving engine maps onto pdsim: its perf preset, the engine name of its operator
    tables, and how an aggregated engine schedules prefill against decode."""

    preset: str
    tables: str
    colocated_schedule: str
    tables_version: str  # operator-table version the rows run on (pinned: reproducible numbers)
    # KV-cache dtype of a quantized (fp8 / nvfp4 GEMM) deployment: the engine's default. vLLM and
    # SGLang default to the model dtype ("auto"); TRT-LLM's quantized checkpoints carry an fp8 KV cache
    quantized_kv_dtype: str = "bf16"


# backend -> Engine. SGLang runs a waiting prefill batch before decoding and mixes the two only
# with --enable-mixed-chunk (off by default): pdsim's prefill_priority. vLLM's V1 scheduler
# fills one token budget with the running decodes first, then prefill chunks: pdsim's mixed.
# Table versions are pinned to the sets the presets document (scenarios/perf/measured*.yaml);
# newer sets (issue 39) are taken by changing the pin here.
ENGINES: dict[str, Engine] = {
    "sglang": Engine("measured", "sglang", "prefill_priority", "0.5.10"),
    "vllm": Engine("measured_vllm", "vllm", "mixed", "0.14.0"),
    # TRT-LLM's in-flight batching puts context (chunked) and generation requests in one batch
    "trtllm": Engine("measured_trtllm", "trtllm", "mixed", "1.3.0rc20", "fp8"),
}
# quant modes the measured perf model composes ("" = the checkpoint's own dtype, bf16 here); a
# pinned table version without the mode's tables gives way to the newest set that has them
SUPPORTED_QUANT = {"", "bf16", "fp8", "fp8_block", "nvfp4", "int4_wo"}
# routed-expert quant modes with fused-MoE tables (a row also needs its shape, MoE TP and EP in
# the set's moe table: silicon_models.moe_gaps)
SUPPORTED_MOE_QUANT = {"", "bf16", "fp8", "fp8_block", "nvfp4", "int4_wo", "w4a16_mxfp4", "w4a8_mxfp4_mxfp8"}
# Engine step overhead (ms per step, perf.overhead_s) per (engine, operator-table version): the
# median of measured - predicted TPOT over the dev split's dense rows run with none, clamped at 0
# (docs/PRECISION.md). One number per engine and version; nothing per row.
STEP_OVERHEAD_MS = {("sglang", "0.5.10"): 0.23, ("vllm", "0.14.0"): 2.04, ("vllm", "0.24.0"): 0.0,
                    ("trtllm", "1.3.0rc20"): 0.0}
# Host time per MoE layer of an eager step that carries prompt tokens (perf.prefill_host_s_per_moe_layer:
# the operator tables time the GPU only) and how it meets the forward (perf.prefill_host_mode): one
# pair per engine. SGLang and TRT-LLM run prompt steps eagerly with a host sync in every MoE layer,
# so host and GPU time add (serial: 3 ms and 0.75 ms, chosen on the two 400-row MoE samples from
# 2-4 ms and 0.5-2 ms by median TTFT error, checked leaving each model out and on the 107-row
# held-back sample; docs/PRECISION.md "Prefill host floor"). vLLM replays piecewise CUDA graphs
# for a step of up to its capture size in tokens (perf.prefill_graph_max_tokens: the default
# min(2 x max-num-seqs, 512) here, a launch script's --max-cudagraph-capture-size in its
# Deployment) and runs a larger one eagerly; each regime has its own host time per MoE layer
# (perf.prefill_graph_host_s_per_moe_layer for the graphed one), added to the forward: 0.5 ms eager
# and 0.25 ms graphed, chosen together on A + B's 120 vLLM rows from a 0.25-2 x 0-0.75 ms grid by
# median TTFT error (docs/PRECISION.md "vLLM's two regimes").
PREFILL_HOST_MS_PER_MOE_LAYER = {"sglang": 3.0, "trtllm": 0.75, "vllm": 0.5}
PREFILL_HOST_MODE = {"sglang": "serial", "trtllm": "serial", "vllm": "serial"}
PREFILL_GRAPH_MAX_TOKENS = {"vllm": 512}
PREFILL_GRAPH_HOST_MS_PER_MOE_LAYER = {"vllm": 0.25}
# The MoE kernel an engine falls back to for small batches (perf.moe_fallback_table and
# perf.moe_fallback_below_tokens), by engine: (table stem, tokens, the first release without it,
# that release's date: a nightly measured before it predates it; vLLM 0.24.0: 2026-07-01).
# vLLM releases before 0.24 run block-fp8 experts through TritonOrDeepGemmExperts: DeepGEMM
# from its 128-token M alignment, Triton below; the B200 set's own rows (0.24.0) measured
# FlashInfer's TRT-LLM kernel, and its `moe_triton` table is 0.19.0's Triton (docs/MOE.md; the
# B300 set holds B200's rows, the same FP8 throughput and HBM bandwidth).
MOE_FALLBACK = {"vllm": ("moe_triton", 128, "0.24.0", "2026-07-01")}
# The routing the MoE tables are read at (perf.moe_distribution): the tables' skewed routing
# (AIConfigurator's power_law_1.01) where the row's table set measured it, else balanced (the older
# sets have nothing else). Chosen over balanced on the two 400-row MoE samples (TPOT 19.4% -> 14.9%)
# and checked on the 107-row sample drawn before the choice (13.0% -> 11.0%); docs/MOE.md.
MOE_ROUTING = "power_law_1.01"


def moe_routing(table_set: str) -> str:
    """MOE_ROUTING where `table_set`'s fused-MoE table has it, else balanced."""
    from pdsim.perf.optables import load_tables

    moe = load_tables(table_set).moe
    return MOE_ROUTING if len(moe) and (moe.distribution == MOE_ROUTING).any() else "balanced"


def step_overhead_s(backend: str, table_set: str) -> float:
    return STEP_OVERHEAD_MS.get((backend, table_set.rsplit("_", 1)[1]), 0.0) / 1e3


def moe_fallback_overrides(backend: str, version: str, measured: str, table_set: str) -> list[str]:
    """The small-batch MoE kernel of engine `backend` release `version` measured on `measured` (a
    date; MOE_FALLBACK) where its table set
    has that kernel's table; [] for a release from the cut-off on, a nightly not measured before
    the cut-off's release date, or no table."""
    from pdsim.perf.optables import AIC_DIR, release_before, table_file

    fallback = MOE_FALLBACK.get(backend)
    if fallback is None:
        return []
    nightly_before = version.startswith("nightly") and "" < measured < fallback[3]
    if not (release_before(version, fallback[2]) or nightly_before):
        return []
    if table_file(AIC_DIR / table_set, fallback[0]) is None:
        return []
    return [f"perf.moe_fallback_table={fallback[0]}", f"perf.moe_fallback_below_tokens={fallback[1]}"]
