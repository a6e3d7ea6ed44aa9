"""Check 2: pdreal's step profile on the device, side by side with pdsim's `perf=measured`.

    python benchmarks/gpu/check_profile.py --device cuda --shape gpu --attention torch --out DIR

Times pdreal's forward (+ greedy sampling) over the shape's grid with `pdreal profile`'s own timer
(pdreal.profile.profile_runner: a warm-up round, then interleaved rounds, median per cell) on
seeded random weights: fresh prefills of 128 .. 8,192 tokens, decode batches of 1 .. 256
sequences at 512 .. 8,192 tokens of context each; cells whose KV exceeds the shape's budget are
skipped and listed. For each cell, on CUDA, one more forward runs under torch.profiler: the sum of
its kernels' device time is the GPU-busy time, and wall minus busy is pdreal's engine overhead
(Python, launches, host-device copies; pdreal has no CUDA graphs).

pdsim's prediction of each cell is `perf=measured hardware=h200 model=<sim model>` (the composed
per-operator tables, GPU time only). Errors are (pdsim - pdreal) / pdreal against the whole step
and against the GPU-busy time.

Writes profile.csv (pdsim's table format: `pdsim run perf=table perf.path=...`) and
profile_vs_measured.csv; prints the CHECK_RESULT line. No correctness verdict: it informs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import SHAPES, Shape, emit, markdown_table  # noqa: E402

COLUMNS = ["kind", "num_seqs", "new_tokens", "context_tokens", "pdreal_s", "gpu_busy_s", "measured_s",
           "error", "kernel_error", "overhead_share"]


def grids(shape: Shape) -> tuple[list[Any], list[str]]:
    """pdreal ProfileGrids covering the shape's cells within its KV budget, and the cells skipped."""
    from pdreal.profile import ProfileGrid

    out, skipped = [], []
    for ctx in shape.decode_context:
        seqs = tuple(s for s in shape.decode_seqs if s * (ctx + 1) <= shape.kv_budget_tokens)
        skipped += [f"decode {s}x{ctx}" for s in shape.decode_seqs if s not in seqs]
        if seqs:  # prefill cells ride in the first grid only (a grid needs one, so later ones repeat the smallest)
            prefill = shape.prefill_tokens if not out else shape.prefill_tokens[:1]
            out.append(ProfileGrid(prefill_seqs=(1,), prefill_tokens=prefill, chunk_tokens=(), chunk_context=(),
                                   decode_seqs=seqs, decode_context=(ctx,), repeats=shape.repeats))
    return out, skipped


def busy_s(runner: Any, point: Any) -> float:
    """Device time of one forward of `point`'s batch, summed over its kernels (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from pdreal.model.batch import SeqChunk
    from pdsim.policy.views import pages_for

    seqs, new, ctx = point.num_seqs, point.new_tokens // point.num_seqs, point.context_tokens // point.num_seqs
    tables = [runner.pool.allocator.allocate(pages_for(ctx + new, runner.page_size_tokens)) for _ in range(seqs)]
    chunks = [SeqChunk([(7 * i + j) % 1000 for j in range(new)], ctx, t) for i, t in enumerate(tables)]
    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            runner.forward(chunks).argmax(-1).tolist()
            torch.cuda.synchronize()
    finally:
        for table in tables:
            runner.pool.allocator.free(table)
    total_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0.0))
                   for e in prof.key_averages())
    return total_us / 1e6


def measured_model(shape: Shape) -> Any:
    from analysis.fidelity.loop import compose
    from pdsim.perf import build_latency_model

    cfg = compose(["perf=measured", "hardware=h200", f"model={shape.sim_model}", *shape.sim_model_overrides])
    return build_latency_model(cfg.perf, cfg.model, cfg.hardware, 1, cfg.data_dir)


def profile(shape: Shape, device: str, attention: str) -> tuple[list[Any], Any]:
    """(pdreal profile points, the runner) over every grid of the shape."""
    import torch

    from pdreal.engine.common import EngineConfig, ModelRunner
    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import random_model, torch_dtype
    from pdreal.profile import profile_runner

    page = 16
    shape_grids, _ = grids(shape)
    pages = max(g.pages_needed(page) for g in shape_grids)
    torch.manual_seed(0)
    model = random_model(catalog_spec(shape.serve_model), seed=0, dtype=torch_dtype(shape.dtype), device=device)
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the fp32 weights random_model made first: room for the KV pool
    runner = ModelRunner(model, EngineConfig(num_pages=pages, page_size_tokens=page, attention=attention,
                                             dtype=shape.dtype, device=device))
    points, seen = [], set()
    for grid in shape_grids:
        for point in profile_runner(runner, grid):
            key = (point.kind, point.num_seqs, point.new_tokens, point.context_tokens)
            if key not in seen:
                seen.add(key)
                points.append(point)
    return points, runner


def compare(points: list[Any], runner: Any, shape: Shape, device: str) -> list[dict[str, Any]]:
    model = measured_model(shape)
    rows = []
    for p in points:
        busy = busy_s(runner, p) if device.startswith("cuda") else float("nan")
        if p.kind == "prefill":
            predicted = model.prefill_time_s([(p.new_tokens // p.num_seqs, 0)] * p.num_seqs)
        else:
            predicted = model.decode_time_s(p.num_seqs, p.context_tokens)
        rows.append({"kind": p.kind, "num_seqs": p.num_seqs, "new_tokens": p.new_tokens,
                     "context_tokens": p.context_tokens, "pdreal_s": p.latency_s, "gpu_busy_s": busy,
                     "measured_s": predicted, "error": predicted / p.latency_s - 1,
                     "kernel_error": predicted / busy - 1 if busy > 0 else float("nan"),
                     "overhead_share": 1 - busy / p.latency_s})
    return rows


def headline(rows: list[dict[str, Any]], skipped: list[str]) -> str:
    lines = []
    for kind in ("prefill", "decode"):
        part = [r for r in rows if r["kind"] == kind]
        if part:
            med = statistics.median(abs(r["error"]) for r in part)
            kern = [abs(r["kernel_error"]) for r in part if r["kernel_error"] == r["kernel_error"]]
            over = [r["overhead_share"] for r in part if r["overhead_share"] == r["overhead_share"]]
            lines.append(f"- {kind}: {len(part)} cells; median |pdsim/pdreal - 1| {100 * med:.1f}%"
                         + (f"; vs GPU-busy time {100 * statistics.median(kern):.1f}%" if kern else "")
                         + (f"; engine overhead median {100 * statistics.median(over):.0f}% of the step" if over else ""))
    if skipped:
        lines.append(f"- skipped (KV over the budget): {', '.join(skipped)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpu", help="gpu (H200) or tiny (CPU dry run)")
    p.add_argument("--attention", default="torch", choices=["torch", "flashinfer"],
                   help="pdreal attention backend of the profiled engine")
    p.add_argument("--out", type=Path, required=True, help="folder for profile.csv and profile_vs_measured.csv")
    args = p.parse_args(argv)
    import csv

    from pdsim.perf.profile import write_profile_csv

    shape = SHAPES[args.shape]
    points, runner = profile(shape, args.device, args.attention)
    write_profile_csv(args.out / "profile.csv", points)
    rows = compare(points, runner, shape, args.device)
    with (args.out / "profile_vs_measured.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    _, skipped = grids(shape)
    summary = (f"attention {args.attention}, {shape.dtype}, model {shape.serve_model}\n\n"
               + markdown_table(rows, COLUMNS) + "\n\n" + headline(rows, skipped))
    emit("ok", summary, cells=len(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
