"""Add DeepEP tables (SGLang's wide-EP MoE) to the SGLang table sets (maintenance only).

    .venv/bin/python pdsim/perf/data/extract_deepep.py AIC_DATA_DIR

AIC_DATA_DIR as for extract_quant.py (`aiconfigurator_core/systems/data` of the
`aiconfigurator==0.12.0` wheel). For each system of SYSTEMS that has them, writes into every
aic/<system>_sglang_<version>/ set:

- `deepep_moe.csv.gz` (phase, moe_dtype, hidden_size, inter_size, topk, num_experts, moe_ep_size,
  distribution, num_tokens, latency_ms): one MoE layer's routed experts behind DeepEP
  (`moe/sglang/<v>/wideep_{context,generation}_moe_perf`, kernel deepepmoe): each GPU computes
  only the tokens dispatched to its experts; num_tokens counts the tokens of all ranks.
  phase context = DeepEP normal mode (prompt batches), generation = low-latency mode (decode
  batches, masked grouped GEMMs: flat in tokens until the weights stop dominating). AIConfigurator's
  "uniform" routing is written as "balanced" (pdsim's name for it).
- `deepep_a2a.csv.gz` (mode, hidden_size, topk, num_experts, num_tokens, dispatch_ms, combine_ms):
  DeepEP's dispatch and combine per rank (`comm/sglang/<v>/wideep_deepep_{ll,normal}_perf`),
  num_tokens = the rank's tokens; ll = low-latency kernels, normal = normal kernels at 20 SMs
  (DeepEP's default Buffer.num_sms). Measured inside one node (node_num 1).

Only the newest version of each table is kept (the MoE tables exist for SGLang 0.5.10, the
dispatch tables for 0.5.12: the same files go into every SGLang set of the system; SOURCES.md).
Latencies in ms, 4 significant digits. Not imported by pdsim.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from extract import _sig
from extract_quant import HERE, _versions

SYSTEMS = ("h100_sxm", "b200_sxm", "b300_sxm", "gb300")  # the dev split's; H200 and GB200 not read
NORMAL_SMS = 20
MOE_KEYS = ["phase", "moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "moe_ep_size",
            "distribution", "num_tokens"]


def newest(folder: Path, stem: str) -> Path | None:
    """`stem`.parquet of the newest version folder under `folder` that has it."""
    found = [folder / v / f"{stem}.parquet" for v in _versions(folder)]
    found = [p for p in found if p.is_file()]
    return found[-1] if found else None


def moe_rows(base: Path) -> pd.DataFrame:
    frames = []
    for phase in ("context", "generation"):
        path = newest(base / "moe" / "sglang", f"wideep_{phase}_moe_perf")
        if path is None:
            continue
        df = pd.read_parquet(path).assign(phase=phase)
        df["distribution"] = df["distribution"].replace({"uniform": "balanced"})
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames)
    out = df.groupby(MOE_KEYS, as_index=False)["latency"].median()
    out["latency_ms"] = _sig(out.pop("latency"))
    return out


def a2a_rows(base: Path) -> pd.DataFrame:
    frames = []
    ll = newest(base / "comm" / "sglang", "wideep_deepep_ll_perf")
    if ll is not None:
        df = pd.read_parquet(ll)
        frames.append(df.assign(mode="ll", dispatch_us=df.dispatch_avg_t_us, combine_us=df.combine_avg_t_us))
    normal = newest(base / "comm" / "sglang", "wideep_deepep_normal_perf")
    if normal is not None:
        df = pd.read_parquet(normal)
        df = df[(df.dispatch_sms == NORMAL_SMS) & (df.combine_sms == NORMAL_SMS)]
        frames.append(df.assign(mode="normal", dispatch_us=df.dispatch_transmit_us + df.dispatch_notify_us,
                                combine_us=df.combine_transmit_us + df.combine_notify_us))
    if not frames:
        return pd.DataFrame()
    df = pd.concat(frames).rename(columns={"num_token": "num_tokens", "num_topk": "topk"})
    keys = ["mode", "hidden_size", "topk", "num_experts", "num_tokens"]
    out = df.groupby(keys, as_index=False)[["dispatch_us", "combine_us"]].median()
    for op in ("dispatch", "combine"):
        out[f"{op}_ms"] = _sig(out.pop(f"{op}_us") / 1e3)
    return out


def main(aic_data: Path) -> None:
    for system in SYSTEMS:
        moe, a2a = moe_rows(aic_data / system), a2a_rows(aic_data / system)
        sets = sorted((HERE / "aic").glob(f"{system}_sglang_*"))
        for folder in sets:
            if len(moe):
                moe.to_csv(folder / "deepep_moe.csv.gz", index=False)
            if len(a2a):
                a2a.to_csv(folder / "deepep_a2a.csv.gz", index=False)
        print(f"{system}: {len(moe)} DeepEP MoE rows, {len(a2a)} dispatch/combine rows -> "
              f"{[f.name for f in sets]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
