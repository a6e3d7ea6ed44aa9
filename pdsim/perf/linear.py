"""Constant-plus-linear step latency: the simplest model, used for hand-computed tests."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdsim.perf.base import PrefillItem, PrefillTimer
from pdsim.perf.steps.decode import LinearStep
from pdsim.perf.steps.prefill import LinearPrefill


@dataclass(frozen=True, slots=True)
class LinearModel:
    """prefill = base + per_token * Σnew; decode = base + per_seq * n + per_ctx * Σctx."""

    prefill_base_s: float = 0.02
    prefill_per_token_s: float = 0.00008
    decode_base_s: float = 0.012
    decode_per_seq_s: float = 0.0001
    decode_per_ctx_token_s: float = 2e-8
    name: str = "linear"

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        new_tokens = sum(n for n, _ in items)
        return self.prefill_base_s + self.prefill_per_token_s * new_tokens

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        return (
            self.decode_base_s
            + self.decode_per_seq_s * num_seqs
            + self.decode_per_ctx_token_s * context_tokens
        )

    def decode_step(self, num_seqs: int) -> LinearStep:
        # decode_time_s's association: (base + per_seq * n) + per_ctx * ctx
        return LinearStep(num_seqs, self.decode_base_s + self.decode_per_seq_s * num_seqs,
                          self.decode_per_ctx_token_s)

    def prefill_timer(self) -> PrefillTimer:
        return LinearPrefill(self.prefill_base_s, self.prefill_per_token_s).time_s

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        if not items:
            return self.decode_time_s(num_seqs, context_tokens)
        prefill = self.prefill_time_s(items)
        return prefill + self.decode_per_seq_s * num_seqs + self.decode_per_ctx_token_s * context_tokens
