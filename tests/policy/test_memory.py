from __future__ import annotations

from pdsim.policy import (
    DecodeMemoryView,
    RequestView,
    allocatable_tokens,
    choose_retraction_victims,
    plan_preallocation,
)


def mem(**kw: int) -> DecodeMemoryView:
    base = dict(
        available_tokens=1000, num_active=0, reserved_decode_tokens=0, remaining_output_tokens=0,
        largest_need_tokens=0, retractable_tokens=0, page_size_tokens=1,
    )
    base.update(kw)
    return DecodeMemoryView(**base)


def req(rid: int, inp: int, out: int, gen: int = 0, kv: int = 0) -> RequestView:
    return RequestView(request_id=rid, input_tokens=inp, output_tokens=out, generated_tokens=gen, kv_tokens=kv)


def test_allocatable_uses_the_larger_of_reserve_and_single_request_room() -> None:
    assert allocatable_tokens(mem(num_active=3, reserved_decode_tokens=50)) == 850
    assert allocatable_tokens(mem(remaining_output_tokens=120)) == 880
    m = mem(num_active=1, reserved_decode_tokens=10, largest_need_tokens=700, retractable_tokens=200)
    assert allocatable_tokens(m) == 500


def test_retracted_requests_count_against_allocatable() -> None:
    m = mem(reserved_decode_tokens=10)
    assert allocatable_tokens(m, [req(0, 100, 50, gen=20)]) == 1000 - 130


def test_plan_admits_fifo_until_one_does_not_fit() -> None:
    plan = plan_preallocation([], [req(0, 450, 100), req(1, 450, 100), req(2, 10, 1)], mem(), free_slots=10)
    assert plan.admit_ids == (0,)
    assert plan.allocatable_tokens == 450


def test_plan_respects_prealloc_slots() -> None:
    plan = plan_preallocation([], [req(i, 10, 10) for i in range(5)], mem(), free_slots=2)
    assert plan.admit_ids == (0, 1)


def test_plan_resumes_retracted_first_and_blocks_new_while_any_waits() -> None:
    retracted = [req(7, 300, 100, gen=50), req(8, 900, 100, gen=1)]
    plan = plan_preallocation(retracted, [req(0, 10, 10)], mem(), free_slots=10)
    assert plan.resume_ids == (7,) and plan.admit_ids == ()


def test_plan_worst_case_counts_retractable_tokens() -> None:
    big = req(0, 900, 600)
    assert plan_preallocation([], [big], mem(reserved_decode_tokens=50), 1).admit_ids == ()
    relaxed = mem(reserved_decode_tokens=50, retractable_tokens=600)
    assert plan_preallocation([], [big], relaxed, 1).admit_ids == (0,)


def test_plan_rounds_need_to_pages() -> None:
    plan = plan_preallocation([], [req(0, 17, 1)], mem(page_size_tokens=16, available_tokens=48), 1)
    assert plan.admit_ids == (0,) and plan.allocatable_tokens == 48 - 32 - 1


def test_victims_fewest_generated_then_longest_prompt_never_the_last() -> None:
    running = [req(0, 100, 50, gen=5, kv=104), req(1, 200, 50, gen=2, kv=201), req(2, 300, 50, gen=2, kv=301)]
    assert choose_retraction_victims(running, pages_short=1, page_size_tokens=16) == (2,)
    assert choose_retraction_victims(running, pages_short=100, page_size_tokens=16) == (2, 1)
    assert choose_retraction_victims(running, pages_short=0, page_size_tokens=16) == ()
