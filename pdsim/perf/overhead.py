"""Per-step engine overhead on top of any latency model.

A real engine spends time in every iteration beyond the forward itself: scheduling (the policy
calls, page allocation), polling transfer states, sampling, bookkeeping, handing outputs to the
server thread. `pdreal profile` measures it per side (engine.json `prefill_step_overhead_s`,
`decode_step_overhead_s`: loop time per step minus forward time); `perf.prefill_step_overhead_s`
and `perf.decode_step_overhead_s` add it to every prefill forward, decode iteration and (the
larger of the two) mixed iteration. Both default to 0, which leaves the wrapped model as is.

`perf.prefill_step_scale` / `perf.decode_step_scale` multiply the wrapped model's forward times:
the slowdown of forwards as served relative to the offline profile, when the instances share
CPU cores (with each other, the router, the client and anything else on the machine).
`pdsim fidelity` measures it as the median ratio of the served steps (`GET /steps`) to the
profiled table at the same batch shapes. Both default to 1.

`perf.step_overhead_per_context_token_s` adds a cost per context token of the batch (a prefill
item's cached + new tokens, a decode batch's KV tokens) and `perf.decode_context_offset_tokens`
counts that many more tokens per sequence in the wrapped model's decode term: DistServe's
simulator adds 2 ms + 1e-4 ms per context token to every iteration and evaluates its decode fit
over each request's context + 1 (the compat=distserve preset).

`perf.prefill_host_s_per_moe_layer` sets a floor under every step that carries prompt tokens of
an MoE model: the engines run such steps eagerly (CUDA graphs cover decode-only batches), so the
host issues every kernel of every layer, and an MoE layer's many kernels (router, top-k, token
permutation, grouped GEMMs, shared experts) and host syncs (tokens per expert) keep the host
from running ahead; a step whose GPU work is shorter than that waits on the host. The step lasts
max(forward, MoE layers x the per-layer host time) plus the step overhead; decode-only steps keep
their forward time. The operator tables time the GPU only and cannot show it.
`perf.prefill_host_mode=serial` adds the two instead: where an MoE layer's prompt path waits on the
GPU (a device-to-host copy of the tokens per expert to size the grouped GEMMs), the host cannot
issue the next kernels while the GPU works, so neither hides the other.
`perf.prefill_graph_max_tokens` marks the steps an engine replays from piecewise CUDA graphs:
vLLM captures every layer but attention for batches of up to max-cudagraph-capture-size tokens
(default min(2 x max-num-seqs, 512)), prompt tokens included, so a step of at most that many
tokens (prompt + decode) pays `perf.prefill_graph_host_s_per_moe_layer` per MoE layer (the graph
pieces' replays and the eager attention between them) in place of the eager host time; a larger
one runs eagerly. 0 (the default) treats every step with prompt tokens as eager.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdsim.perf.base import LatencyModel, PrefillItem, PrefillTimer, prefill_ranks_time_s
from pdsim.perf.steps.decode import OverheadStep

PREFILL_HOST_MODES = ("floor", "serial")


@dataclass(frozen=True, eq=False)
class StepOverheadModel:
    """`inner`'s step times plus a constant per prefill / decode step (never on an empty step)."""

    inner: LatencyModel
    prefill_overhead_s: float = 0.0
    decode_overhead_s: float = 0.0
    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    per_context_token_s: float = 0.0
    decode_context_offset_tokens: int = 0
    prefill_floor_s: float = 0.0  # a step with prompt tokens lasts at least this (host launch time)
    prefill_host_serial: bool = False  # ... or this longer than its forward (prefill_host_mode=serial)
    graph_max_tokens: int = 0  # steps of at most this many tokens replay CUDA graphs ...
    graph_floor_s: float = 0.0  # ... and their host time is this, not prefill_floor_s

    def __post_init__(self) -> None:
        for name in ("prefill_overhead_s", "decode_overhead_s", "per_context_token_s", "decode_context_offset_tokens",
                     "prefill_floor_s", "graph_max_tokens", "graph_floor_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"perf: step overhead {name} must be >= 0, got {getattr(self, name)}")
        for name in ("prefill_scale", "decode_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"perf: step scale {name} must be > 0, got {getattr(self, name)}")

    @property
    def name(self) -> str:
        return f"{self.inner.name}+overhead"

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        if not items:
            return 0.0
        return self._prefill_s(self.inner.prefill_time_s(items), items)

    def prefill_ranks_time_s(self, ranks: Sequence[Sequence[PrefillItem]]) -> float:
        """prefill_time_s of a forward whose chunks lie on attention-DP ranks as given."""
        items = [item for rank in ranks for item in rank]
        if not items:
            return 0.0
        return self._prefill_s(prefill_ranks_time_s(self.inner, ranks), items)

    def _prefill_s(self, inner_s: float, items: Sequence[PrefillItem]) -> float:
        """A prefill forward of `items` whose inner model takes `inner_s`: scaled, with the host
        time, the step overhead and the per-context-token cost."""
        forward_s = self._with_host(self.prefill_scale * inner_s, _new_tokens(items))
        return forward_s + self.prefill_overhead_s + self.per_context_token_s * _prompt_tokens(items)

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        inner_ctx = context_tokens + self.decode_context_offset_tokens * num_seqs
        return (self.decode_scale * self.inner.decode_time_s(num_seqs, inner_ctx) + self.decode_overhead_s
                + self.per_context_token_s * context_tokens)

    def decode_step(self, num_seqs: int) -> OverheadStep:
        return OverheadStep(self.inner.decode_step(num_seqs), self.decode_scale, self.decode_overhead_s,
                            self.per_context_token_s, self.decode_context_offset_tokens)

    def prefill_timer(self) -> PrefillTimer:
        return self.prefill_time_s

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        if not items:
            return self.decode_time_s(num_seqs, context_tokens)
        overhead = max(self.prefill_overhead_s, self.decode_overhead_s if num_seqs > 0 else 0.0)
        inner_ctx = context_tokens + self.decode_context_offset_tokens * max(0, num_seqs)
        tokens = _prompt_tokens(items) + context_tokens
        forward_s = self._with_host(self.prefill_scale * self.inner.mixed_time_s(items, num_seqs, inner_ctx),
                                    _new_tokens(items) + max(0, num_seqs))
        return forward_s + overhead + self.per_context_token_s * tokens

    def _with_host(self, forward_s: float, step_tokens: int) -> float:
        """A step with prompt tokens (`step_tokens` in all): its forward and the host's time to
        issue it, eagerly or from CUDA graphs (overlapped: the longer of the two; serial: both)."""
        host_s = self.graph_floor_s if step_tokens <= self.graph_max_tokens else self.prefill_floor_s
        if self.prefill_host_serial:
            return forward_s + host_s
        return max(forward_s, host_s)


def _new_tokens(items: Sequence[PrefillItem]) -> int:
    """Tokens a step computes for its prefill items (cached context excluded)."""
    return sum(n for n, _ in items)


def _prompt_tokens(items: Sequence[PrefillItem]) -> int:
    """Context tokens of prefill items: each one's new plus already-cached tokens."""
    return sum(n + ctx for n, ctx in items)
