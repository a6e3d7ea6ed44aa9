"""DistServe's fitted formula against hand-computed values."""

from __future__ import annotations

import json

import pytest

from pdsim.perf.fitted import FittedModel, load_fitted


@pytest.fixture()
def fitted():
    return FittedModel(
        prefill_ms=(10.0, 0.1, 1e-5),
        decode_small_ms=(20.0, 0.001, 0.05),
        decode_large_ms=(5.0, 0.002, 0.2),
        batch_threshold=95,
    )


def test_prefill_hand_computed(fitted):
    # 10 + 0.1 * (100 + 300) + 1e-5 * (100^2 + 300^2) = 10 + 40 + 1.0 = 51 ms
    assert fitted.prefill_time_s([(100, 0), (300, 0)]) == pytest.approx(0.051)
    # a chunk of 100 after 300 cached: squares (400^2 - 300^2) = 70,000 -> 10 + 10 + 0.7 ms
    assert fitted.prefill_time_s([(100, 300)]) == pytest.approx(0.0207)


def test_decode_regimes_hand_computed(fitted):
    # below the threshold: 20 + 0.001 * 94,000 + 0.05 * 94 = 118.7 ms
    assert fitted.decode_time_s(94, 94_000) == pytest.approx(0.1187)
    # at the threshold: large-batch triple: 5 + 0.002 * 95,000 + 0.2 * 95 = 214 ms
    assert fitted.decode_time_s(95, 95_000) == pytest.approx(0.214)


def test_decode_never_drops_at_threshold(calibration_file):
    path = calibration_file("distserve_profiler-a100-80g.distserve.json")
    model = load_fitted(path, "facebook/opt-13b", 1)
    times = [model.decode_time_s(n, n * 300) for n in range(80, 110)]
    assert times == sorted(times)


def test_mixed_adds_decode_above_intercept(fitted):
    prefill = fitted.prefill_time_s([(100, 0)])
    assert fitted.mixed_time_s([(100, 0)], 10, 5000) == pytest.approx(
        prefill + (0.001 * 5000 + 0.05 * 10) / 1e3
    )
    assert fitted.mixed_time_s([], 10, 5000) == fitted.decode_time_s(10, 5000)


def test_load_roundtrip_and_errors(tmp_path, fitted):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"org/model": {"2": fitted.to_json_entry()}}))
    assert load_fitted(path, "org/model", 2) == fitted
    with pytest.raises(KeyError, match="tp=4"):
        load_fitted(path, "org/model", 4)
    with pytest.raises(KeyError, match="hf_name"):
        load_fitted(path, "other/model", 2)


def test_distserve_opt13b_tp1(calibration_file):
    """The shipped profile, by hand: OPT-13B TP1 (DistServe engine), 512-token prompt."""
    path = calibration_file("distserve_profiler-a100-80g.distserve.json")
    entry = json.loads(path.read_text())["facebook/opt-13b"]["1"]
    model = load_fitted(path, "facebook/opt-13b", 1)
    a, b, c = entry["prefill"]
    assert model.prefill_time_s([(512, 0)]) * 1e3 == pytest.approx(a + b * 512 + c * 512**2)
    assert model.prefill_time_s([(512, 0)]) == pytest.approx(0.0722, abs=0.001)  # ~72 ms
    a, b, c = entry["decoding_smallbs"]
    assert model.decode_time_s(8, 8 * 1000) * 1e3 == pytest.approx(a + b * 8000 + c * 8)
    a, b, c = entry["decoding_largebs"]
    assert model.decode_time_s(128, 128 * 500) * 1e3 == pytest.approx(a + b * 64_000 + c * 128)
