"""Single-process generation (no disaggregation, no policy): the reference PD output must equal.

Every prompt is prefilled whole in one ragged batch, then all sequences decode together until
each reaches max_new_tokens or EOS. Pages for prompt + output are allocated up front and freed
at the end.
"""

from __future__ import annotations

from pdreal.engine.common import ModelRunner, stop_reached
from pdreal.model.batch import SeqChunk
from pdreal.model.sampling import SamplingParams, sample
from pdsim.policy.views import pages_for


def generate(runner: ModelRunner, prompts: list[list[int]], sampling: list[SamplingParams]) -> list[list[int]]:
    """Output token ids per prompt (EOS included when produced)."""
    if len(prompts) != len(sampling):
        raise ValueError(f"{len(prompts)} prompts but {len(sampling)} sampling params")
    page, allocator = runner.page_size_tokens, runner.pool.allocator
    eos = set(runner.model.spec.eos_token_ids)
    tables = [allocator.allocate(pages_for(len(p) + s.max_new_tokens, page))
              for p, s in zip(prompts, sampling, strict=True)]
    try:
        logits = runner.forward([SeqChunk(list(p), 0, t) for p, t in zip(prompts, tables, strict=True)])
        outputs = [[tok] for tok in sample(logits, sampling, [0] * len(prompts))]
        live = [i for i in range(len(prompts)) if not stop_reached(outputs[i], sampling[i], eos)]
        while live:
            chunks = [SeqChunk([outputs[i][-1]], len(prompts[i]) + len(outputs[i]) - 1, tables[i]) for i in live]
            logits = runner.forward(chunks)
            tokens = sample(logits, [sampling[i] for i in live], [len(outputs[i]) for i in live])
            for i, token in zip(live, tokens, strict=True):
                outputs[i].append(token)
            live = [i for i in live if not stop_reached(outputs[i], sampling[i], eos)]
        return outputs
    finally:
        for table in tables:
            allocator.free(table)
