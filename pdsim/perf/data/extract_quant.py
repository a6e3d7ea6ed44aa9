"""Rebuild the quantized operator table sets from AIConfigurator's 0.11+ layout (maintenance only).

    .venv/bin/python pdsim/perf/data/extract_quant.py AIC_DATA_DIR

AIC_DATA_DIR: `aiconfigurator_core/systems/data` of the `aiconfigurator==0.12.0` wheel (parquet
per system / op family / engine / version; the same layout as the repository path in
SOURCES.md). For each (system, engine) of SETS, at the newest version that has both GEMM and
attention tables, writes one folder aic/<system>_<engine>_<version>/ of gzipped CSVs:

- `gemm[_<quant>].csv.gz`: GEMMs per quant mode (bf16 = no suffix; fp8 per-tensor, fp8_block,
  nvfp4 where measured), the same m/n/k grid as extract.py;
- `context_attention.csv.gz` (bf16 KV), `generation_attention[_fp8].csv.gz` (bf16 / fp8 KV;
  bf16 activations), head_dim 128, KV heads 1/2/4/8 or = query heads;
- `allreduce.csv.gz` from the engine's comm tables (same version, else the newest it has);
- `heldout_*.csv.gz`: the rows left out of each grid (a seeded sample) for benchmarks/perf_table.py.

The older sets (extract.py) stay as they are. extract_moe.py adds MoE, MLA and NCCL tables to
these sets.
Not imported by pdsim.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from extract import GEMM_M, GEMM_NK, KV_HEADS, SEED, _ms, _split_heads

HERE = Path(__file__).parent
SYSTEMS = ("h100_sxm", "h200_sxm", "b200_sxm", "b300_sxm", "gb200", "gb300")
ENGINES = ("sglang", "vllm", "trtllm")
GEMM_QUANTS = {"bfloat16": "", "fp8": "_fp8", "fp8_block": "_fp8_block", "nvfp4": "_nvfp4"}
KV_DTYPES = {"bfloat16": "", "fp8": "_fp8"}


def _versions(folder: Path) -> list[str]:
    """Version folders holding a parquet file (a `reuse.yaml` alias is not a new measurement)."""
    if not folder.is_dir():
        return []
    found = [p.name for p in folder.iterdir() if p.is_dir() and any(p.glob("*.parquet"))]
    return sorted(found, key=lambda v: [int(x) if x.isdigit() else x for x in v.replace("rc", ".").replace(
        "post", ".").split(".")])


def pick_version(base: Path, engine: str) -> str:
    """The newest version with both GEMM and attention tables ("" if none)."""
    both = set(_versions(base / "gemm" / engine)) & set(_versions(base / "attention" / engine))
    ordered = [v for v in _versions(base / "gemm" / engine) if v in both]
    return ordered[-1] if ordered else ""


def gemm(path: Path, dtype: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    df = pd.read_parquet(path)
    df = df[df.gemm_dtype == dtype][["m", "n", "k", "latency"]]
    df = df.groupby(["m", "n", "k"], as_index=False).latency.median()
    grid = df.m.isin(GEMM_M) & df.n.isin(GEMM_NK) & df.k.isin(GEMM_NK)
    inside = df.n.between(min(GEMM_NK), 16384) & df.k.between(min(GEMM_NK), 16384)
    rest = df[~grid & inside & (df.m >= 1) & (df.m <= max(GEMM_M))]
    return df[grid], rest.sample(n=min(300, len(rest)), random_state=SEED)


def attention(path: Path, phase: str, kv_dtype: str) -> pd.DataFrame:
    """bf16-activation attention with the given KV dtype (head_dim 128, no window, beam 1)."""
    df = pd.read_parquet(path)
    df = df[(df.kv_cache_dtype == kv_dtype) & (df.head_dim == 128) & (df.attn_dtype == "bfloat16")]
    df = df[(df.window_size == 0) & (df.beam_width == 1)]
    keep = df.num_key_value_heads.isin(KV_HEADS) | (df.num_key_value_heads == df.num_heads)
    cols = ["batch_size", "isl" if phase == "context" else "step", "num_heads", "num_key_value_heads", "latency"]
    return df[keep][cols].groupby(cols[:-1], as_index=False).latency.median()


def allreduce(base: Path, engine: str, version: str) -> pd.DataFrame:
    """The engine's all-reduce (CUDA-graph variant where both were measured; single-node)."""
    versions = _versions(base / "comm" / engine)
    use = version if version in versions else versions[-1]
    df = pd.read_parquet(base / "comm" / engine / use / "custom_allreduce_perf.parquet")
    if "backend" in df and df.backend.str.contains("graph").any():
        df = df[df.backend.str.contains("graph")]
    if "kernel_source" in df and (df.kernel_source == "TRTLLM").any():
        df = df[df.kernel_source == "TRTLLM"]  # not the multi-node NVLink (MNNVL) variants
    return df.groupby(["num_gpus", "message_size"], as_index=False).latency.median()


def extract_set(base: Path, engine: str, version: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)

    def add(name: str, df: pd.DataFrame) -> None:
        if len(df):
            _ms(df).to_csv(out / f"{name}.csv.gz", index=False)

    gemm_path = base / "gemm" / engine / version / "gemm_perf.parquet"
    for dtype, suffix in GEMM_QUANTS.items():
        grid, held = gemm(gemm_path, dtype)
        add(f"gemm{suffix}", grid)
        add(f"heldout_gemm{suffix}", held)
    attn = base / "attention" / engine / version
    for kv, suffix in KV_DTYPES.items():
        for phase in ("context", "generation"):
            if phase == "context" and suffix:
                continue  # prefill attention reads bf16 K/V; only decode reads the fp8 cache
            df = attention(attn / f"{phase}_attention_perf.parquet", phase, kv)
            if len(df):
                kept, held = _split_heads(df)
                add(f"{phase}_attention{suffix}", kept)
                add(f"heldout_{phase}_attention{suffix}", held)
    add("allreduce", allreduce(base, engine, version))


def main(aic: Path) -> None:
    for system in SYSTEMS:
        for engine in ENGINES:
            version = pick_version(aic / system, engine)
            if version:
                print(system, engine, version)
                extract_set(aic / system, engine, version, HERE / "aic" / f"{system}_{engine}_{version}")


if __name__ == "__main__":
    np.seterr(all="raise")
    main(Path(sys.argv[1]))
