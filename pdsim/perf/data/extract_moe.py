"""Add MoE, MLA and NCCL tables to the quantized table sets (maintenance only).

    .venv/bin/python pdsim/perf/data/extract_moe.py AIC_DATA_DIR

AIC_DATA_DIR as for extract_quant.py (`aiconfigurator_core/systems/data` of the
`aiconfigurator==0.12.0` wheel); the model configs are read from its sibling
`aiconfigurator_core/model_configs/`. For each set extract_quant.py writes (same system, engine and
version), adds to aic/<system>_<engine>_<version>/:

- `moe.csv.gz`: one fused MoE layer (moe_dtype, hidden_size, inter_size, topk, num_experts,
  moe_tp_size, moe_ep_size, distribution, num_tokens), only the expert shapes of MOE_MODELS, every
  dtype and TP x EP split measured, routing "balanced" and "power_law_1.01", num_tokens on the
  powers of two 1..16384. Where one point was measured with several kernels (TRT-LLM: nvfp4's
  cutlass and min-latency kernels), the median of each kernel's repeats, then the fastest kernel.
  `heldout_moe.csv.gz`: a seeded sample per dtype of the points off that token grid.
- `moe_triton.csv.gz` (B200 and B300 vLLM sets; `FALLBACK_MOE`): vLLM 0.19.0's B200 Triton fused
  MoE for block fp8, the same axes as `moe.csv.gz`: the kernel vLLM releases before 0.24 run for
  fewer than 128 tokens (perf.moe_fallback_table); B300's copy stands in for a collection
  AIConfigurator did not keep (same FP8 throughput and HBM bandwidth as B200).
  `heldout_moe_triton.csv.gz`: its rows off the token grid, as `heldout_moe.csv.gz`.
- `mla_context[_fp8].csv.gz`, `mla_generation[_fp8].csv.gz` (batch_size, isl | step, num_heads):
  the MLA attention kernel alone (bf16 / fp8 KV cache), num_heads per rank, as the older sets'
  `mla_*.csv` (SGLang and TRT-LLM); `heldout_mla_context[_fp8]`: the prompt lengths off the
  power-of-two grid. vLLM has only whole-module tables: `mla_{context,generation}_module[_fp8]`,
  the same axes plus gemm_type (bfloat16 | fp8_block), DeepSeek-V3's attention module with its
  projections (q/kv down and up, absorbed BMMs, o_proj): it replaces projections + attention, it
  is not added to them.
- `mla_bmm.csv.gz` (op mla_gen_pre | mla_gen_post, bmm_dtype, num_tokens, num_heads): the
  absorbed-weight BMMs of MLA decode around the attention kernel.
- `nccl.csv.gz` (op, num_gpus, message_bytes): NCCL all_gather / reduce_scatter / alltoall /
  all_reduce from the system's newest comm/nccl version, half precision; AIConfigurator's
  message_size counts elements (its half rows at N match its int8 rows at 2N), so bytes = 2 N.

Latencies in ms, 4 significant digits. Not imported by pdsim.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from extract import SEED, _ms
from extract_quant import ENGINES, HERE, SYSTEMS, _versions, pick_version

MOE_MODELS = ("deepseek-ai--DeepSeek-V3", "deepseek-ai--DeepSeek-R1", "moonshotai--Kimi-K2.5",
              "Qwen--Qwen3-235B-A22B", "Qwen--Qwen3-30B-A3B", "Qwen--Qwen3.5-397B-A17B",
              "openai--gpt-oss-120b", "MiniMaxAI--MiniMax-M2.5", "zai-org--GLM-5")
DISTRIBUTIONS = ("balanced", "power_law_1.01")
MOE_TOKENS = tuple(2**i for i in range(15))  # 1..16384
MOE_KEYS = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "moe_ep_size", "distribution", "num_tokens"]
HELD_PER_DTYPE = 60
KV_SUFFIX = {"bfloat16": "", "fp8": "_fp8"}
# (engine, release, kernel_source, dtypes, system): vLLM 0.19.0's B200 collection measured its
# Triton fused MoE for block fp8, the kernel its releases before 0.24 run below DeepGEMM's
# 128-token alignment (TritonOrDeepGemmExperts); the set's own 0.24.0 rows are FlashInfer's.
# Written to the B200 set and, as a stand-in, to the B300 set: AIConfigurator kept no 0.19
# collection for B300, whose FP8 tensor throughput and HBM bandwidth are B200's
# (scenarios/hardware/b{200,300}.yaml) and which a Triton kernel is bound by
FALLBACK_MOE = ("vllm", "0.19.0", "vllm_fused_moe", ("fp8_block",), "b200_sxm")
FALLBACK_MOE_SYSTEMS = ("b200_sxm", "b300_sxm")


def moe_shapes(configs: Path) -> set[tuple[int, int, int, int]]:
    """(hidden, expert inter, top-k, routed experts) of each model in MOE_MODELS."""
    shapes = set()
    for model in MOE_MODELS:
        cfg = json.loads((configs / f"{model}_config.json").read_text())
        cfg = cfg.get("text_config", cfg)
        experts = cfg.get("n_routed_experts") or cfg.get("num_experts") or cfg.get("num_local_experts")
        inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        shapes.add((cfg["hidden_size"], inter, cfg["num_experts_per_tok"], experts))
    return shapes


def moe(path: Path, shapes: set[tuple[int, int, int, int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The grid rows and the held-back rows (see the module docstring)."""
    return moe_rows(pd.read_parquet(path), shapes)


