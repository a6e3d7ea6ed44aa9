"""Batch formation: the PrefillAdder (prefill servers and colocated mixed batches).

Contract: candidates arrive in scheduling order (an in-progress chunked request first, then
the waiting queue in FIFO order). The adder consumes them lazily and stops at the first one that
does not fit, so a caller may compute prefix matches on the fly. A batch is bounded by

- a token budget: min(max_prefill_tokens, chunk_size_tokens) new tokens per forward (the
  colocated mixed batch first subtracts one token per running decode, see
  `pdsim.policy.prefill_step.prefill_budget`);
- chunking: when chunk_size_tokens > 0, the request that overflows the budget is truncated to a
  page multiple and becomes the batch's (only) chunked request; without chunking a whole request
  is added as long as some budget is left (the last one may overshoot, as in SGLang);
- memory: new KV pages (page-exact) plus, when new_token_ratio > 0, a reservation of
  ratio x max new tokens for the request's future decode must fit in free_kv_tokens minus
  reserved_kv_tokens;
- max_requests when > 0.

Prefix-cached tokens count as prefilled and cost neither budget nor memory. Pure and
deterministic: the same candidates and budget give the same batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from pdsim.policy.views import RequestView, pages_for


@dataclass(init=False, slots=True, unsafe_hash=True)
class PrefillBudget:
    max_prefill_tokens: Final[int]
    chunk_size_tokens: Final[int]
    page_size_tokens: Final[int]
    free_kv_tokens: Final[int]
    reserved_kv_tokens: Final[int]
    new_token_ratio: Final[float]
    max_requests: Final[int]

    def __init__(self, max_prefill_tokens: int, chunk_size_tokens: int, page_size_tokens: int, free_kv_tokens: int,
        reserved_kv_tokens: int = 0, new_token_ratio: float = 0.0, max_requests: int = 0) -> None:
        self.max_prefill_tokens = max_prefill_tokens
        self.chunk_size_tokens = chunk_size_tokens
        self.page_size_tokens = page_size_tokens
        self.free_kv_tokens = free_kv_tokens
        self.reserved_kv_tokens = reserved_kv_tokens
        self.new_token_ratio = new_token_ratio
        self.max_requests = max_requests

    @property
    def token_budget(self) -> int:
        return prefill_token_budget(self.max_prefill_tokens, self.chunk_size_tokens)


def prefill_token_budget(max_prefill_tokens: int, chunk_size_tokens: int) -> int:
    """New tokens one prefill forward may compute: min(max_prefill_tokens, chunk_size_tokens)
    when chunking (chunk_size_tokens > 0), else max_prefill_tokens. The one copy of the rule."""
    if chunk_size_tokens > 0:
        return min(max_prefill_tokens, chunk_size_tokens)
    return max_prefill_tokens


@dataclass(init=False, slots=True, unsafe_hash=True)
class PrefillChunk:
    """One request's part of a forward: new_tokens computed over context_tokens already in KV."""

    request_id: Final[int]
    new_tokens: Final[int]
    context_tokens: Final[int]
    new_pages: Final[int]
    is_last: Final[bool]

    def __init__(self, request_id: int, new_tokens: int, context_tokens: int, new_pages: int,
        is_last: bool) -> None:
        self.request_id = request_id
        self.new_tokens = new_tokens
        self.context_tokens = context_tokens
        self.new_pages = new_pages
        self.is_last = is_last


@dataclass(init=False, slots=True, unsafe_hash=True)
class PrefillBatch:
    chunks: Final[tuple[PrefillChunk, ...]]
    stop_reason: Final[str]  # "empty" | "token_budget" | "memory" | "max_requests" | "chunked"

    def __init__(self, chunks: tuple[PrefillChunk, ...], stop_reason: str) -> None:
        self.chunks = chunks
        self.stop_reason = stop_reason

    @property
    def new_tokens(self) -> int:
        return sum(c.new_tokens for c in self.chunks)

    @property
    def new_pages(self) -> int:
        return sum(c.new_pages for c in self.chunks)


class PrefillAdder:
    """Builds one prefill batch; `add` returns False once the batch is closed."""

    def __init__(self, budget: PrefillBudget) -> None:
        self.budget = budget
        self.tokens_left = budget.token_budget
        self.kv_left_tokens = budget.free_kv_tokens - budget.reserved_kv_tokens
        self.chunks: list[PrefillChunk] = []
        self.stop_reason = "empty"
        self.closed = False

    def add(self, req: RequestView) -> bool:
        """Try to add `req`; False (and the batch closes) when it does not fit."""
        if self.closed:
            return False
        b = self.budget
        remaining = req.remaining_prompt_tokens
        if remaining <= 0:
            raise ValueError(f"request {req.request_id}: nothing left to prefill ({req.prefilled_tokens}/{req.input_tokens})")
        if b.max_requests > 0 and len(self.chunks) >= b.max_requests:
            return self._close("max_requests")
        if self.tokens_left <= 0:
            return self._close("token_budget")
        new_tokens = remaining
        if b.chunk_size_tokens > 0 and remaining > self.tokens_left:
            new_tokens = self.tokens_left // b.page_size_tokens * b.page_size_tokens
            if new_tokens <= 0:
                return self._close("token_budget")
        is_last = new_tokens == remaining
        page = b.page_size_tokens
        new_pages = pages_for(req.prefilled_tokens + new_tokens, page) - pages_for(req.prefilled_tokens, page)
        reserve = int(req.remaining_output_tokens * b.new_token_ratio) if is_last else 0
        if new_pages * page + reserve > self.kv_left_tokens:
            return self._close("memory")
        self.chunks.append(PrefillChunk(req.request_id, new_tokens, req.prefilled_tokens, new_pages, is_last))
        self.tokens_left -= new_tokens
        self.kv_left_tokens -= new_pages * page + reserve
        if not is_last:
            return self._close("chunked")
        return True

    def _close(self, reason: str) -> bool:
        self.closed = True
        self.stop_reason = reason
        return False

    def batch(self) -> PrefillBatch:
        reason = self.stop_reason if self.closed else ("token_budget" if self.tokens_left <= 0 else "empty")
        return PrefillBatch(tuple(self.chunks), reason)


def form_prefill_batch(candidates: Iterable[RequestView], budget: PrefillBudget) -> PrefillBatch:
    """Consume `candidates` in order until one does not fit; return the batch."""
    adder = PrefillAdder(budget)
    for req in candidates:
        if not adder.add(req):
            break
    return adder.batch()


def decode_reservation_tokens(remaining_output_tokens: Iterable[int], new_token_ratio: float) -> int:
    """KV held back for running decodes' future growth: ratio x their remaining outputs."""
    return int(sum(remaining_output_tokens) * new_token_ratio)
