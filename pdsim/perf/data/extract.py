"""Rebuild the compact operator tables in this folder from the public sources (maintenance only).

    .venv/bin/python pdsim/perf/data/extract.py AIC_DATA_DIR VIDUR_CHECKOUT

AIC_DATA_DIR: ai-dynamo/aiconfigurator's `aic-core/src/aiconfigurator_core/systems/data` (parquet
per system / op / engine / version). VIDUR_CHECKOUT: a microsoft/vidur checkout (data/profiling).
Keeps bf16 (and fp8-block MoE) rows for the shapes pdsim's catalog needs, on a coarse grid; the
rows left out of the grid are sampled into `heldout_*.csv` (one folder per source: aic/<system>_<engine>_<version>/) for benchmarks/perf_table.py. Latencies
are kept in ms with 4 significant digits. Not imported by pdsim.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).parent
SOURCES = {  # (system, engine, version); comm rows come from the same engine version
    ("a100_sxm", "sglang", "0.5.10"), ("h100_sxm", "sglang", "0.5.10"),
    ("h200_sxm", "sglang", "0.5.10"), ("b200_sxm", "sglang", "0.5.10"),
    ("a100_sxm", "vllm", "0.14.0"), ("h100_sxm", "vllm", "0.14.0"), ("h200_sxm", "vllm", "0.14.0"),
}
GEMM_M = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
GEMM_NK = (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 65536)
KV_HEADS = (1, 2, 4, 8)
MOE_SHAPES = ((2048, 768, 8, 128), (7168, 2048, 8, 256))  # Qwen3-30B-A3B, DeepSeek-V3
SEED = 19


def _sig(values: pd.Series) -> pd.Series:
    return values.map(lambda v: float(f"{v:.4g}"))


def _ms(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["latency_ms"] = _sig(df.pop("latency"))
    return df


def gemm(path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = pd.read_parquet(path)
    df = df[df.gemm_dtype == "bfloat16"][["m", "n", "k", "latency"]]
    df = df.groupby(["m", "n", "k"], as_index=False).latency.median()
    grid = df.m.isin(GEMM_M) & df.n.isin(GEMM_NK) & df.k.isin(GEMM_NK)
    inside = (df.n.between(min(GEMM_NK), 16384)) & (df.k.between(min(GEMM_NK), 16384))
    rest = df[~grid & inside & (df.m >= 1) & (df.m <= max(GEMM_M))]
    return df[grid], rest.sample(n=min(400, len(rest)), random_state=SEED)


def _attention(path: Path, phase: str) -> pd.DataFrame:
    df = pd.read_parquet(path)
    df = df[(df.kv_cache_dtype == "bfloat16") & (df.head_dim == 128)]
    if "attn_dtype" in df:
        df = df[df.attn_dtype == "bfloat16"]
    keep = df.num_key_value_heads.isin(KV_HEADS) | (df.num_key_value_heads == df.num_heads)
    cols = ["batch_size", "isl" if phase == "context" else "step", "num_heads",
            "num_key_value_heads", "latency"]
    return df[keep][cols].groupby(cols[:-1], as_index=False).latency.median()


def _split_heads(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Held back: every head count not a power of two (the model interpolates over heads)."""
    pow2 = (df.num_heads & (df.num_heads - 1)) == 0
    rest = df[~pow2]
    return df[pow2], rest.sample(n=min(300, len(rest)), random_state=SEED)


def mla(path: Path, phase: str) -> pd.DataFrame:
    """MLA attention (DeepSeek-V3 shapes, 128 heads split over tp_size ranks), bf16 KV."""
    df = pd.read_parquet(path)
    df = df[(df.kv_cache_dtype == "bfloat16") & (df.mla_dtype == "bfloat16")]
    df = df[df.num_heads * df.tp_size == 128]
    cols = ["batch_size", "isl" if phase == "context" else "step", "num_heads", "latency"]
    return df[cols].groupby(cols[:-1], as_index=False).latency.median()


def allreduce(path: Path) -> pd.DataFrame:
    df = pd.read_parquet(path)
    if "backend" in df and df.backend.str.contains("graph").any():
        df = df[df.backend.str.contains("graph")]
    return df.groupby(["num_gpus", "message_size"], as_index=False).latency.median()


def moe(path: Path) -> pd.DataFrame:
    df = pd.read_parquet(path)
    df = df[(df.distribution == "balanced") & (df.moe_ep_size == 1)]
    df = df[df.moe_dtype.isin(["bfloat16", "fp8_block"])]
    shape = list(zip(df.hidden_size, df.inter_size, df.topk, df.num_experts, strict=True))
    df = df[np.array([s in MOE_SHAPES for s in shape], dtype=bool)]
    cols = ["moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
            "num_tokens", "latency"]
    return df[cols].groupby(cols[:-1], as_index=False).latency.median()


def vidur_ops(checkout: Path) -> pd.DataFrame:
    """Vidur's per-op times (ms, median) for the Llama models on A100 / H100."""
    frames = []
    ops = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "mlp_act",
           "input_layernorm", "post_attention_layernorm", "attn_rope", "add"]
    for gpu in ("a100", "h100"):
        for model in ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-7b-hf"):
            df = pd.read_csv(checkout / "data/profiling/compute" / gpu / model / "mlp.csv")
            df = df[df.num_tokens.isin([2**i for i in range(15)])]
            out = df[["num_tokens", "num_tensor_parallel_workers"]].rename(
                columns={"num_tensor_parallel_workers": "tp"})
            for op in ops:
                out[op + "_ms"] = _sig(df[f"time_stats.{op}.median"])
            out.insert(0, "model", model.split("/")[1])
            out.insert(0, "gpu", gpu)
            frames.append(out)
    return pd.concat(frames, ignore_index=True)


def main(aic: Path, vidur: Path) -> None:
    for system, engine, version in sorted(SOURCES):
        base = aic / system
        out = HERE / "aic" / f"{system}_{engine}_{version}"
        out.mkdir(parents=True, exist_ok=True)
        def add(name: str, df: pd.DataFrame, out: Path = out) -> None:
            _ms(df).to_csv(out / f"{name}.csv", index=False)
        grid, held = gemm(base / "gemm" / engine / version / "gemm_perf.parquet")
        add("gemm", grid)
        add("heldout_gemm", held)
        attn = base / "attention" / engine / version
        for phase in ("context", "generation"):
            df = _attention(attn / f"{phase}_attention_perf.parquet", phase)
            kept, held = _split_heads(df)
            add(f"{phase}_attention", kept)
            add(f"heldout_{phase}_attention", held)
        add("allreduce", allreduce(base / "comm" / engine / version / "custom_allreduce_perf.parquet"))
        for phase in ("context", "generation"):
            mla_path = base / "mla" / engine / version / f"{phase}_mla_perf.parquet"
            if mla_path.is_file():
                add(f"mla_{phase}", mla(mla_path, phase))
        moe_path = base / "moe" / engine / version / "moe_perf.parquet"
        if moe_path.is_file():
            add("moe", moe(moe_path))
    vidur_ops(vidur).to_csv(HERE / "vidur_ops.csv", index=False)


if __name__ == "__main__":
    np.seterr(all="raise")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