def moe_rows(df: pd.DataFrame, shapes: set[tuple[int, int, int, int]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = df[df.distribution.isin(DISTRIBUTIONS)]
    shape = pd.Series(list(zip(df.hidden_size, df.inter_size, df.topk, df.num_experts, strict=True)),
                      index=df.index)
    df = df[shape.isin(shapes)]
    per_kernel = df.groupby([*MOE_KEYS, "kernel_source"], as_index=False).latency.median()
    best = per_kernel.groupby(MOE_KEYS, as_index=False).latency.min()
    on_grid = best.num_tokens.isin(MOE_TOKENS)
    off = best[~on_grid & (best.num_tokens < max(MOE_TOKENS))]
    held = [part.sample(n=min(HELD_PER_DTYPE, len(part)), random_state=SEED)
            for _, part in off.groupby("moe_dtype")]
    return best[on_grid], pd.concat(held).sort_values(MOE_KEYS) if held else off


def mla(path: Path, phase: str, kv_dtype: str) -> pd.DataFrame:
    """MLA rows of one KV dtype (bf16 MLA math), median of repeats; num_heads per rank. Module
    tables keep gemm_type, the fastest attention backend per point (vLLM measured several)."""
    df = pd.read_parquet(path)
    df = df[(df.kv_cache_dtype == kv_dtype) & (df.mla_dtype == "bfloat16")]
    cols = ["batch_size", "isl" if phase == "context" else "step", "num_heads"]
    if "gemm_type" in df:
        cols = ["gemm_type", *cols]
    per_kernel = df.groupby([*cols, "kernel_source"], as_index=False).latency.median()
    return per_kernel.groupby(cols, as_index=False).latency.min()


def split_isl(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held back: prompt lengths not a power of two (1536, 3072, ...), a seeded sample."""
    pow2 = (df.isl & (df.isl - 1)) == 0
    rest = df[~pow2]
    return df[pow2], rest.sample(n=min(300, len(rest)), random_state=SEED)


def mla_bmm(path: Path) -> pd.DataFrame:
    df = pd.read_parquet(path)
    df = df[df.num_tokens.isin(MOE_TOKENS)].rename(columns={"op_name": "op"})
    cols = ["op", "bmm_dtype", "num_tokens", "num_heads"]
    per_kernel = df.groupby([*cols, "kernel_source"], as_index=False).latency.median()
    return per_kernel.groupby(cols, as_index=False).latency.min()


def nccl(base: Path) -> pd.DataFrame:
    versions = _versions(base / "comm" / "nccl")
    df = pd.read_parquet(base / "comm" / "nccl" / versions[-1] / "nccl_perf.parquet")
    df = df[df.nccl_dtype == "half"].rename(columns={"op_name": "op"})
    df = df.assign(message_bytes=df.message_size * 2)
    return df.groupby(["op", "num_gpus", "message_bytes"], as_index=False).latency.median()


def mla_source(folder: Path, phase: str) -> tuple[str, Path] | None:
    """(table stem, parquet) of one phase: the attention-only table, else the module one."""
    for stem, file in ((f"mla_{phase}", f"{phase}_mla_perf.parquet"),
                       (f"mla_{phase}_module", f"mla_{phase}_module_perf.parquet")):
        if (folder / file).is_file():
            return stem, folder / file
    return None


def extract_set(base: Path, engine: str, version: str, out: Path, shapes: set) -> None:
    def add(name: str, df: pd.DataFrame) -> None:
        if len(df):
            _ms(df).to_csv(out / f"{name}.csv.gz", index=False)

    moe_path = base / "moe" / engine / version / "moe_perf.parquet"
    if moe_path.is_file():
        grid, held = moe(moe_path, shapes)
        add("moe", grid)
        add("heldout_moe", held)
    for phase in ("context", "generation"):
        source = mla_source(base / "mla" / engine / version, phase)
        if source is None:
            continue
        stem, path = source
        for kv, suffix in KV_SUFFIX.items():
            df = mla(path, phase, kv)
            kept, held = split_isl(df) if phase == "context" else (df, df.iloc[:0])
            add(f"{stem}{suffix}", kept)
            add(f"heldout_{stem}{suffix}", held)
    bmm_path = base / "mla_bmm" / engine / version / "mla_bmm_perf.parquet"
    if bmm_path.is_file():
        add("mla_bmm", mla_bmm(bmm_path))
    add("nccl", nccl(base))


def fallback_moe(base: Path, out: Path, shapes: set) -> None:
    """`moe_triton.csv.gz` (FALLBACK_MOE): one older release's Triton fused-MoE rows of the dtypes
    that release ran through Triton below DeepGEMM's alignment, beside a set whose own rows
    measured a newer kernel."""
    engine, version, kernel, dtypes, system = FALLBACK_MOE
    path = base / system / "moe" / engine / version / "moe_perf.parquet"
    df = pd.read_parquet(path)
    rows, held = moe_rows(df[(df.kernel_source == kernel) & df.moe_dtype.isin(dtypes)], shapes)
    _ms(rows).to_csv(out / "moe_triton.csv.gz", index=False)
    _ms(held).to_csv(out / "heldout_moe_triton.csv.gz", index=False)


def main(aic: Path) -> None:
    shapes = moe_shapes(aic.parent.parent / "model_configs")
    engine, version = FALLBACK_MOE[:2]
    for system in FALLBACK_MOE_SYSTEMS:
        fallback_out = HERE / "aic" / f"{system}_{engine}_{pick_version(aic / system, engine)}"
        if fallback_out.is_dir():
            print(system, engine, version, "Triton fallback (B200's rows)")
            fallback_moe(aic, fallback_out, shapes)
    for system in SYSTEMS:
        for engine in ENGINES:
            version = pick_version(aic / system, engine)
            out = HERE / "aic" / f"{system}_{engine}_{version}"
            if version and out.is_dir():
                print(system, engine, version)
                extract_set(aic / system, engine, version, out, shapes)


if __name__ == "__main__":
    np.seterr(all="raise")
    main(Path(sys.argv[1]))
