from __future__ import annotations

import pytest

from pdsim.policy import PrefillBudget, RequestView, StepLimits, form_prefill_batch, prefill_budget


def req(rid: int, inp: int, prefilled: int = 0, out: int = 10) -> RequestView:
    return RequestView(request_id=rid, input_tokens=inp, output_tokens=out, prefilled_tokens=prefilled)


def budget(**kw: int | float) -> PrefillBudget:
    base = dict(max_prefill_tokens=1000, chunk_size_tokens=0, page_size_tokens=16, free_kv_tokens=10_000)
    base.update(kw)
    return PrefillBudget(**base)


def test_whole_requests_until_budget_is_spent_last_may_overshoot() -> None:
    batch = form_prefill_batch([req(0, 600), req(1, 600), req(2, 10)], budget())
    assert [(c.request_id, c.new_tokens, c.is_last) for c in batch.chunks] == [(0, 600, True), (1, 600, True)]
    assert batch.stop_reason == "token_budget"


def test_chunking_truncates_to_page_multiple_and_closes_batch() -> None:
    batch = form_prefill_batch([req(0, 300), req(1, 5000), req(2, 10)], budget(chunk_size_tokens=1000))
    assert [(c.request_id, c.new_tokens, c.is_last) for c in batch.chunks] == [(0, 300, True), (1, 688, False)]
    assert batch.stop_reason == "chunked"
    assert batch.chunks[1].new_pages == 43


def test_continuing_chunk_counts_context_and_pages_exactly() -> None:
    batch = form_prefill_batch([req(0, 1000, prefilled=688)], budget(chunk_size_tokens=512))
    chunk = batch.chunks[0]
    assert (chunk.new_tokens, chunk.context_tokens, chunk.is_last) == (312, 688, True)
    assert chunk.new_pages == 63 - 43


def test_prefix_cached_tokens_skip_compute_and_memory() -> None:
    cached = RequestView(request_id=0, input_tokens=1024, output_tokens=1, prefilled_tokens=512, cached_tokens=512)
    batch = form_prefill_batch([cached], budget())
    assert (batch.chunks[0].new_tokens, batch.chunks[0].new_pages) == (512, 32)


def test_memory_stops_the_batch_in_fifo_order() -> None:
    batch = form_prefill_batch([req(0, 160), req(1, 160), req(2, 16)], budget(free_kv_tokens=320, reserved_kv_tokens=16))
    assert [c.request_id for c in batch.chunks] == [0]
    assert batch.stop_reason == "memory"


def test_new_token_ratio_reserves_future_decode() -> None:
    b = budget(free_kv_tokens=64, new_token_ratio=0.5)
    assert [c.request_id for c in form_prefill_batch([req(0, 32, out=66)], b).chunks] == []
    assert [c.request_id for c in form_prefill_batch([req(0, 32, out=62)], b).chunks] == [0]


def test_max_requests_and_empty() -> None:
    assert form_prefill_batch([], budget()).chunks == ()
    batch = form_prefill_batch([req(0, 1), req(1, 1)], budget(max_requests=1))
    assert batch.stop_reason == "max_requests" and len(batch.chunks) == 1


def test_candidates_are_consumed_lazily() -> None:
    seen: list[int] = []

    def gen():
        for i in range(10):
            seen.append(i)
            yield req(i, 600)

    form_prefill_batch(gen(), budget())
    assert seen == [0, 1, 2]


def test_nothing_left_to_prefill_is_an_error() -> None:
    with pytest.raises(ValueError, match="request 3"):
        form_prefill_batch([req(3, 10, prefilled=10)], budget())


def test_one_prefill_budget_rule() -> None:
    limits = StepLimits(max_prefill_tokens=512, chunk_size_tokens=1024, max_running_requests=8, prealloc_slots=8)
    mixed = prefill_budget(limits, free_kv_tokens=4000, num_decodes=100, reserved_kv_tokens=30, num_running=3)
    assert (mixed.max_prefill_tokens, mixed.max_requests, mixed.reserved_kv_tokens) == (412, 5, 30)
    assert prefill_budget(limits, 4000, num_decodes=600) is None  # every token taken by decodes
    assert prefill_budget(limits, 4000, num_running=8) is None  # no request slot left
    chunked = StepLimits(max_prefill_tokens=512, chunk_size_tokens=256, max_running_requests=8, prealloc_slots=8)
    assert prefill_budget(chunked, 4000).max_prefill_tokens == 256 == chunked.prefill_token_budget
