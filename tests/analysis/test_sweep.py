"""Sweep report from a small tidy results frame."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.sweep import SweepError, config_table, pareto_mask, write_sweep_report

RATES = (1.0, 2.0, 4.0, 8.0, 16.0)


def _row(mode: str, capacity_rps: float, rate: float, **config: int) -> dict:
    load = rate / capacity_rps
    return dict(
        mode=mode,
        rate_rps=rate,
        attainment_both=float(np.clip(1.5 - load, 0.0, 1.0)),
        ttft_p90_s=0.2 * (1.0 + load),
        **config,
    )


def results_frame() -> pd.DataFrame:
    rows = [
        _row("disaggregated", 2.0 * min(3 * p, 2 * d), rate, prefill=p, decode=d, gpus=p + d)
        for p in (1, 2, 3)
        for d in (1, 2, 3)
        for rate in RATES
    ]
    rows += [
        _row("colocated", 2.5 * n, rate, colocated=n, gpus=n) for n in (2, 4, 6) for rate in RATES
    ]
    return pd.DataFrame(rows)


def test_goodput_is_the_highest_rate_meeting_the_target() -> None:
    configs = config_table(results_frame()).set_index("config")
    # capacity 2*min(3, 2) = 4 rps: attainment 1.5 - r/4 >= 0.9 up to r = 2.4 -> 2 rps tested
    assert configs.loc["mode=disaggregated prefill=1 decode=1", "goodput_rps"] == 2.0
    assert configs.loc["mode=colocated colocated=4", "goodput_per_gpu_rps"] == pytest.approx(
        4.0 / 4
    )


def test_pareto_mask() -> None:
    ttft = np.array([0.1, 0.2, 0.3, 0.15])
    per_gpu = np.array([1.0, 2.0, 1.5, 0.5])
    assert pareto_mask(ttft, per_gpu).tolist() == [True, True, False, False]


def test_sweep_report_has_heatmap_curves_and_pareto(tmp_path: Path) -> None:
    path = write_sweep_report(results_frame(), tmp_path / "sweep")
    html = path.read_text()
    titles = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,', html)
    assert titles == [
        "Goodput vs P:D ratio (disaggregated)",
        "SLO attainment vs offered rate",
        "Per-GPU goodput vs TTFT (Pareto front)",
    ]
    assert len(list((tmp_path / "sweep" / "figures").glob("*.png"))) == 3


def test_sweep_report_draws_only_what_columns_allow(tmp_path: Path) -> None:
    frame = results_frame()[["mode", "rate_rps", "attainment_both"]]
    html = write_sweep_report(frame, tmp_path / "sweep").read_text()
    assert html.count("data:image/png;base64,") == 1


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (pd.DataFrame({"rate_rps": [1.0]}), "missing columns ['mode']"),
        (
            pd.DataFrame({"mode": ["colocated"], "rate_rps": ["fast"]}),
            "'rate_rps' has non-numeric value 'fast'",
        ),
        (pd.DataFrame({"mode": [], "rate_rps": []}), "no rows"),
    ],
)
def test_bad_results_frame_raises_and_writes_nothing(
    tmp_path: Path, frame: pd.DataFrame, message: str
) -> None:
    with pytest.raises(SweepError, match=re.escape(message)):
        write_sweep_report(frame, tmp_path / "sweep")
    assert list(tmp_path.iterdir()) == []


def test_rows_like_pdsim_sweep_results(tmp_path: Path) -> None:
    """One row per configuration at its goodput rate, zeros for the other mode's counts."""
    base = dict(
        prefill_tp=1, decode_tp=1, colocated_tp=1, routing="round_robin", attainment_both=0.92
    )
    rows = [
        dict(
            base,
            mode="disaggregated",
            prefill=p,
            decode=d,
            colocated=0,
            gpus=p + d,
            rate_rps=1.5 * min(p, d),
            goodput_rps=1.5 * min(p, d),
            ttft_p90_s=0.3 + 0.1 * d,
        )
        for p in (1, 2)
        for d in (1, 2)
    ] + [
        dict(
            base,
            mode="colocated",
            prefill=0,
            decode=0,
            colocated=n,
            gpus=n,
            rate_rps=0.8 * n,
            goodput_rps=0.8 * n,
            ttft_p90_s=0.5,
        )
        for n in (2, 4)
    ]
    configs = config_table(pd.DataFrame(rows))
    assert set(configs["config"]) >= {
        "mode=colocated colocated=4",
        "mode=disaggregated prefill=2 decode=1",
    }
    html = write_sweep_report(pd.DataFrame(rows), tmp_path / "sweep").read_text()
    assert html.count("data:image/png;base64,") == 3
