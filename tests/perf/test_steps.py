"""The compiled steps (pdsim/perf/steps) are their models' formulas: linear's and fitted's exactly,
roofline's float for float against the general step (cost.step_cost priced by the model's terms,
which mixed_time_s uses) on Python 3.11, whose `sum` adds in order as the compiled code does
(3.12's `sum` compensates, so there the two agree to rounding)."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
from roofline_cases import ROOFLINE_DECODE_ARGS, ROOFLINE_DECODE_CASES

from pdsim.perf import FittedModel, LinearModel, RooflineModel, StepOverheadModel
from pdsim.perf.catalog import load_hardware, load_model
from pdsim.perf.steps.prefill import LinearPrefill, RooflinePrefill

IN_ORDER_SUM = sys.version_info < (3, 12)


def _same(got: list[float], want: list[float]) -> None:
    if IN_ORDER_SUM:
        assert got == want
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


@pytest.mark.parametrize("model_name,hardware,tp,qk_across", [
    ("llama3_8b", "h100", 1, False), ("llama3_70b", "h100", 8, False), ("llama3_70b", "a100_80g", 4, False),
    ("qwen3_32b", "l40s", 2, False), ("llama2_70b", "h200", 8, False), ("smollm2_135m", "b200", 1, False),
    ("opt_13b", "a800", 2, False),
    ("llama3_70b", "h100", 8, True),  # a q/k norm over all heads: its statistics' all-reduces
])
def test_roofline_prefill_step_is_the_general_step(model_name: str, hardware: str, tp: int, qk_across: bool) -> None:
    shape = dataclasses.replace(load_model(model_name), qk_norm_across_heads=qk_across)
    model = RooflineModel(shape, load_hardware(hardware), tp=tp, overhead_per_seq_s=1e-5)
    fast = model.prefill_step()
    assert fast is not None
    rng = np.random.default_rng([20, tp])
    batches = [[(1, 0)], [(8192, 0)], [(1, 100_000)], [(512, 7), (3, 0), (4096, 12_288)]]
    for _ in range(300):
        k = int(rng.integers(1, 9))
        batches.append([(int(n), int(c)) for n, c in zip(rng.integers(1, 16_384, k), rng.integers(0, 200_000, k), strict=True)])
    got = [fast.time_s(items) for items in batches]
    _same(got, [model.mixed_time_s(items, 0, 0) for items in batches])
    assert got == [model.prefill_time_s(items) for items in batches]  # (its scalar call is the step)
    assert fast.time_s([]) == model.prefill_time_s([]) == 0.0


@pytest.mark.parametrize(ROOFLINE_DECODE_ARGS, ROOFLINE_DECODE_CASES)
def test_roofline_decode_step_is_the_general_step(model_name: str, tp: int, mfu: float, mbu: float) -> None:
    """RooflineStep (the context-free operators from the model's terms, attention inline, its
    divisions by powers of two folded into one multiplication) against the general step."""
    model = RooflineModel(load_model(model_name), load_hardware("h100"), tp=tp, mfu=mfu, mbu=mbu,
                          overhead_per_seq_s=1e-5)
    for n, ctx0 in ((1, 0), (1, 17), (7, 12345), (64, 64 * 3000 + 5), (300, 300 * 900)):
        step = model.decode_step(n)
        contexts = [ctx0 + n * i for i in range(400)]
        got = list(step.steps(ctx0, 400))
        _same(got, [model.mixed_time_s((), n, c) for c in contexts])
        assert got == [model.decode_time_s(n, c) for c in contexts] == [step.time_s(c) for c in contexts]
        total = 0.25
        for s in got:
            total += s
        assert step.accumulate(0.25, ctx0, 400) == total
    assert model.decode_step(7) is model.decode_step(7) and model.decode_time_s(0, 100) == 0.0


def test_fitted_decode_step_is_the_model_exactly() -> None:
    kw = dict(prefill_ms=(1.0, 0.01, 1e-6), decode_small_ms=(12.3, 1.7e-4, 0.31), decode_large_ms=(3.1, 2.9e-4, 0.27),
              batch_threshold=9)
    for model in (FittedModel(**kw), FittedModel(**kw, batch_floor=False)):
        for n in (1, 8, 9, 40):
            assert list(model.decode_step(n).steps(0, 300)) == [model.decode_time_s(n, n * i) for i in range(300)]


def test_linear_prefill_is_the_model_exactly() -> None:
    model = LinearModel(prefill_base_s=0.013, prefill_per_token_s=7.3e-5)
    fast = LinearPrefill(model.prefill_base_s, model.prefill_per_token_s)
    batches = [[], [(1, 0)], [(8192, 0)], [(512, 7), (3, 0), (4096, 12_288)], [(n, 0) for n in range(1, 300, 7)]]
    assert [fast.time_s(items) for items in batches] == [model.prefill_time_s(items) for items in batches]
    assert fast.time_s([(100, 5), (28, 0)]) == 0.013 + 7.3e-5 * 128


def test_prefill_timer_is_compiled_for_dense_roofline_and_linear_models_only() -> None:
    dense = RooflineModel(load_model("llama3_8b"), load_hardware("h100"), tp=1)
    moe = RooflineModel(load_model("qwen3_30b_a3b"), load_hardware("h100"), tp=2)
    wrapped = StepOverheadModel(dense, 0.001, 0.002)
    assert type(dense.prefill_timer().__self__) is RooflinePrefill  # type: ignore[attr-defined]
    assert type(LinearModel().prefill_timer().__self__) is LinearPrefill  # type: ignore[attr-defined]
    assert moe.prefill_step() is None
    for other in (moe, wrapped):
        assert other.prefill_timer() == other.prefill_time_s
