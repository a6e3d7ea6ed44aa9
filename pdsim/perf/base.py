"""The step-latency interface every performance model implements.

A model answers three questions for one instance (all ranks of one TP group together):

- `prefill_time_s(items)`: one prefill forward over a batch of prompt chunks. Each item is
  `(new_tokens, context_tokens)`: tokens computed in this forward, and tokens of the same
  request already in the KV cache (prefix-cache hit or earlier chunks), which attention reads.
- `decode_time_s(num_seqs, context_tokens)`: one decode iteration producing one token for each
  of `num_seqs` requests whose KV lengths sum to `context_tokens`.
- `mixed_time_s(items, num_seqs, context_tokens)`: a colocated chunked-prefill iteration with
  prefill chunks and decodes sharing the batch.

Times are seconds, deterministic, and must not decrease when any argument grows.

The simulator asks the same questions millions of times, so a model also hands it its hot paths,
each written next to the formula it repeats and giving the very same floats:

- `decode_step(num_seqs)`: decode_time_s(num_seqs, ctx) as a function of ctx (num_seqs >= 1), a
  `DecodeStep` (pdsim/perf/steps/decode.py, compiled): a decode span of k iterations reads
  ctx0, ctx0 + n, ..., and the step adds up their times in one compiled loop. A model with no
  formula worth compiling returns `CallStep(num_seqs, self.decode_time_s)`.
- `prefill_timer()`: the function a prefill instance calls for each step's time:
  prefill_time_s itself, or its compiled twin (pdsim/perf/steps/prefill.py).

The models (linear, roofline, fitted, table, measured, and the step-overhead wrapper around any
of them) are plain Python; only pdsim/perf/steps is compiled, taking numbers from the models.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from pdsim.perf.steps.decode import DecodeStep

PrefillItem = tuple[int, int]  # (new_tokens, context_tokens)
PrefillTimer = Callable[[Sequence[PrefillItem]], float]


@runtime_checkable
class LatencyModel(Protocol):
    @property
    def name(self) -> str: ...

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float: ...

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float: ...

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float: ...

    def decode_step(self, num_seqs: int) -> DecodeStep: ...

    def prefill_timer(self) -> PrefillTimer: ...


@runtime_checkable
class PlacedPrefill(Protocol):
    """A latency model that prices a prefill forward whose chunks the scheduler placed on its
    attention-DP ranks itself (dp_attention.DataParallelModel and the wrappers over it)."""

    def prefill_ranks_time_s(self, ranks: Sequence[Sequence[PrefillItem]]) -> float: ...


def prefill_ranks_time_s(model: LatencyModel, ranks: Sequence[Sequence[PrefillItem]]) -> float:
    """A prefill forward with one item list per attention-DP rank: the model's own pricing where it
    has one (PlacedPrefill), else the forward of all the chunks together."""
    if isinstance(model, PlacedPrefill):
        return model.prefill_ranks_time_s(ranks)
    return model.prefill_time_s([item for rank in ranks for item in rank])
