"""The measured tables' fast paths give the bits of their textbook forms.

Speed changes must not move a result (docs/PERFORMANCE.md), so each fast path is checked here
against the plain formula it replaced, bit for bit: the stacked alternating-least-squares fill
against one matrix at a time with temporaries, the numpy cell medians against pandas' group-by,
the unrolled three-axis lookup against the general corner sum (`LogGrid.corner_sum`), and the kept decode row against
the formula recomputed on every call.
"""

from __future__ import annotations

import bisect
import math

import numpy as np
import pandas as pd
import pytest

from pdsim.perf.loggrid import LogGrid, _segment
from pdsim.perf.table import _complete_log_additive, complete_log_additive_stack


def textbook_fill(values: np.ndarray, iterations: int = 200) -> np.ndarray:
    """The fit as first written: a fresh temporary per operation, the boolean mask as is."""
    known = ~np.isnan(values)
    logs = np.where(known, np.log(np.where(known, values, 1.0)), 0.0)
    rows, cols = np.zeros(values.shape[0]), np.zeros(values.shape[1])
    for _ in range(iterations):
        rows = np.sum((logs - cols[None, :]) * known, axis=1) / np.maximum(known.sum(axis=1), 1)
        cols = np.sum((logs - rows[:, None]) * known, axis=0) / np.maximum(known.sum(axis=0), 1)
    return np.where(known, values, np.exp(rows[:, None] + cols[None, :]))


def holed(rng: np.random.Generator, shape: tuple[int, ...], holes: float) -> np.ndarray:
    values = np.exp(rng.normal(0.0, 2.0, shape))
    values[rng.random(shape) < holes] = np.nan
    return values


@pytest.mark.parametrize("shape", [(3, 4), (9, 17), (12, 15), (20, 9)])
def test_stacked_fill_gives_each_matrix_its_own_bits(shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(shape))
    stack = holed(rng, (6, *shape), 0.3)
    stack[2, 0, :] = np.nan  # a whole row unmeasured
    stack[3] = np.exp(rng.normal(size=shape))  # a complete matrix rides along unchanged
    together = complete_log_additive_stack(stack)
    for alone, matrix in zip(together, stack, strict=True):
        assert alone.tobytes() == textbook_fill(matrix).tobytes()
        assert _complete_log_additive(matrix).tobytes() == alone.tobytes()
    assert together[3].tobytes() == stack[3].tobytes()


def test_grids_built_together_match_the_pandas_cell_medians_and_fills() -> None:
    rng = np.random.default_rng(7)
    frames = {}
    for key in range(4):
        a, b = np.meshgrid([1.0, 2.0, 4.0, 8.0, 16.0], [16.0, 64.0, 256.0, 1024.0], indexing="ij")
        df = pd.DataFrame({"a": a.ravel(), "b": b.ravel(), "latency_ms": np.exp(rng.normal(size=a.size))})
        df = df.drop(index=rng.choice(len(df), 4, replace=False))  # unmeasured cells: fitted
        frames[key] = pd.concat([df, df.iloc[:3].assign(latency_ms=[0.5, np.nan, 9.0])])  # repeats
    grids = LogGrid.from_frames(frames, ("a", "b"), "test")
    for key, df in frames.items():
        medians = df.groupby(["a", "b"]).latency_ms.median()
        ticks = [np.unique(df[c].to_numpy(dtype=float)) for c in ("a", "b")]
        cells = medians.reindex(pd.MultiIndex.from_product(ticks)).to_numpy().reshape(len(ticks[0]), -1)
        assert grids[key].log_ms.tobytes() == np.log(textbook_fill(cells)).tobytes()
        assert grids[key].axes == tuple(np.log(t).tolist() for t in ticks)


def test_three_axis_lookup_is_the_corner_sum() -> None:
    rng = np.random.default_rng(3)
    axes = [np.array([1.0, 8.0, 64.0, 512.0]), np.array([128.0, 1024.0, 8192.0]), np.array([256.0, 4096.0])]
    m, n, k = np.meshgrid(*axes, indexing="ij")
    df = pd.DataFrame({"m": m.ravel(), "n": n.ravel(), "k": k.ravel(), "latency_ms": np.exp(rng.normal(size=m.size))})
    grid = LogGrid.from_frame(df, ("m", "n", "k"), "gemm")
    points = np.exp(rng.uniform(-1.0, 10.0, (500, 3))).tolist()
    points += [[1.0, 128.0, 256.0], [512.0, 8192.0, 4096.0], [8.0, 1024.0, 300.0]]  # on ticks, at edges
    for point in points:
        assert grid(*point) == math.exp(grid.corner_sum(point))  # (the general path: every axis count)
    for m in (0.5, 3.0, 100.0, 5000.0):  # (n, k) seen before: their kept segments, any m
        for _, n, k in points[:50]:
            assert grid(m, n, k) == math.exp(grid.corner_sum([m, n, k]))
    assert len(grid._pairs) == len(points)


def test_kept_decode_row_gives_the_recomputed_series() -> None:
    """Contexts across segments, inside one (a span's: scalars broadcast), past the last tick, below the first."""
    rng = np.random.default_rng(11)
    batch, step = np.meshgrid([1.0, 2.0, 8.0, 32.0, 128.0], [64.0, 512.0, 4096.0, 32768.0], indexing="ij")
    df = pd.DataFrame({"b": batch.ravel(), "s": step.ravel(), "latency_ms": np.exp(rng.normal(size=batch.size))})
    grid = LogGrid.from_frame(df, ("b", "s"), "generation")
    spans = [np.exp(rng.uniform(0.0, 12.0, 300)), 100.0 + np.arange(200.0), 4e4 + 3.0 * np.arange(90.0), np.array([7.0])]
    for x, ys in zip([1.0, 3.0, 3.0, 200.0, 0.5, 3.0, 64.0, 1.0], spans * 2, strict=True):  # repeats: the kept row
        i, u = _segment(grid.axes[0], math.log(max(x, 1e-9)))
        row = grid.log_ms[i] + u * (grid.log_ms[min(i + 1, 4)] - grid.log_ms[i])
        axis, expected = grid.axes[1], []
        for y in ys.tolist():  # libm's log and exp (math), whatever numpy's vector loops would give
            log_y = math.log(max(y, 1e-9))
            j = min(max(bisect.bisect_right(axis, log_y) - 1, 0), len(axis) - 2)
            v = max((log_y - axis[j]) / (axis[j + 1] - axis[j]), 0.0)
            expected.append(math.exp(float(row[j]) + v * (float(row[j + 1]) - float(row[j]))))
        assert grid.along_second(x, ys).tolist() == expected
        assert [grid.at_second(x, y) for y in ys.tolist()] == expected
