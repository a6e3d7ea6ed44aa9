"""The time series' columns: sampled rows per instance, labels as a list of strings would give."""

from __future__ import annotations

import numpy as np
import pandas as pd
from simkit import make_config, synthetic

from pdsim.sim import simulate
from pdsim.sim.timeseries import COLUMNS, _labels


def test_labels_are_what_a_list_of_strings_gives() -> None:
    pos = np.array([2, 0, 2, 1], dtype=np.int64)
    names = ["prefill:0", "decode:0", "decode:1"]
    pd.testing.assert_series_equal(_labels(names, pos), pd.Series([names[p] for p in pos]), check_exact=True)
    no_rows = np.zeros(0, dtype=np.int64)
    pd.testing.assert_series_equal(_labels(names, no_rows), pd.Series([]), check_exact=True)
    pd.testing.assert_series_equal(_labels([], no_rows), pd.Series([]), check_exact=True)


def test_one_row_per_instance_and_sample() -> None:
    cfg = make_config(cluster=dict(prefill=2, decode=3), timeseries_interval_s=0.5)
    ts = simulate(cfg, synthetic(40, seed=3)).timeseries
    assert list(ts.columns) == list(COLUMNS)
    samples = ts["time_s"].unique()
    assert len(ts) == 5 * len(samples) and np.allclose(np.diff(samples), 0.5)
    first = ts[ts["time_s"] == samples[0]]
    assert first["instance"].tolist() == ["prefill:0", "prefill:1", "decode:0", "decode:1", "decode:2"]
    assert first["role"].tolist() == ["prefill", "prefill", "decode", "decode", "decode"]
    assert first["instance_id"].tolist() == [0, 1, 0, 1, 2]
    assert ts["instance"].dtype == pd.Series(["x"]).dtype and ts["queue_running"].dtype == np.int64
    assert (ts["kv_used_fraction"].between(0.0, 1.0)).all() and ts["batch_size"].max() > 0
    empty = simulate(make_config(timeseries_interval_s=0.0), synthetic(5, seed=3)).timeseries
    assert list(empty.columns) == list(COLUMNS) and len(empty) == 0
