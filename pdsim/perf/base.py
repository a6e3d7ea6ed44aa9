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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

PrefillItem = tuple[int, int]  # (new_tokens, context_tokens)


@runtime_checkable
class LatencyModel(Protocol):
    name: str

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float: ...

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float: ...

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float: ...
