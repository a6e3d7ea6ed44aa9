"""Step latency interpolated over measured points (see profile.py for the CSV formats).

Each phase is a grid over (num_seqs, tokens per sequence): prefill uses new tokens per prompt
(rows without cached context), decode uses KV length per sequence. Repeated measurements of a
cell take their median. Profiles rarely fill the grid (Splitwise varies batch at one prompt
length and prompt length at batch 1), so empty cells are filled from a two-way fit
log t[i, j] = row_i + col_j over the measured cells — separable scaling, exact where the grid
is L-shaped. Values are then raised to their running maximum along the tokens axis, so a longer
prompt or context never costs less (noisy measurements can otherwise dip). The batch axis is left
as measured: step time need not grow with the batch size (CPU GEMM kernels for 2-3 rows are
slower than the blocked kernel used from 4 rows on; GPU tile quantization has the same effect).

Lookup is bilinear inside the grid; below the first point it holds the first value, beyond the
last it extends the last segment linearly. A prefill chunk after c cached tokens costs
t(n + c) - t(c) + t(smallest measured): the extra work of the longer prompt plus the fixed cost.
A mixed step adds to the prefill the decode time above the smallest decode measurement.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pdsim.perf.base import PrefillItem, PrefillTimer
from pdsim.perf.profile import ProfilePoint, read_points
from pdsim.perf.steps.decode import CallStep

log = logging.getLogger(__name__)


def _complete_log_additive(values: np.ndarray) -> np.ndarray:
    """Fill NaN cells of a positive matrix with exp(row_i + col_j) fitted on the known cells."""
    if not np.isnan(values).any():
        return values
    return complete_log_additive_stack(values[None])[0]


def complete_log_additive_stack(stack: np.ndarray, iterations: int = 200) -> np.ndarray:
    """`_complete_log_additive` of each matrix of a (count, rows, cols) stack, all at once.

    Alternating least squares on the known cells. Every matrix gets the bits it gets alone (the
    sums run along the same axes in the same order); the loop reuses one buffer and a float copy
    of the mask (x * 1.0 is x * True), so a stack of many costs little more than one."""
    known = ~np.isnan(stack)
    mask = known.astype(float)
    logs = np.where(known, np.log(np.where(known, stack, 1.0)), 0.0)
    row_n = np.maximum(known.sum(axis=2), 1)
    col_n = np.maximum(known.sum(axis=1), 1)
    rows = np.zeros(stack.shape[:2])
    cols = np.zeros((stack.shape[0], stack.shape[2]))
    work = np.empty_like(logs)
    for _ in range(iterations):
        np.multiply(np.subtract(logs, cols[:, None, :], out=work), mask, out=work)
        rows = work.sum(axis=2) / row_n
        np.multiply(np.subtract(logs, rows[:, :, None], out=work), mask, out=work)
        cols = work.sum(axis=1) / col_n
    return np.where(known, stack, np.exp(rows[:, :, None] + cols[:, None, :]))


def _segment(axis: np.ndarray, value: float) -> tuple[int, float]:
    """Segment index and position along it (clamped below, extrapolating above)."""
    if len(axis) == 1:
        return 0, 0.0
    i = int(np.clip(np.searchsorted(axis, value, side="right") - 1, 0, len(axis) - 2))
    t = (value - axis[i]) / (axis[i + 1] - axis[i])
    return i, max(t, 0.0)


@dataclass(frozen=True, slots=True, eq=False)
class Grid2D:
    """Latencies (s) on a num_seqs x tokens-per-sequence grid, complete and monotone."""

    seqs: np.ndarray
    tokens: np.ndarray
    latency_s: np.ndarray

    @classmethod
    def from_points(cls, keyed: Sequence[tuple[float, float, float]], what: str) -> Grid2D:
        """Build from (num_seqs, tokens_per_seq, latency_s) triples."""
        if not keyed:
            raise ValueError(f"no {what} points to build a latency table from")
        seqs = np.unique([k[0] for k in keyed])
        tokens = np.unique([k[1] for k in keyed])
        cells: dict[tuple[int, int], list[float]] = {}
        for s, t, lat in keyed:
            key = (int(np.searchsorted(seqs, s)), int(np.searchsorted(tokens, t)))
            cells.setdefault(key, []).append(lat)
        values = np.full((len(seqs), len(tokens)), np.nan)
        for (i, j), lats in cells.items():
            values[i, j] = float(np.median(lats))
        filled = _complete_log_additive(values)
        monotone = np.maximum.accumulate(filled, axis=1)
        return cls(seqs.astype(float), tokens.astype(float), monotone)

    def __call__(self, seqs: float, tokens: float) -> float:
        i, u = _segment(self.seqs, seqs)
        j, v = _segment(self.tokens, tokens)
        i1 = min(i + 1, len(self.seqs) - 1)
        j1 = min(j + 1, len(self.tokens) - 1)
        g = self.latency_s
        low = g[i, j] + v * (g[i, j1] - g[i, j])
        high = g[i1, j] + v * (g[i1, j1] - g[i1, j])
        return float(low + u * (high - low))

    @property
    def floor_s(self) -> float:
        """The smallest latency on the grid (the fixed cost of a step)."""
        return float(self.latency_s[0, 0])


@dataclass(frozen=True, eq=False)
class TableModel:
    """Interpolated prefill and decode grids from one setup's profile."""

    prefill: Grid2D
    decode: Grid2D
    name: str = "table"

    @classmethod
    def from_points(cls, points: Sequence[ProfilePoint]) -> TableModel:
        fresh = [p for p in points if p.kind == "prefill" and p.context_tokens == 0]
        skipped = sum(1 for p in points if p.kind == "prefill" and p.context_tokens > 0)
        if skipped:
            log.info("latency table: %d prefill rows with cached context are not gridded", skipped)
        prefill = [(p.num_seqs, p.new_tokens / p.num_seqs, p.latency_s) for p in fresh]
        decode = [
            (p.num_seqs, p.context_tokens / p.num_seqs, p.latency_s)
            for p in points
            if p.kind == "decode"
        ]
        return cls(Grid2D.from_points(prefill, "prefill"), Grid2D.from_points(decode, "decode"))

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        if not items:
            return 0.0
        seqs = len(items)
        new = sum(n for n, _ in items) / seqs
        cached = sum(c for _, c in items) / seqs
        if cached <= 0:
            return self.prefill(seqs, new)
        smallest = self.prefill(seqs, self.prefill.tokens[0])
        return self.prefill(seqs, new + cached) - self.prefill(seqs, cached) + smallest

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        return self.decode(num_seqs, context_tokens / num_seqs)

    def decode_step(self, num_seqs: int) -> CallStep:
        return CallStep(num_seqs, self.decode_time_s)  # (a bilinear lookup: called once a step)

    def prefill_timer(self) -> PrefillTimer:
        return self.prefill_time_s

    def mixed_time_s(
        self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int
    ) -> float:
        if not items:
            return self.decode_time_s(num_seqs, context_tokens)
        extra = (
            max(0.0, self.decode_time_s(num_seqs, context_tokens) - self.decode.floor_s)
            if num_seqs
            else 0.0
        )
        return self.prefill_time_s(items) + extra


def load_table(path: Path, model: str, hardware: str, tp: int) -> TableModel:
    """A TableModel from a profile or Splitwise CSV, for one (model, hardware, tp)."""
    points = read_points(path, model, hardware, tp)
    if not points:
        raise ValueError(f"{path}: no rows for model={model!r} hardware={hardware!r} tp={tp}")
    return TableModel.from_points(points)
