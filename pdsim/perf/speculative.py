"""Multi-token prediction (MTP) / speculative decoding on top of any latency model.

With `perf.mtp_draft_tokens = k` a decode step drafts k tokens per sequence (k passes of the
`perf.mtp_draft_layers` MTP layers, DeepSeek-V3's is one layer: config.json
`num_nextn_predict_layers`), then the target model verifies the k drafts plus the current token in
one forward: n sequences x (k + 1) query rows over the same KV. It emits the accepted drafts plus
one token: `perf.mtp_accepted_tokens` per sequence on average (1 <= a <= k + 1).

    verify(n, ctx) = inner.decode_time_s(n x (k + 1), ctx)   (GEMMs at (k+1) n rows, the KV read once)
    draft(n, ctx)  = k x inner.decode_time_s(n, ctx) x draft_layers / layers
    decode_time_s(n, ctx) = (verify + draft) / a

The simulator advances a decoding sequence one token per iteration, so one MTP step is spread
over `a` iterations of equal length: TPOT, throughput and KV growth (one token per iteration) are
right on average; inter-token gaps come out even where a real engine emits bursts. A step that
also carries prefill chunks (a colocated mixed step) verifies without the 1/a credit (it is
charged whole and its decodes advance one token): conservative. KV pages for the k draft slots
are not reserved. The limits an engine counts in steps (SGLang's receive interval: a verify
step weighs 1 like a decode step; TensorRT-LLM's batch-wait iterations) are counted in `a` times
as many iterations (`iterations_per_step`, `policy.limits.steps_as_iterations`), so they last
as long in time as the engine's.

Default acceptance (`mtp_accepted_tokens = 0`): 1 + sum of 0.85^i for i = 1..k. DeepSeek-V3
Technical Report (2024), sec. 5.4.3: the second token's acceptance rate is 85-90% across
generation topics (one MTP module); for k > 1 each further draft is assumed accepted with 0.85
given the one before it (an assumption: the report measures only the second token).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdsim.config import PerfConfig
from pdsim.perf.base import LatencyModel, PrefillItem, PrefillTimer, prefill_ranks_time_s
from pdsim.perf.steps.decode import CallStep, DecodeStep

SECOND_TOKEN_ACCEPTANCE = 0.85  # DeepSeek-V3 Technical Report sec. 5.4.3: 85-90%


def default_accepted_tokens(draft_tokens: int) -> float:
    """Tokens one MTP step emits per sequence on average, drafts accepted at 0.85 each in turn."""
    return 1.0 + sum(SECOND_TOKEN_ACCEPTANCE ** i for i in range(1, draft_tokens + 1))


def iterations_per_step(perf: PerfConfig) -> float:
    """Simulator iterations one engine decode step spans: the acceptance length with MTP
    (a step is spread over that many iterations, above), else 1."""
    if perf.mtp_draft_tokens == 0:
        return 1.0
    return accepted_tokens(perf.mtp_draft_tokens, perf.mtp_accepted_tokens)


def accepted_tokens(draft_tokens: int, accepted: float) -> float:
    """The acceptance length to use (0 = the default); ValueError naming the field otherwise."""
    if draft_tokens < 0:
        raise ValueError(f"perf: field 'mtp_draft_tokens' must be >= 0, got {draft_tokens}")
    if accepted == 0.0:
        return default_accepted_tokens(draft_tokens)
    if not 1.0 <= accepted <= draft_tokens + 1:
        raise ValueError(f"perf: field 'mtp_accepted_tokens' must be in [1, mtp_draft_tokens + 1 = "
                         f"{draft_tokens + 1}] (or 0 for the default), got {accepted}")
    return accepted


@dataclass(frozen=True, eq=False)
class SpeculativeModel:
    """`inner` with MTP decode steps (module docstring)."""

    inner: LatencyModel
    draft_tokens: int
    accepted_tokens: float
    draft_share: float  # draft layers / the model's layers
    name: str = "measured"

    def __post_init__(self) -> None:
        if self.draft_tokens < 1:
            raise ValueError(f"perf: MTP needs mtp_draft_tokens >= 1, got {self.draft_tokens}")
        accepted_tokens(self.draft_tokens, self.accepted_tokens)
        object.__setattr__(self, "name", f"{self.inner.name}+mtp{self.draft_tokens}")

    def _draft_s(self, num_seqs: int, context_tokens: int) -> float:
        return self.draft_tokens * self.inner.decode_time_s(num_seqs, context_tokens) * self.draft_share

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        verify = self.inner.decode_time_s(num_seqs * (self.draft_tokens + 1), context_tokens)
        return (verify + self._draft_s(num_seqs, context_tokens)) / self.accepted_tokens

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        if not items:
            return self.decode_time_s(num_seqs, context_tokens)
        verify = self.inner.mixed_time_s(items, num_seqs * (self.draft_tokens + 1), context_tokens)
        return verify + (self._draft_s(num_seqs, context_tokens) if num_seqs > 0 else 0.0)

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        return self.inner.prefill_time_s(items)

    def decode_step(self, num_seqs: int) -> DecodeStep:
        return CallStep(num_seqs, self.decode_time_s)

    def prefill_timer(self) -> PrefillTimer:
        return self.inner.prefill_timer()

    def prefill_ranks_time_s(self, ranks: Sequence[Sequence[PrefillItem]]) -> float:
        return prefill_ranks_time_s(self.inner, ranks)
