"""Interpolating grids over measured latency tables (the tables themselves: optables.py).

`LogGrid` interpolates a table multilinearly in log(latency) over log(axes): exact at measured
points, power laws between them, clamped below the first point and extrapolated along the last
segment above the last one. Cells the source never measured (large batch x long context: out of
memory) are filled from a separable fit log t = row + col over each 2-D slice (table.py).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import pandas as pd

from pdsim.perf.table import complete_log_additive_stack

K = TypeVar("K")  # a grid's key in LogGrid.from_frames
Row = tuple[list[float], list[float], list[float], list[float]]  # LogGrid.second_row: row, drow, axis, width
# LogGrid._second_third: weights and corner indices along two axes
Corners = tuple[tuple[float, float], tuple[float, float], tuple[int, int], tuple[int, int]]


@dataclass(frozen=True, slots=True, eq=False)
class LogGrid:
    """Latencies (ms) on a complete grid; __call__ interpolates in log-log space."""

    axes: tuple[list[float], ...]  # log of each axis, ascending
    log_ms: np.ndarray
    _rows: list | None = None
    _along: dict[float, Row] = field(default_factory=dict)  # second_row's memo
    _pairs: dict[tuple[float, float], Corners] = field(default_factory=dict)  # _interpolate3's memo

    @classmethod
    def from_frame(cls, df: pd.DataFrame, axes: Sequence[str], what: str) -> LogGrid:
        return cls.from_frames({0: df}, axes, what)[0]

    @classmethod
    def from_frames(cls, frames: Mapping[K, pd.DataFrame], axes: Sequence[str], what: str) -> dict[K, LogGrid]:
        """One grid per frame (median of each cell's rows); the cells no row measured, of all
        the grids at once (`_fill_missing`)."""
        measured: dict[K, tuple[tuple[np.ndarray, ...], np.ndarray]] = {}
        for key, df in frames.items():
            if df.empty:
                raise ValueError(f"no {what} rows to build a latency table from")
            ticks, codes = zip(*(np.unique(df[a].to_numpy(dtype=float), return_inverse=True) for a in axes), strict=True)
            shape = [len(t) for t in ticks]
            measured[key] = ticks, _cell_medians(np.asarray(np.ravel_multi_index(codes, shape)),
                                                 df["latency_ms"].to_numpy(dtype=float), shape)
        filled = _fill_missing({key: grid for key, (_, grid) in measured.items()})
        return {key: cls(tuple(np.log(t).tolist() for t in ticks), np.log(filled[key]))
                for key, (ticks, _) in measured.items()}

    def __call__(self, *point: float) -> float:
        """Latency in ms at `point` (one value per axis, each > 0)."""
        if len(point) == 1:
            i, u = _segment(self.axes[0], math.log(max(point[0], 1e-9)))
            row = self.rows
            j = min(i + 1, len(row) - 1)
            return math.exp(row[i] + u * (row[j] - row[i]))
        if len(point) == 2:
            return math.exp(self._interpolate2(point[0], point[1]))
        if len(point) == 3:
            return math.exp(self._interpolate3(point[0], point[1], point[2]))
        return math.exp(self.corner_sum(point))

    def corner_sum(self, point: Sequence[float]) -> float:
        """Log latency at `point`, any number of axes: the weighted sum over the 2^n corners of
        its cell (the one- to three-axis paths above are this, specialised, bit for bit)."""
        corners = [_segment(axis, math.log(max(value, 1e-9)))
                   for axis, value in zip(self.axes, point, strict=True)]
        total = 0.0
        for mask in range(1 << len(corners)):
            weight, index = 1.0, []
            for d, (i, u) in enumerate(corners):
                upper = (mask >> d) & 1
                weight *= u if upper else 1.0 - u
                index.append(min(i + upper, len(self.axes[d]) - 1))
            if weight != 0.0:
                total += weight * self.log_ms[tuple(index)]
        return total

    @property
    def rows(self) -> list:
        """log_ms as nested Python lists (scalar lookups are faster on lists than arrays)."""
        cached = self._rows
        if cached is None:
            cached = self.log_ms.tolist()
            object.__setattr__(self, "_rows", cached)
        return cached

    def _interpolate2(self, x: float, y: float) -> float:
        i, u = _segment(self.axes[0], math.log(max(x, 1e-9)))
        j, v = _segment(self.axes[1], math.log(max(y, 1e-9)))
        g = self.rows
        i1, j1 = min(i + 1, len(g) - 1), min(j + 1, len(g[0]) - 1)
        low = g[i][j] + v * (g[i][j1] - g[i][j])
        high = g[i1][j] + v * (g[i1][j1] - g[i1][j])
        return low + u * (high - low)

    def _interpolate3(self, x: float, y: float, z: float) -> float:
        """The general corner sum below for three axes (GEMM's m, n, k), on nested lists: the
        same weights ((a * b) * c, a = 1 - u or u), corners and additions, in the same order.
        The segments of y and z are kept per (y, z): a GEMM's n and k are a layer's shapes."""
        g, ax = self.rows, self.axes[0]
        i, u = _segment(ax, math.log(max(x, 1e-9)))
        b, c, cols, deps = self._second_third(y, z)
        a, rows = (1.0 - u, u), (i, min(i + 1, len(ax) - 1))
        total = 0.0
        for mask in range(8):
            lo, mid, hi = mask & 1, (mask >> 1) & 1, mask >> 2
            weight = a[lo] * b[mid] * c[hi]
            if weight != 0.0:
                total += weight * g[rows[lo]][cols[mid]][deps[hi]]
        return total

    def _second_third(self, y: float, z: float) -> Corners:
        """_interpolate3's weights and corner indices along the second and third axes, kept
        per (y, z)."""
        hit = self._pairs.get((y, z))
        if hit is not None:
            return hit
        ay, az = self.axes[1], self.axes[2]
        j, v = _segment(ay, math.log(max(y, 1e-9)))
        k, w = _segment(az, math.log(max(z, 1e-9)))
        hit = (1.0 - v, v), (1.0 - w, w), (j, min(j + 1, len(ay) - 1)), (k, min(k + 1, len(az) - 1))
        if len(self._pairs) >= 4096:
            self._pairs.clear()
        self._pairs[(y, z)] = hit
        return hit

    def at_second(self, x: float, y: float) -> float:
        """Latency (ms) at (x, y) along the row kept for x (`second_row`), with libm's log and
        exp (math): every decode path calls this or repeats it operation for operation
        (pdsim/perf/steps/decode.TableStep), so they agree bit for bit on any CPU (numpy's own
        vectorised log and exp differ from libm's in the last bit on some CPUs)."""
        row, drow, axis, width = self.second_row(x)
        log_y = math.log(max(y, 1e-9))
        j = min(max(bisect.bisect_right(axis, log_y) - 1, 0), max(len(axis) - 2, 0))
        v = max((log_y - axis[j]) / width[j], 0.0)
        return math.exp(row[j] + v * drow[j])

    def along_second(self, x: float, ys: np.ndarray) -> np.ndarray:
        """`at_second` for every y of an array."""
        return np.array([self.at_second(x, y) for y in ys.tolist()], dtype=np.float64)

    def second_row(self, x: float) -> Row:
        """at_second's inputs at x: the row interpolated along the first axis, its segment
        differences row[j1] - row[j], the second axis and its segment widths (1.0 where a
        segment has one point), with j1 = min(j + 1, last). Kept per x (a batch size: few
        distinct values)."""
        hit = self._along.get(x)
        if hit is not None:
            return hit
        i, u = _segment(self.axes[0], math.log(max(x, 1e-9)))
        g = self.log_ms
        i1 = min(i + 1, g.shape[0] - 1)
        row = g[i] + u * (g[i1] - g[i])
        axis = np.asarray(self.axes[1])
        up = np.minimum(np.arange(len(axis)) + 1, len(axis) - 1)
        width = np.where(up > np.arange(len(axis)), axis[up] - axis, 1.0)
        hit = row.tolist(), (row[up] - row).tolist(), axis.tolist(), width.tolist()
        if len(self._along) >= 4096:
            self._along.clear()
        self._along[x] = hit
        return hit


def _segment(axis: Sequence[float], value: float) -> tuple[int, float]:
    """Lower index and position in its segment: clamped below, extrapolating above."""
    if len(axis) == 1:
        return 0, 0.0
    i = min(max(bisect.bisect_right(axis, value) - 1, 0), len(axis) - 2)
    lo, hi = axis[i], axis[i + 1]
    return i, max((value - lo) / (hi - lo), 0.0)


def _cell_medians(cells: np.ndarray, latency_ms: np.ndarray, shape: list[int]) -> np.ndarray:
    """The median latency of each cell (flat index per row) on a grid of `shape`; NaN where
    no row (or only NaN latencies) fell. Each cell of the shipped tables holds one row."""
    grid = np.full(math.prod(shape), np.nan)
    counts = np.bincount(cells, minlength=grid.size)
    single = counts[cells] == 1
    grid[cells[single]] = latency_ms[single]
    for cell in np.flatnonzero(counts > 1).tolist():  # repeated measurements
        values = latency_ms[cells == cell]
        values = values[~np.isnan(values)]
        if len(values):
            grid[cell] = np.median(values)
    return grid.reshape(shape)


def _fill_missing(grids: Mapping[K, np.ndarray]) -> dict[K, np.ndarray]:
    """Fill NaN cells slice by slice over the last two axes (separable log fit); the slices of
    one shape, of every grid, in one stacked fit (the same bits as one by one, faster)."""
    out = dict(grids)
    slices: dict[tuple[int, int], list[tuple[K, int]]] = {}
    flat: dict[K, np.ndarray] = {}
    for key, grid in grids.items():
        if np.isnan(grid).any():
            flat[key] = grid.reshape(-1, grid.shape[-2], grid.shape[-1]).copy()
            slices.setdefault(grid.shape[-2:], []).extend((key, i) for i in range(len(flat[key])))
    for members in slices.values():
        done = complete_log_additive_stack(np.stack([flat[key][i] for key, i in members]))
        for (key, i), filled in zip(members, done, strict=True):
            flat[key][i] = filled
    for key, f in flat.items():
        out[key] = f.reshape(grids[key].shape)
    return out


@dataclass(frozen=True, eq=False)
class HeadTables:
    """One attention table per (num_heads, num_kv_heads) of one rank, head_dim 128."""

    grids: dict[tuple[int, int], LogGrid]
    fixed: dict[tuple[float, float], LogGrid] = field(default_factory=dict)  # fixed_heads memo

    @classmethod
    def from_frame(cls, df: pd.DataFrame, token_axis: str, what: str) -> HeadTables:
        parts = {(int(h), int(kv)): part for (h, kv), part in df.groupby(["num_heads", "num_key_value_heads"])}
        return cls(LogGrid.from_frames(parts, ("batch_size", token_axis), what))

    def fixed_heads(self, heads: float, kv_heads: float) -> LogGrid:
        """A (batch, tokens) grid for one head configuration: lookups then cost one 2-D
        interpolation (evaluated on the ticks of the nearest table)."""
        key = (heads, kv_heads)
        if key not in self.fixed:
            batches = sorted({b for g in self.grids.values() for b in g.axes[0]})
            tokens = sorted({t for g in self.grids.values() for t in g.axes[1]})
            values = np.array([[self(heads, kv_heads, math.exp(b), math.exp(t)) for t in tokens]
                               for b in batches])
            self.fixed[key] = LogGrid((batches, tokens), np.log(np.maximum(values, 1e-9)))
        return self.fixed[key]

    def __call__(self, heads: float, kv_heads: float, batch: float, tokens: float) -> float:
        """ms; MHA looks among MHA tables, GQA among tables of the nearest KV head count;
        head counts between tables interpolate linearly (time grows with heads)."""
        mha = abs(heads - kv_heads) < 1e-9
        if mha:
            keys = sorted(k for k in self.grids if k[0] == k[1])
        else:
            kvs = sorted({kv for h, kv in self.grids if h != kv})
            kv = min(kvs, key=lambda x: (abs(np.log(x) - np.log(max(kv_heads, 1e-9))), x))
            keys = sorted(k for k in self.grids if k[1] == kv and k[0] != k[1])
        hs = np.array([k[0] for k in keys], dtype=float)
        j = int(np.clip(np.searchsorted(hs, heads, side="right") - 1, 0, max(len(hs) - 2, 0)))
        low = self.grids[keys[j]](batch, tokens)
        if len(keys) == 1:
            return low * heads / hs[0]
        high = self.grids[keys[j + 1]](batch, tokens)
        if heads <= hs[0]:
            return low * heads / hs[0]
        u = (heads - hs[j]) / (hs[j + 1] - hs[j])
        return max(low + u * (high - low), 0.0)
