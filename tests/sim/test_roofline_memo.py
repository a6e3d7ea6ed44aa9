"""RooflineModel.prefill_time_s memoises by batch shape: a hit returns exactly what the cost
model computes, and each model object keeps its own memo."""

from __future__ import annotations

from simkit import TINY_HW, TINY_MODEL

from pdsim.perf import RooflineModel, cost


def _fresh(model: RooflineModel, items: list[tuple[int, int]]) -> float:
    return model._time_s(cost.prefill_cost(model.model, items, model.tp))


def test_memo_hits_equal_fresh_computation() -> None:
    model = RooflineModel(TINY_MODEL, TINY_HW, tp=1)
    shapes = [[(512, 0)], [(100, 300), (64, 0)], [(512, 0)], [(100, 300), (64, 0)], [(1, 2047)]]
    for items in shapes:
        assert model.prefill_time_s(items) == _fresh(model, items)
        assert model.prefill_time_s(tuple(items)) == _fresh(model, items)


def test_memo_is_per_model_and_not_a_field() -> None:
    a = RooflineModel(TINY_MODEL, TINY_HW, tp=1)
    b = RooflineModel(TINY_MODEL, TINY_HW, tp=1, mfu=0.25)
    assert a.prefill_time_s([(4096, 0)]) != b.prefill_time_s([(4096, 0)])
    assert a == RooflineModel(TINY_MODEL, TINY_HW, tp=1)  # the memo does not take part in eq
