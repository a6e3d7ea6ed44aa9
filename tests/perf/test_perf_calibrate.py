"""Calibration recovers known parameters from synthetic tables; the CLI runs end to end."""

from __future__ import annotations

import json

import pytest

from pdsim.perf import catalog
from pdsim.perf.calibrate import main
from pdsim.perf.fit import fit_fitted, fit_roofline, mape_by_regime, predict
from pdsim.perf.fitted import FittedModel, load_fitted
from pdsim.perf.profile import ProfilePoint, write_profile_csv
from pdsim.perf.roofline import RooflineModel

TRUE_FITTED = FittedModel((15.0, 0.08, 4e-6), (18.0, 4e-4, 0.05), (9.0, 5e-4, 0.15), 95)


def synthetic_points(model) -> list[ProfilePoint]:
    shapes = [
        ("prefill", b, n, c) for b in (1, 2, 8) for n in (128, 512, 2048, 8192) for c in (0, 1024)
    ]
    shapes += [("decode", b, b, b * c) for b in (1, 4, 16, 64, 128, 256) for c in (256, 1024, 4096)]
    points = []
    for kind, b, n, c in shapes:
        probe = ProfilePoint(
            kind, b, n * b if kind == "prefill" else n, c * b if kind == "prefill" else c, 1.0
        )
        points.append(
            ProfilePoint(
                kind, probe.num_seqs, probe.new_tokens, probe.context_tokens, predict(model, probe)
            )
        )
    return points


def test_fitted_recovers_coefficients():
    fit = fit_fitted(synthetic_points(TRUE_FITTED), 95)
    for got, want in (
        (fit.prefill_ms, TRUE_FITTED.prefill_ms),
        (fit.decode_small_ms, TRUE_FITTED.decode_small_ms),
        (fit.decode_large_ms, TRUE_FITTED.decode_large_ms),
    ):
        assert got == pytest.approx(want, rel=0.01)


def test_roofline_recovers_efficiencies(models, hardware):
    truth = RooflineModel(
        models["llama3_8b"],
        hardware["h100"],
        2,
        mfu=0.42,
        mbu=0.63,
        overhead_s=0.004,
        overhead_per_seq_s=2e-4,
    )
    fit = fit_roofline({2: synthetic_points(truth)}, models["llama3_8b"], hardware["h100"])
    assert fit.mfu == pytest.approx(0.42, rel=0.01) and fit.mbu == pytest.approx(0.63, rel=0.01)
    assert fit.overhead_s == pytest.approx(0.004, rel=0.01)
    assert fit.overhead_per_seq_s == pytest.approx(2e-4, rel=0.01)


def test_mape_by_regime_reports_each_regime():
    points = synthetic_points(TRUE_FITTED)
    mape = mape_by_regime(TRUE_FITTED, points, 95)
    assert set(mape) == {"prefill", "decode_small_batch", "decode_large_batch", "all"}
    assert max(mape.values()) < 1e-9


def test_cli_fitted_writes_loadable_json(tmp_path, capsys):
    table = tmp_path / "profile.csv"
    write_profile_csv(table, synthetic_points(TRUE_FITTED))
    out = tmp_path / "fit.json"
    rc = main(
        [
            "--table",
            str(table),
            "--kind",
            "fitted",
            "--model",
            "llama3_8b",
            "--hardware",
            "h100",
            "--tp",
            "1",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    assert "decode_large_batch=" in capsys.readouterr().out
    hf_name = catalog.load_model("llama3_8b").hf_name
    assert load_fitted(out, hf_name, 1).prefill_ms == pytest.approx(
        TRUE_FITTED.prefill_ms, rel=0.01
    )
    assert json.loads(out.read_text())[hf_name]["1"]["decoding_large_small_bs_threshold"] == 95


def test_cli_roofline_and_errors(tmp_path, capsys, models, hardware):
    table = tmp_path / "profile.csv"
    write_profile_csv(
        table, synthetic_points(RooflineModel(models["llama3_8b"], hardware["h100"], 1, mfu=0.3))
    )
    out = tmp_path / "perf.yaml"
    assert (
        main(
            ["--table", str(table), "--model", "llama3_8b", "--hardware", "h100", "--out", str(out)]
        )
        == 0
    )
    assert "kind: roofline" in out.read_text() and "mfu: 0.3000" in out.read_text()
    assert (
        main(
            ["--table", str(tmp_path / "missing.csv"), "--model", "llama3_8b", "--hardware", "h100"]
        )
        == 2
    )
    assert "error" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
