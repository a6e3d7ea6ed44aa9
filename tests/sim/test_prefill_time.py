"""The compiled prefill times (pdsim/sim/prefilltime.py) are their models' prefill_time_s: linear's
exactly, roofline's float for float (on Python 3.11, whose `sum` adds in order as the compiled code does; 3.12's
`sum` compensates, so there the two agree to rounding)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from pdsim.perf import LinearModel, RooflineModel, StepOverheadModel
from pdsim.perf.catalog import load_hardware, load_model
from pdsim.sim.prefilltime import LinearPrefill, RooflinePrefill, prefill_timer

IN_ORDER_SUM = sys.version_info < (3, 12)


@pytest.mark.parametrize("model_name,hardware,tp", [
    ("llama3_8b", "h100", 1), ("llama3_70b", "h100", 8), ("llama3_70b", "a100_80g", 4), ("qwen3_32b", "l40s", 2),
    ("llama2_70b", "h200", 8), ("smollm2_135m", "b200", 1), ("opt_13b", "a800", 2),
])
def test_roofline_prefill_is_the_model_bit_for_bit(model_name: str, hardware: str, tp: int) -> None:
    model = RooflineModel(load_model(model_name), load_hardware(hardware), tp=tp, overhead_per_seq_s=1e-5)
    fast = RooflinePrefill(model)
    rng = np.random.default_rng([20, tp])
    batches = [[(1, 0)], [(8192, 0)], [(1, 100_000)], [(512, 7), (3, 0), (4096, 12_288)]]
    for _ in range(300):
        k = int(rng.integers(1, 9))
        batches.append([(int(n), int(c)) for n, c in zip(rng.integers(1, 16_384, k), rng.integers(0, 200_000, k), strict=True)])
    got = [fast.time_s(items) for items in batches]
    want = [model.prefill_time_s(items) for items in batches]
    if IN_ORDER_SUM:
        assert got == want
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)
    assert fast.time_s([]) == model.prefill_time_s([]) == 0.0


def test_linear_prefill_is_the_model_exactly() -> None:
    model = LinearModel(prefill_base_s=0.013, prefill_per_token_s=7.3e-5)
    fast = LinearPrefill(model)
    batches = [[], [(1, 0)], [(8192, 0)], [(512, 7), (3, 0), (4096, 12_288)], [(n, 0) for n in range(1, 300, 7)]]
    assert [fast.time_s(items) for items in batches] == [model.prefill_time_s(items) for items in batches]
    assert fast.time_s([(100, 5), (28, 0)]) == 0.013 + 7.3e-5 * 128


def test_prefill_timer_compiles_dense_roofline_and_linear_models_only() -> None:
    dense = RooflineModel(load_model("llama3_8b"), load_hardware("h100"), tp=1)
    moe = RooflineModel(load_model("qwen3_30b_a3b"), load_hardware("h100"), tp=2)
    wrapped = StepOverheadModel(dense, 0.001, 0.002)
    assert type(prefill_timer(dense).__self__) is RooflinePrefill  # type: ignore[attr-defined]
    assert type(prefill_timer(LinearModel()).__self__) is LinearPrefill  # type: ignore[attr-defined]
    for other in (moe, wrapped):
        assert prefill_timer(other) == other.prefill_time_s
