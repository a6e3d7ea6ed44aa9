"""Check 1: attention backends on the device against the CPU reference, and greedy tokens CPU = device.

    python benchmarks/gpu/check_kernels.py --device cuda --shape gpu --out DIR

Attention (pdreal's backend contract, pdreal/attention/base.py): random q/k/v over a pool whose
pages already hold random history, for a fresh prefill batch, a chunked prefill after cached
prefixes, a ragged decode batch and a mixed batch (prefill chunks + decodes), page tables out of
order. The reference is the torch backend on CPU in fp32; each device backend (torch in fp32 and
bf16, flashinfer in bf16 when it imports and JIT-compiles) must match it: relative error of the
output below 1e-4 in fp32, 2e-2 in bf16, and the K/V it wrote into the pool equal. Flashinfer's
first plan + run per batch kind is timed: that is its JIT (cached afterwards).

Greedy: random fp32 weights at the shape's greedy model (SmolLM2-135M's on the GPU), three
prompts, N greedy tokens each through pdreal's ModelRunner on CPU and on the device: the tokens
must be equal, except after a step whose CPU top-2 logit margin is below 1e-3 (a tie the
hardware may break either way: reported, not failed).

Writes kernels.csv; prints the CHECK_RESULT line (shapes.emit).
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shapes import SHAPES, emit, markdown_table  # noqa: E402

PAGE, HEADS, KV_HEADS, HEAD_DIM, PAGES = 16, 8, 2, 128, 64
TOLERANCE = {"fp32": 1e-4, "bf16": 2e-2}
TIE_MARGIN = 1e-3
T = [[3, 9, 4, 40], [17, 2, 30, 11, 50], [6, 5, 41], [20, 21, 22, 23, 24, 25], [0, 12, 13], [7, 8, 44]]


def batches() -> dict[str, list[Any]]:
    from pdreal.model.batch import SeqChunk

    def ids(n: int, seed: int) -> list[int]:
        return [(seed * 31 + 7 * i) % 1000 for i in range(n)]

    return {
        "prefill_fresh": [SeqChunk(ids(40, 1), 0, T[0]), SeqChunk(ids(7, 2), 0, T[1]), SeqChunk(ids(33, 3), 0, T[2])],
        "prefill_chunked": [SeqChunk(ids(20, 4), 37, T[1]), SeqChunk(ids(16, 5), 64, T[3]), SeqChunk(ids(9, 6), 3, T[4])],
        "decode_ragged": [SeqChunk([5], c, t) for c, t in zip((50, 1, 40, 17, 30, 45), T, strict=True)],
        "mixed": [SeqChunk(ids(24, 7), 0, T[0]), SeqChunk(ids(12, 8), 20, T[2]), SeqChunk([9], 70, T[1]),
                  SeqChunk([3], 33, T[4])],
    }


def attend(backend_name: str, device: str, dtype: Any, chunks: list[Any]) -> tuple[Any, Any, float]:
    """(output, pool buffer, seconds of plan + forward) on `device`, inputs identical everywhere."""
    import torch

    from pdreal.attention import make_backend
    from pdreal.kv.pool import KVLayout, KVPool
    from pdreal.model.batch import ForwardBatch

    gen = torch.Generator().manual_seed(0)
    batch = ForwardBatch.build(chunks, PAGE, device)
    q, k, v = (torch.randn(batch.num_tokens, h, HEAD_DIM, generator=gen) for h in (HEADS, KV_HEADS, KV_HEADS))
    pool = KVPool(KVLayout(1, PAGES, PAGE, KV_HEADS, HEAD_DIM, torch.empty((), dtype=dtype).element_size()),
                  dtype, device)
    pool.buffer.copy_(torch.randn(pool.buffer.shape, generator=gen).to(dtype))
    backend = make_backend(backend_name, device)
    start = time.perf_counter()
    backend.plan(batch, HEADS, KV_HEADS, HEAD_DIM, dtype)
    out = backend.forward(0, *(x.to(device, dtype) for x in (q, k, v)), pool)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return out.float().cpu(), pool.buffer.float().cpu(), time.perf_counter() - start


def attention_rows(device: str) -> tuple[list[dict[str, Any]], str]:
    """One row per (backend, dtype, batch kind); the second value says why flashinfer did not run."""
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    variants = [("torch", "fp32"), ("torch", "bf16")] + ([("flashinfer", "bf16")] if device.startswith("cuda") else [])
    rows, flashinfer_note = [], "" if device.startswith("cuda") else "not on CPU"
    for kind, chunks in batches().items():
        ref, ref_pool, _ = attend("torch", "cpu", torch.float32, chunks)
        for backend, dtype_name in variants:
            try:
                out, pool, seconds = attend(backend, device, dtypes[dtype_name], chunks)
            except Exception as exc:  # flashinfer missing or its JIT failing is a finding, not a crash
                if backend != "flashinfer":
                    raise
                flashinfer_note = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]
                variants = [v for v in variants if v[0] != "flashinfer"]
                continue
            rel = float((out - ref).norm() / ref.norm())
            pool_rel = float((pool - ref_pool).norm() / ref_pool.norm())
            ok = rel < TOLERANCE[dtype_name] and pool_rel < TOLERANCE[dtype_name]
            rows.append({"check": "attention", "backend": backend, "dtype": dtype_name, "case": kind,
                         "rel_error": rel, "pool_rel_error": pool_rel, "tolerance": TOLERANCE[dtype_name],
                         "seconds": seconds, "ok": ok})
    return rows, flashinfer_note


def greedy_tokens(model_name: str, device: str, prompts: list[list[int]], steps: int) -> list[list[int]]:
    import torch

    from pdreal.engine.common import EngineConfig, ModelRunner
    from pdreal.engine.generate import generate
    from pdreal.model.sampling import SamplingParams
    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import random_model

    # Built on the CPU and moved: a CUDA generator draws other weights from the same seed.
    model = random_model(catalog_spec(model_name), seed=0, dtype=torch.float32, device="cpu").to(device)
    runner = ModelRunner(model, EngineConfig(num_pages=64, page_size_tokens=PAGE, device=device))
    params = [SamplingParams(max_new_tokens=steps, temperature=0.0, ignore_eos=True)] * len(prompts)
    return generate(runner, prompts, params)


def greedy_row(model_name: str, device: str, steps: int) -> dict[str, Any]:
    import torch

    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import random_model

    vocab = catalog_spec(model_name).vocab_size
    prompts = [[(97 * p + 13 * i) % vocab for i in range(n)] for p, n in enumerate((24, 57, 9))]
    cpu = greedy_tokens(model_name, "cpu", prompts, steps)
    dev = greedy_tokens(model_name, device, prompts, steps)
    mismatches, ties = [], []
    for p, (a, b) in enumerate(zip(cpu, dev, strict=True)):
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), -1)
        if at < 0:
            continue
        model = random_model(catalog_spec(model_name), seed=0, dtype=torch.float32, device="cpu")
        top2 = model.forward_dense(prompts[p] + a[:at])[-1].topk(2).values
        margin = float(top2[0] - top2[1])
        (ties if margin < TIE_MARGIN else mismatches).append(f"prompt {p} token {at} (margin {margin:.2g})")
    return {"check": "greedy", "backend": "torch", "dtype": "fp32", "case": f"{model_name} {len(prompts)}x{steps}",
            "rel_error": float(len(mismatches)), "pool_rel_error": float("nan"), "tolerance": 0.0,
            "seconds": float("nan"), "ok": not mismatches,
            "note": "; ".join(mismatches + [f"tie: {t}" for t in ties]) or "equal"}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="device of the checked backends (cuda, or cpu for a dry run)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpu", help="gpu (H200) or tiny (CPU dry run)")
    p.add_argument("--out", type=Path, required=True, help="folder for kernels.csv")
    args = p.parse_args(argv)
    shape = SHAPES[args.shape]
    rows, flashinfer_note = attention_rows(args.device)
    rows.append(greedy_row(shape.greedy_model, args.device, shape.greedy_tokens))
    columns = ["check", "backend", "dtype", "case", "rel_error", "pool_rel_error", "tolerance", "seconds", "ok", "note"]
    with (args.out / "kernels.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    failed = [r for r in rows if not r["ok"]]
    flashinfer_ok = any(r["backend"] == "flashinfer" for r in rows) and not any(
        r["backend"] == "flashinfer" and not r["ok"] for r in rows)
    note = "flashinfer: " + ("matched the reference" if flashinfer_ok else f"not run ({flashinfer_note})")
    summary = markdown_table(rows, columns) + "\n\n" + note
    emit("fail" if failed else "ok", summary, flashinfer_ok=flashinfer_ok, failed=len(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
