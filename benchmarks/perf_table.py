"""Step-latency models against measured data: fit / held-back error per source, cross-source error.

    .venv/bin/python benchmarks/perf_table.py [--data-dir DIR] [--section NAME ...]

Errors are (predicted - measured) / measured; tables give the median and p90 of |error| and the
median signed error ("bias"). Sections (sources and licences: pdsim/perf/data/SOURCES.md):

- `ops`: AIConfigurator tables, every (GPU, engine) set and every quant table (GEMM per quant
  mode, decode attention per KV dtype): the grid the model interpolates is the fit part; the
  held-back rows (GEMMs with n or k off the power-of-two grid, attention with a head count off
  it, fused MoE and MLA prefill with num_tokens / prompt length off it) are predicted by
  interpolation. By operator and shape.
- `engines`: cross-engine: steps composed from SGLang 0.5.10 tables vs the same steps from
  vLLM 0.14.0 tables on the same GPU (catalog models, decode and prefill shapes).
- `vidur`: cross-source: AIConfigurator GEMMs (SGLang 0.5.10) vs Vidur's measured projection
  GEMMs (vLLM-era profiler) for Llama-2-70B / 7B at TP 1-8 on A100 and H100. By model and op.
- `splitwise`: whole steps (Splitwise's vLLM-2023 profile, ../shared/data/calibration): the bare
  composed model (cross-generation error), then the engine-generation fit (engine_fit.py) on half
  of the Llama-2-70B shapes, held-back error on the other half (by phase and TP) and on BLOOM-176B
  (a model the fit never saw).
- `distserve`: DistServe's fitted A100 formula (its own engine) for OPT-13B TP1 / OPT-66B TP4:
  bare composed model, then the engine fit on OPT-13B, held-back error on OPT-66B.
- `llama70b`: issue 4's Llama-2-70B TP8 table with the measured model added.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd

from pdsim.config import ModelConfig, PerfConfig
from pdsim.paths import resolve_data_path
from pdsim.perf import build_latency_model, catalog
from pdsim.perf.engine_fit import fit_engine, predict_s
from pdsim.perf.fitted import load_fitted
from pdsim.perf.loggrid import LogGrid
from pdsim.perf.optables import (
    AIC_DIR,
    DATA_DIR,
    load_kv_generation,
    load_mla,
    load_quant_gemm,
    load_tables,
    moe_fallback_of,
    table_file,
    table_sets,
)
from pdsim.perf.profile import ProfilePoint, read_splitwise_csv
from pdsim.perf.roofline import RooflineModel
from pdsim.perf.table_keys import TABLE_QUANTS

SPLITWISE = "calibration/splitwise_perf_model.csv"
DISTSERVE = "calibration/distserve_profiler-a100-80g.distserve.json"
BARE = PerfConfig(kind="measured", engine="sglang", overhead_s=0.0)
BLOOM = ModelConfig(name="bloom_176b", num_layers=70, hidden_size=14336, num_heads=112,
                    num_kv_heads=112, head_dim=128, ffn_size=57344, vocab_size=250880,
                    gated_ffn=False)  # BigScience BLOOM config.json


def stats(errors: Iterable[float]) -> str:
    e = np.asarray(list(errors), dtype=float)
    if e.size == 0:
        return "   n=0"
    a = np.abs(e) * 100
    return f"n={e.size:5d}  median {np.median(a):5.1f}%  p90 {np.percentile(a, 90):5.1f}%  bias {np.median(e) * 100:+6.1f}%"


def print_groups(title: str, df: pd.DataFrame, by: list[str]) -> None:
    print(f"\n{title}")
    for key, part in df.groupby(by, sort=True):
        label = " ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
        print(f"  {label:<44} {stats(part.err)}")
    print(f"  {'all':<44} {stats(df.err)}")


def _bucket(values: pd.Series, edges: tuple[int, ...], unit: str) -> pd.Series:
    labels = [f"{unit}<={e}" for e in edges] + [f"{unit}>{edges[-1]}"]
    return pd.cut(values, [0, *edges, np.inf], labels=labels).astype(str)


def section_ops() -> None:
    rows = []
    for name in table_sets():
        tables, folder = load_tables(name), AIC_DIR / name
        for quant in ("", *TABLE_QUANTS):
            path = table_file(folder, f"heldout_gemm{'_' + quant if quant else ''}")
            if path is None:
                continue
            g, grid = pd.read_csv(path), load_quant_gemm(name, quant) if quant else tables.gemm
            pred = [grid(m, n, k) for m, n, k in zip(g.m, g.n, g.k, strict=True)]
            rows.append(g.assign(set=name, op=f"gemm_{quant or 'bf16'}", err=np.array(pred) / g.latency_ms - 1,
                                 shape=_bucket(g.m, (16, 512), "m")))
        for phase, axis, kv in (("context", "isl", ""), ("generation", "step", ""), ("generation", "step", "fp8")):
            path = table_file(folder, f"heldout_{phase}_attention{'_' + kv if kv else ''}")
            if path is None:
                continue
            heads = tables.context_attention if phase == "context" else (
                load_kv_generation(name, kv) if kv else tables.generation_attention)
            a = pd.read_csv(path)
            pred = [heads(h, k, b, t) for h, k, b, t in
                    zip(a.num_heads, a.num_key_value_heads, a.batch_size, a[axis], strict=True)]
            rows.append(a.assign(set=name, op=f"{phase}_attn{'_kv_' + kv if kv else ''}",
                                 err=np.array(pred) / a.latency_ms - 1, shape=_bucket(a[axis], (512, 4096), "len")))
        rows += _held_moe(name) + _held_mla_context(name)
    df = pd.concat(rows, ignore_index=True)
    print_groups("ops: AIConfigurator held-back rows, by operator and set", df, ["op", "set"])
    print_groups("ops: by operator and shape (all sets)", df, ["op", "shape"])


def _held_moe(name: str) -> list[pd.DataFrame]:
    """Fused MoE at num_tokens off the power-of-two grid, by dtype (extract_moe.py's sets): the
    set's own table and its small-batch fallback table (`moe_triton`) where it has one."""
    out = []
    for stem in ("moe", "moe_triton"):
        path = table_file(AIC_DIR / name, f"heldout_{stem}")
        if path is None:
            continue
        held, tables = pd.read_csv(path), load_tables(name)
        tables = tables if stem == "moe" else moe_fallback_of(tables, stem)
        pred = []
        for r in held.itertuples():
            grid = tables.moe_grid(r.moe_dtype, (r.hidden_size, r.inter_size, r.topk, r.num_experts),
                                   r.moe_tp_size, r.moe_ep_size, r.distribution)
            pred.append(grid(r.num_tokens) if grid is not None else np.nan)
        out.append(held.assign(set=name, op=f"{stem}_" + held.moe_dtype, err=np.array(pred) / held.latency_ms - 1,
                               shape=_bucket(held.num_tokens, (64, 1024), "tokens")))
    return out


def _held_mla_context(name: str) -> list[pd.DataFrame]:
    """MLA prefill at prompt lengths off the power-of-two grid, per KV dtype (and per GEMM dtype
    for vLLM's whole-module tables)."""
    frames = []
    for module, kv in ((m, kv) for m in ("", "_module") for kv in ("bfloat16", "fp8")):
        path = table_file(AIC_DIR / name, f"heldout_mla_context{module}{'_fp8' if kv == 'fp8' else ''}")
        if path is None:
            continue
        held = pd.read_csv(path)
        for gemm, part in held.groupby("gemm_type") if module else [("", held)]:
            table = load_mla(name, "context", kv, gemm)
            pred = [table(h, 1, b, t) for h, b, t in zip(part.num_heads, part.batch_size, part.isl, strict=True)]
            op = f"mla_context{'_module_' + gemm if gemm else ''}{'_kv_fp8' if kv == 'fp8' else ''}"
            frames.append(part.assign(set=name, op=op, err=np.array(pred) / part.latency_ms - 1,
                                      shape=_bucket(part.isl, (512, 4096), "len")))
    return frames


def _shapes() -> list[tuple[str, int, int]]:
    decode = [("decode", b, c) for b in (1, 8, 32, 128) for c in (512, 2048, 8192)]
    return decode + [("prefill", 1, n) for n in (256, 1024, 4096)] + [("prefill", 4, 2048)]


def _step(model, phase: str, b: int, tokens: int) -> float:
    if phase == "decode":
        return model.decode_time_s(b, b * tokens)
    return model.prefill_time_s([(tokens, 0)] * b)


def section_engines() -> None:
    rows = []
    for hw in ("a100_80g", "h100", "h200"):
        for name, tp in (("llama3_8b", 1), ("qwen3_32b", 4), ("llama3_70b", 8)):
            m, h = catalog.load_model(name), catalog.load_hardware(hw)
            sg = build_latency_model(BARE, m, h, tp)
            vl = build_latency_model(PerfConfig(kind="measured", engine="vllm", overhead_s=0.0), m, h, tp)
            for phase, b, t in _shapes():
                ref = _step(vl, phase, b, t)
                rows.append({"hw": hw, "model": f"{name}/tp{tp}", "phase": phase,
                             "err": _step(sg, phase, b, t) / ref - 1})
    df = pd.DataFrame(rows)
    print_groups("engines: SGLang 0.5.10 tables predicting vLLM 0.14.0 steps (same GPU)", df, ["hw", "phase"])
    print_groups("engines: by model", df, ["model"])


VIDUR_MODELS = {"Llama-2-70b-hf": (8192, 64, 8, 28672), "Llama-2-7b-hf": (4096, 32, 32, 11008)}


def section_vidur() -> None:
    ops = pd.read_csv(DATA_DIR / "vidur_ops.csv")
    ops = ops.groupby(["gpu", "model", "tp", "num_tokens"], as_index=False).median(numeric_only=True)
    rows = []
    for gpu, system in (("a100", "a100_sxm_sglang_0.5.10"), ("h100", "h100_sxm_sglang_0.5.10")):
        gemm: LogGrid = load_tables(system).gemm
        for r in ops[ops.gpu == gpu].itertuples():
            hidden, heads, kv, ffn = VIDUR_MODELS[r.model]
            d, tp, t = 128, r.tp, r.num_tokens
            shapes = {"attn_pre_proj": ((heads + 2 * kv) * d / tp, hidden),
                      "attn_post_proj": (hidden, heads * d / tp),
                      "mlp_up_proj": (2 * ffn / tp, hidden), "mlp_down_proj": (hidden, ffn / tp)}
            for op, (n, k) in shapes.items():
                rows.append({"gpu": gpu, "model": r.model, "op": op, "tokens": _bucket(pd.Series([t]), (16, 512), "T")[0],
                             "err": gemm(t, n, k) / getattr(r, f"{op}_ms") - 1})
    df = pd.DataFrame(rows)
    print_groups("vidur: AIConfigurator GEMMs vs Vidur's measured GEMMs, by model and GPU", df, ["model", "gpu"])
    print_groups("vidur: by op and token count", df, ["op", "tokens"])


def _split(points: list[ProfilePoint]) -> tuple[list[ProfilePoint], list[ProfilePoint]]:
    """Alternate distinct shapes (sorted) between the fit half and the held-back half."""
    shapes = sorted({(p.kind, p.num_seqs, p.new_tokens, p.context_tokens) for p in points})
    fit_shapes = set(shapes[::2])
    fit = [p for p in points if (p.kind, p.num_seqs, p.new_tokens, p.context_tokens) in fit_shapes]
    return fit, [p for p in points if p not in fit]


def _errors(latency, points: list[ProfilePoint], **tags) -> list[dict]:
    return [{**tags, "phase": p.kind if p.kind == "prefill" else f"decode b{'<16' if p.num_seqs < 16 else '>=16'}",
             "err": predict_s(latency, p) / p.latency_s - 1} for p in points]


def section_splitwise(data_dir: str) -> None:
    path = resolve_data_path(SPLITWISE, data_dir)
    if not path.is_file():
        print(f"\nsplitwise: skipped ({path} not found)")
        return
    llama = catalog.load_model("llama2_70b")
    bare_rows, held_rows = [], []
    for hw, table_hw in (("a100_80g", "a100-80gb"), ("h100", "h100-80gb")):
        h = catalog.load_hardware(hw)
        by_tp = {tp: read_splitwise_csv(path, "llama2-70b", table_hw, tp) for tp in (2, 4, 8)}
        bloom_pts = read_splitwise_csv(path, "bloom-176b", table_hw, 8)
        ops = {tp: build_latency_model(BARE, llama, h, tp) for tp in by_tp}
        bloom_ops = build_latency_model(BARE, BLOOM, h, 8)
        for tp, pts in by_tp.items():
            bare_rows += _errors(ops[tp], pts, hw=hw, model=f"llama2-70b/tp{tp}")
        bare_rows += _errors(bloom_ops, bloom_pts, hw=hw, model="bloom-176b/tp8")
        fit_pts = {tp: _split(pts) for tp, pts in by_tp.items()}
        fit = fit_engine([(ops[tp], p) for tp in by_tp for p in fit_pts[tp][0]])
        print(f"\nsplitwise {hw}: engine fit on half the Llama-2-70B shapes: "
              + json.dumps({k: round(v, 5) for k, v in fit.perf_fields().items()}))
        for tp in by_tp:
            held_rows += _errors(fit.apply(ops[tp]), fit_pts[tp][1], hw=hw, model=f"llama2-70b/tp{tp}")
        held_rows += _errors(fit.apply(bloom_ops), bloom_pts, hw=hw, model="bloom-176b/tp8 (unseen)")
    print_groups("splitwise: bare composed model (SGLang tables, no overhead) vs vLLM-2023 steps",
                 pd.DataFrame(bare_rows), ["hw", "model"])
    held = pd.DataFrame(held_rows)
    print_groups("splitwise: engine fit, held-back rows, by model", held, ["hw", "model"])
    print_groups("splitwise: engine fit, held-back rows, by phase", held, ["hw", "phase"])


def _distserve_points(data_dir: str, hf_name: str, tp: int) -> list[ProfilePoint]:
    formula = load_fitted(resolve_data_path(DISTSERVE, data_dir), hf_name, tp)
    pts = [ProfilePoint("prefill", b, b * n, 0, formula.prefill_time_s([(n, 0)] * b))
           for b in (1, 4) for n in (128, 256, 512, 1024, 2048)]
    pts += [ProfilePoint("decode", b, b * c, b * c, formula.decode_time_s(b, b * c))
            for b in (1, 4, 16, 64, 128) for c in (256, 1024, 2048)]
    return pts


def section_distserve(data_dir: str) -> None:
    if not resolve_data_path(DISTSERVE, data_dir).is_file():
        print("\ndistserve: skipped (calibration JSON not found)")
        return
    h = catalog.load_hardware("a100_80g")
    setups = {"opt-13b/tp1": ("opt_13b", "facebook/opt-13b", 1), "opt-66b/tp4": ("opt_66b", "facebook/opt-66b", 4)}
    pts = {k: _distserve_points(data_dir, hf, tp) for k, (_, hf, tp) in setups.items()}
    ops = {k: build_latency_model(BARE, catalog.load_model(m), h, tp) for k, (m, _, tp) in setups.items()}
    bare = pd.DataFrame([r for k in setups for r in _errors(ops[k], pts[k], model=k)])
    print_groups("distserve: bare composed model vs DistServe's A100 formula", bare, ["model", "phase"])
    fit = fit_engine([(ops["opt-13b/tp1"], p) for p in pts["opt-13b/tp1"]])
    print("distserve: engine fit on OPT-13B: " + json.dumps({k: round(v, 5) for k, v in fit.perf_fields().items()}))
    held = pd.DataFrame(_errors(fit.apply(ops["opt-66b/tp4"]), pts["opt-66b/tp4"], model="opt-66b/tp4 (unseen)"))
    print_groups("distserve: engine fit on OPT-13B, held-back OPT-66B", held, ["model", "phase"])


def section_llama70b(data_dir: str) -> None:
    path = resolve_data_path(SPLITWISE, data_dir)
    if not path.is_file():
        return
    model = catalog.load_model("llama2_70b")
    queries = (("prefill 1k", "prefill", 1, 1024), ("prefill 8k", "prefill", 1, 8192),
               ("decode b1 @ 2k", "decode", 1, 2048 + 64), ("decode b64 @ 576", "decode", 64, 512 + 64))
    for hw, table_hw in (("a100_80g", "a100-80gb"), ("h100", "h100-80gb")):
        h = catalog.load_hardware(hw)
        pts = read_splitwise_csv(path, "llama2-70b", table_hw, 8)
        fit = fit_engine([(build_latency_model(BARE, model, h, 8), p) for p in _split(pts)[0]])
        models: dict[str, Callable] = {
            "roofline": RooflineModel(model, h, 8),
            "measured": build_latency_model(BARE, model, h, 8),
            "measured+fit": fit.apply(build_latency_model(BARE, model, h, 8)),
        }
        print(f"\nLlama-2-70B TP8 on {hw}: ms (error vs Splitwise's median)")
        print("| step | Splitwise | " + " | ".join(models) + " |\n|---|---:|" + "---:|" * len(models))
        for label, phase, b, t in queries:
            key = "new_tokens" if phase == "prefill" else "context_tokens"
            hits = [p.latency_s for p in pts if p.kind == phase and p.num_seqs == b and getattr(p, key) == b * t]
            ref = float(np.median(hits))
            cells = [f"{_step(m, phase, b, t) * 1e3:.1f} ({(_step(m, phase, b, t) / ref - 1) * 100:+.0f}%)"
                     for m in models.values()]
            print(f"| {label} | {ref * 1e3:.1f} | " + " | ".join(cells) + " |")


SECTIONS = ("ops", "engines", "vidur", "splitwise", "distserve", "llama70b")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="", help="shared data dir (default ../shared/data)")
    parser.add_argument("--section", nargs="*", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args(argv)
    for name in args.section:
        if name in ("ops", "engines", "vidur"):
            {"ops": section_ops, "engines": section_engines, "vidur": section_vidur}[name]()
        else:
            {"splitwise": section_splitwise, "distserve": section_distserve,
             "llama70b": section_llama70b}[name](args.data_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
