"""What tokenizing a prompt costs the serving frontend: seconds a prompt token, for the prompts the
silicon rows' benchmark clients send (pdsim's `cluster.tokenize_s_per_token`).

Every silicon row's client sends text, and the engine's frontend tokenizes it on one thread before
the scheduler sees the request (vLLM's API server: a one-worker executor; SGLang: the
TokenizerManager's event loop), so the time is on the path to the first token. Two prompt recipes:

- **inferencex**: InferenceX's `benchmark_serving.py --dataset-name random`: the token ids
  (offset + i + j) mod vocab, decoded to text and tokenized again (what the server then does);
- **aiperf**: natural text (AIPerf's synthetic prompts are corpus text); here this checkout's docs.

The tokenizer is SmolLM2's byte-level BPE of 49 k tokens (pdreal's, from its GGUF): the only one
on these machines, a stand-in for the served models' (vocabularies of 129-248 k tokens). The time
is this machine's CPU, not the GPU hosts'. Prints a table; `--json` writes it too.

    .venv/bin/python benchmarks/tokenize_cost.py [--repeats 9] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from pdsim.rng import stream

LENGTHS_TOKENS = (1024, 8192)
DOCS = Path(__file__).resolve().parent.parent / "docs"


def inferencex_prompt(tokenizer: Any, length_tokens: int, offset: int) -> str:
    vocab = tokenizer.get_vocab_size()
    return str(tokenizer.decode([(offset + j) % vocab for j in range(length_tokens)]))


def natural_prompt(tokenizer: Any, corpus_ids: list[int], length_tokens: int, offset: int) -> str:
    start = offset % max(1, len(corpus_ids) - length_tokens)
    return str(tokenizer.decode(corpus_ids[start:start + length_tokens]))


def seconds_per_token(tokenizer: Any, prompt: str) -> float:
    began = time.perf_counter()
    tokens = len(tokenizer.encode(prompt, add_special_tokens=False).ids)
    return (time.perf_counter() - began) / max(1, tokens)


def measure(tokenizer: Any, repeats: int, seed: int = 0) -> list[dict[str, Any]]:
    """Median seconds a token over `repeats` prompts of each recipe and length."""
    offsets = stream(seed, "tokenize_cost.offsets")
    corpus = " ".join(p.read_text() for p in sorted(DOCS.glob("*.md")))
    corpus_ids = list(tokenizer.encode(corpus, add_special_tokens=False).ids)
    rows = []
    for recipe in ("inferencex", "aiperf"):
        for length in LENGTHS_TOKENS:
            samples = []
            for _ in range(repeats):
                offset = int(offsets.integers(0, 1 << 30))
                prompt = (inferencex_prompt(tokenizer, length, offset) if recipe == "inferencex"
                          else natural_prompt(tokenizer, corpus_ids, length, offset))
                samples.append(seconds_per_token(tokenizer, prompt))
            rows.append({"recipe": recipe, "prompt_tokens": length, "us_per_token": 1e6 * statistics.median(samples),
                         "min_us_per_token": 1e6 * min(samples), "repeats": repeats})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9, help="prompts per (recipe, length); the median is kept")
    parser.add_argument("--json", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    from pdreal.serving.api import load_tokenizer

    rows = measure(load_tokenizer("smollm2"), args.repeats)
    print(f"{'recipe':<11} {'tokens':>6} {'us/token (median)':>18} {'min':>6}")
    for r in rows:
        print(f"{r['recipe']:<11} {r['prompt_tokens']:>6} {r['us_per_token']:>18.2f} {r['min_us_per_token']:>6.2f}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
