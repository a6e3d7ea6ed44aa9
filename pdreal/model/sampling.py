"""Greedy and temperature/top-p sampling.

Randomness is counter-based: token k of a request is drawn from a generator seeded with
(seed, k), so the prefill instance (token 0) and the decode instance (tokens 1..) together draw
exactly what one process would. The router gives a request that names no seed a fresh random one
(`fresh_seed`), so unseeded requests differ from call to call and seeded ones repeat.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch only where tokens are drawn: the HTTP and router processes check params
    import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)
    # -1: no logprobs; k >= 0: each output token's logprob and the k most likely tokens' (MAX_TOP_LOGPROBS)
    logprobs: int = -1
    # -1: none; k >= 0: each prompt token's logprob (given the tokens before it) and the k most
    # likely tokens' there (echo + logprobs); computed by the prefill forward, never from the prefix cache
    prompt_logprobs: int = -1

    def __post_init__(self) -> None:
        """Every value a client can send is checked here, so no request reaches an engine with a
        value that fails inside a step (ValueError naming the field and value)."""
        if not _is_int(self.max_new_tokens) or self.max_new_tokens < 1:
            raise ValueError(f"field 'max_new_tokens' must be an integer >= 1, got {self.max_new_tokens!r}")
        if not _is_number(self.temperature) or not 0 <= self.temperature <= MAX_TEMPERATURE:
            raise ValueError(f"field 'temperature' must be a number in [0, {MAX_TEMPERATURE:g}], got {self.temperature!r}")
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"field 'top_p' must be a number in (0, 1], got {self.top_p!r}")
        if not _is_int(self.seed) or not 0 <= self.seed < SEED_LIMIT:
            raise ValueError(f"field 'seed' must be an integer in [0, 2**63), got {self.seed!r}")
        if not isinstance(self.ignore_eos, bool):
            raise ValueError(f"field 'ignore_eos' must be true or false, got {self.ignore_eos!r}")
        if not _is_int(self.logprobs) or not -1 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"field 'logprobs' must be an integer in [-1, {MAX_TOP_LOGPROBS}], got {self.logprobs!r}")
        if not _is_int(self.prompt_logprobs) or not -1 <= self.prompt_logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"field 'prompt_logprobs' must be an integer in [-1, {MAX_TOP_LOGPROBS}], "
                             f"got {self.prompt_logprobs!r}")
        bad = next((t for t in self.stop_token_ids if not _is_int(t) or t < 0), None)
        if bad is not None:
            raise ValueError(f"field 'stop_token_ids': {bad!r} is not a token id (an integer >= 0)")


MAX_TEMPERATURE = 100.0
MAX_TOP_LOGPROBS = 20  # OpenAI chat's top_logprobs limit
SEED_LIMIT = 1 << 63
GREEDY_BELOW = 1e-5  # temperatures under this sample greedily (logits / t would overflow)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def fresh_seed() -> int:
    """A seed from the OS's entropy, for a request that names none."""
    return secrets.randbits(63)


def token_generator(seed: int, token_index: int, device: torch.device | str = "cpu") -> torch.Generator:
    import numpy as np
    import torch

    state = int(np.random.SeedSequence([seed, token_index]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator(device=device).manual_seed(state & ((1 << 63) - 1))


def sample_one(logits: torch.Tensor, params: SamplingParams, token_index: int) -> int:
    """One token from a [vocab] fp32 logits row."""
    import torch

    if params.temperature < GREEDY_BELOW:
        return int(torch.argmax(logits))
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_probs, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(sorted_probs, dim=-1) - sorted_probs < params.top_p
        probs = torch.zeros_like(probs).scatter_(0, order[keep], sorted_probs[keep])
    choice = torch.multinomial(probs, 1, generator=token_generator(params.seed, token_index, probs.device))
    return int(choice)


def sample(logits: torch.Tensor, params: list[SamplingParams], token_indices: list[int]) -> list[int]:
    """One token per row of [batch, vocab] logits; rows that are all greedy use one argmax."""
    import torch

    if all(p.temperature < GREEDY_BELOW for p in params):
        return torch.argmax(logits, dim=-1).tolist()
    return [sample_one(row, p, k) for row, p, k in zip(logits, params, token_indices, strict=True)]


def token_logprobs(logits: torch.Tensor, tokens: list[int], params: list[SamplingParams]) -> list[list[Any] | None]:
    """Per row asking for them (params.logprobs >= 0): [logprob of the chosen token, [[token id,
    logprob], ...] of the params.logprobs most likely]; None for the other rows. Logprobs are the
    model's log-softmax of the raw logits: before temperature and top-p (what vLLM returns by
    default), so they do not depend on the sampling settings."""
    import torch

    out: list[list[Any] | None] = [None] * len(tokens)
    rows = [i for i, p in enumerate(params) if p.logprobs >= 0]
    if not rows:
        return out
    logp = torch.log_softmax(logits[rows].float(), dim=-1)
    top_k = max(params[i].logprobs for i in rows)
    top_values, top_ids = torch.topk(logp, top_k, dim=-1) if top_k else (logp[:, :0], logp[:, :0])
    for j, i in enumerate(rows):
        k = params[i].logprobs
        top = [[int(t), float(v)] for t, v in zip(top_ids[j, :k].tolist(), top_values[j, :k].tolist(),
                                                  strict=True)] if k else []
        out[i] = [float(logp[j, tokens[i]]), top]
    return out



def logprob_entries(logits: torch.Tensor, targets: list[int], top_k: int) -> list[list[Any]]:
    """Per row of [rows, vocab] logits: [logprob of its target token, [[token id, logprob], ...] of
    the top_k most likely], from the log-softmax of the raw logits (before temperature and top-p,
    as token_logprobs). A prompt's rows: position i's target is prompt token i + 1."""
    import torch

    logp = torch.log_softmax(logits.float(), dim=-1)
    chosen = logp.gather(1, torch.tensor(targets, dtype=torch.long, device=logp.device)[:, None])[:, 0].tolist()
    if not top_k:
        return [[value, []] for value in chosen]
    values, ids = torch.topk(logp, top_k, dim=-1)
    return [[value, [[int(t), float(v)] for t, v in zip(row_ids, row_values, strict=True)]]
            for value, row_ids, row_values in zip(chosen, ids.tolist(), values.tolist(), strict=True)]


def prompt_chunk_logprobs(logits: torch.Tensor, prompt_ids: tuple[int, ...], start: int, top_k: int) -> list[list[Any]]:
    """The logprob entries of prompt tokens start + 1 .. start + rows (those that exist) from the
    logits [rows, vocab] of a prompt chunk's tokens at positions start .. start + rows - 1."""
    targets = list(prompt_ids[start + 1:start + 1 + logits.shape[0]])
    return logprob_entries(logits[:len(targets)], targets, top_k) if targets else []
