"""Profile CSV format and the interpolating table model."""

from __future__ import annotations

import numpy as np
import pytest

from pdsim.perf.profile import ProfilePoint, read_points, read_profile_csv, write_profile_csv
from pdsim.perf.table import TableModel, load_table

SEQS = (1, 4, 16)
PROMPTS = (128, 512, 2048)
CONTEXTS = (256, 1024, 4096)


def prefill_s(b: int, n: int) -> float:
    return 0.01 + 2e-5 * b * n + 1e-9 * b * n * n


def decode_s(b: int, c: int) -> float:
    return 0.02 + 1e-4 * b + 2e-8 * b * c


def grid_points() -> list[ProfilePoint]:
    points = [ProfilePoint("prefill", b, b * n, 0, prefill_s(b, n)) for b in SEQS for n in PROMPTS]
    points += [ProfilePoint("decode", b, b, b * c, decode_s(b, c)) for b in SEQS for c in CONTEXTS]
    return points


def test_exact_at_grid_points():
    table = TableModel.from_points(grid_points())
    for b in SEQS:
        for n in PROMPTS:
            assert table.prefill_time_s([(n, 0)] * b) == pytest.approx(prefill_s(b, n), rel=1e-12)
        for c in CONTEXTS:
            assert table.decode_time_s(b, b * c) == pytest.approx(decode_s(b, c), rel=1e-12)


def test_monotone_between_grid_points():
    table = TableModel.from_points(grid_points())
    for b in (1, 2, 3, 4, 9, 16, 20):
        prefill = [
            table.prefill_time_s([(n, 0)] * b) for n in np.linspace(64, 3000, 60).astype(int)
        ]
        decode = [table.decode_time_s(b, b * c) for c in np.linspace(100, 6000, 60).astype(int)]
        assert np.all(np.diff(prefill) >= 0) and np.all(np.diff(decode) >= 0)
    by_batch = [table.decode_time_s(b, b * 1000) for b in range(1, 25)]
    assert np.all(np.diff(by_batch) >= 0)
    # between two grid points the value lies between them
    assert decode_s(4, 1024) < table.decode_time_s(4, 4 * 2000) < decode_s(4, 4096)


def test_l_shaped_grid_is_completed_separably():
    """Batch varies at one length, length varies at batch 1 (Splitwise's shape)."""
    points = [ProfilePoint("decode", b, b, b * 512, 0.01 * b) for b in (1, 2, 4)]
    points += [ProfilePoint("decode", 1, 1, c, 0.01 * c / 512) for c in (1024, 2048)]
    points += [ProfilePoint("prefill", 1, 512, 0, 0.1)]
    table = TableModel.from_points(points)
    assert table.decode_time_s(4, 4 * 2048) == pytest.approx(0.16)  # 0.04 x (0.04 / 0.01)


def test_cached_context_and_mixed():
    table = TableModel.from_points(grid_points())
    fresh = table.prefill_time_s([(512, 0)])
    assert table.prefill_time_s([(512, 1536)]) == pytest.approx(
        prefill_s(1, 2048) - prefill_s(1, 1536) + prefill_s(1, 128), rel=0.05
    )
    assert table.prefill_time_s([(512, 1536)]) > fresh
    assert table.mixed_time_s([(512, 0)], 4, 4096) >= fresh


def test_profile_csv_roundtrip_and_errors(tmp_path):
    path = tmp_path / "profile.csv"
    write_profile_csv(path, grid_points())
    assert read_points(path) == grid_points()
    table = load_table(path, "any", "any", 1)
    assert table.decode_time_s(1, 256) == pytest.approx(decode_s(1, 256))
    path.write_text("kind,num_seqs,new_tokens,context_tokens,latency_s\nprefil,1,10,0,0.1\n")
    with pytest.raises(ValueError, match=r"profile.csv:2"):
        read_profile_csv(path)
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="neither"):
        read_points(path)


def test_splitwise_table(calibration_file):
    path = calibration_file("splitwise_perf_model.csv")
    table = load_table(path, "llama2_70b", "a100_80g", 8)
    assert table.prefill_time_s([(1024, 0)]) == pytest.approx(0.1545, rel=0.02)  # measured median
    assert table.prefill_time_s([(8192, 0)]) == pytest.approx(1.550, rel=0.02)
    assert table.decode_time_s(1, 2112) == pytest.approx(0.0454, rel=0.03)
    h100 = load_table(path, "llama2_70b", "h100", 8)
    assert h100.prefill_time_s([(8192, 0)]) < table.prefill_time_s([(8192, 0)])
    with pytest.raises(KeyError, match="tensor_parallel=3"):
        load_table(path, "llama2_70b", "a100_80g", 3)
    with pytest.raises(KeyError, match="hardware"):
        load_table(path, "llama2_70b", "b200", 8)
