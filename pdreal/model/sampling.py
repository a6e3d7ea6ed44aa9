"""Greedy and temperature/top-p sampling.

Randomness is counter-based: token k of a request is drawn from a generator seeded with
(seed, k), so the prefill instance (token 0) and the decode instance (tokens 1..) together draw
exactly what one process would.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0  # 0 = greedy
    top_p: float = 1.0
    seed: int = 0
    ignore_eos: bool = False
    stop_token_ids: tuple[int, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def token_generator(seed: int, token_index: int, device: torch.device | str = "cpu") -> torch.Generator:
    state = int(np.random.SeedSequence([seed, token_index]).generate_state(1, dtype=np.uint64)[0])
    return torch.Generator(device=device).manual_seed(state & ((1 << 63) - 1))


def sample_one(logits: torch.Tensor, params: SamplingParams, token_index: int) -> int:
    """One token from a [vocab] fp32 logits row."""
    if params.temperature == 0.0:
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
    if all(p.temperature == 0.0 for p in params):
        return torch.argmax(logits, dim=-1).tolist()
    return [sample_one(row, p, k) for row, p, k in zip(logits, params, token_indices, strict=True)]
