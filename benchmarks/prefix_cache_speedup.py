"""Prefill time with the radix prefix cache on vs off, on the real engine (CPU).

Requests share a system prompt and differ in a suffix; each is prefilled alone (one after the
other, on one PrefillEngine with the `fake` transfer backend, so the KV "leaves" at once and the
prompt pages stay cached). Every request after the first hits the system prompt's full pages with
the cache on. Prints, per mode, the median prefill time (the engine's timed forwards) and the
wall time from add to finish of the requests that can hit, and the speed-up; on/off runs are
interleaved (off, on, off, on, ...) so machine load affects both alike.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache_speedup.py --model smollm2
    PYTHONPATH=$PWD .venv/bin/python benchmarks/prefix_cache_speedup.py --model llama3_8b --layers 4
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch

from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner
from pdreal.engine.prefill import PrefillEngine
from pdreal.model.sampling import SamplingParams
from pdreal.transfer.fake import FakeKVManager


def load(name: str, layers: int) -> object:
    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import load_smollm2, random_model

    if name == "smollm2":
        return load_smollm2().model
    spec = catalog_spec(name)
    return random_model(replace(spec, num_layers=layers) if layers else spec, seed=0)


def prompts(vocab: int, system_tokens: int, suffix_tokens: int, n: int, seed: int) -> list[tuple[int, ...]]:
    gen = torch.Generator().manual_seed(seed)
    system = torch.randint(10, vocab, (system_tokens,), generator=gen).tolist()
    return [tuple(system + torch.randint(10, vocab, (suffix_tokens,), generator=gen).tolist()) for _ in range(n)]


def run(model: object, cache: bool, batch: list[tuple[int, ...]], page: int) -> list[tuple[float, float, int]]:
    """(forward seconds, wall seconds, cached tokens) per request, prefilled one at a time."""
    total = len(batch[0])
    cfg = EngineConfig(num_pages=4 * len(batch) * (total // page + 1), page_size_tokens=page,
                       chunk_size_tokens=0, max_prefill_tokens=total, prefix_cache=cache)
    engine = PrefillEngine(ModelRunner(model, cfg), FakeKVManager(), cfg)
    out = []
    for i, prompt in enumerate(batch):
        steps_before = len(engine.runner.steps)
        start = time.perf_counter()
        engine.add_request(EngineRequest(i, prompt, SamplingParams(max_new_tokens=1), bootstrap_room=i))
        rows = []
        while not rows:
            rows = [o.row for o in engine.step() if o.finished]
        wall = time.perf_counter() - start
        forward = sum(s.latency_s for s in list(engine.runner.steps)[steps_before:])
        out.append((forward, wall, rows[0]["cached_prefix_tokens"]))
    engine.check_invariants()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", help="smollm2 or a catalog name (random weights)")
    ap.add_argument("--layers", type=int, default=0, help="catalog model: keep this many layers (0 = all)")
    ap.add_argument("--system-tokens", type=int, default=1024)
    ap.add_argument("--suffix-tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--page", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model = load(args.model, args.layers)
    batch = prompts(model.spec.vocab_size, args.system_tokens, args.suffix_tokens, args.requests, seed=1)
    run(model, False, batch[:2], args.page)  # warm-up
    results: dict[bool, list[tuple[float, float, int]]] = {False: [], True: []}
    for _ in range(args.repeats):
        for cache in (False, True):
            results[cache] += run(model, cache, batch, args.page)[1:]  # requests that can hit
    print(f"model {args.model}, prompt {args.system_tokens} shared + {args.suffix_tokens} own tokens, "
          f"{args.requests - 1} hitting requests x {args.repeats} repeats, threads {args.threads}")
    print("| cache | cached tokens | prefill forward ms (median) | add-to-finish ms (median) |")
    print("|---|---:|---:|---:|")
    med = {}
    for cache in (False, True):
        rows = results[cache]
        med[cache] = (statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows))
        print(f"| {'on' if cache else 'off'} | {statistics.median(r[2] for r in rows):.0f} | "
              f"{1e3 * med[cache][0]:,.1f} | {1e3 * med[cache][1]:,.1f} |")
    print(f"speed-up: forward {med[False][0] / med[True][0]:.1f}x, add-to-finish {med[False][1] / med[True][1]:.1f}x")


if __name__ == "__main__":
    main()
