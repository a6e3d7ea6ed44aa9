"""Plots over time: a Gantt-style timeline of sampled requests, and instance timeseries.

Timeseries frames are read tolerantly: `time_s` is required; `instance_id` and `role` are used
when present; every other numeric column is plotted. Columns whose name says they are a share
(`fraction`, `util`, `ratio`) are averaged over instances; the rest (queue lengths, counts) are
summed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.figure import (
    Plot,
    grid_shape,
    hide_unused,
    new_figure,
    no_data,
    render,
    spans_decades,
)
from analysis.stages import STAGE_SPANS
from pdsim.rng import stream

SHARE_MARKERS = ("fraction", "util", "ratio")
ID_COLUMNS = ("time_s", "instance_id")
MAX_INSTANCE_LINES = 16
RUN_STYLES = ("-", "--", ":", "-.")
PREFILL_SIDE = frozenset(
    {"route_s", "bootstrap_s", "prefill_waiting_s", "prefill_forward_s", "inflight_s"}
)


def sample_positions(n_rows: int, k: int, seed: int = 0) -> np.ndarray:
    """k row positions drawn without replacement (all rows when n_rows <= k), sorted."""
    if n_rows <= k:
        return np.arange(n_rows)
    picked = stream(seed, "analysis.timeline").choice(n_rows, size=k, replace=False)
    return np.sort(picked)


def gantt(name: str, title: str, runs: dict[str, pd.DataFrame]) -> Plot:
    """One panel per run; each request is a row of two lanes (prefill side above, decode side
    below) of coloured stage bars (see STAGE_SPANS), on time since the request's arrival.

    The frames should hold the same requests in the same order so the panels line up. The time
    axis is symmetric-log (linear below 1 ms) when the stages span decades.
    """
    rows = max(len(f) for f in runs.values())
    fig, axes = new_figure(len(runs), 1, panel=(11.0, 0.28 * rows + 1.8))
    colors = _stage_colors()
    spans_all = []
    for k, (ax, (label, frame)) in enumerate(zip(axes.ravel(), runs.items(), strict=True)):
        frame = frame.sort_values(["arrival_s", "request_id"], kind="stable").reset_index(drop=True)
        spans_all.append(_draw_lanes(ax, frame, colors))
        ticks = [
            f"{r} @{t:.4g}s" for r, t in zip(frame["request_id"], frame["arrival_s"], strict=True)
        ]
        ax.set_yticks(np.arange(len(frame)), ticks, fontsize=7)
        ax.set_ylim(len(frame) - 0.4, -0.6)
        ax.set(
            title=f"{label} (upper lane: prefill side, lower lane: decode side)",
            xlabel="time since the request's arrival (s)",
            ylabel="request id @ arrival",
        )
        ax.grid(alpha=0.3, axis="x")
        if k == 0:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    if spans_decades(*spans_all):
        for ax in axes.ravel():
            ax.set_xscale("symlog", linthresh=1e-3)
    return render(fig, name, title)


def _draw_lanes(ax: Any, frame: pd.DataFrame, colors: list[Any]) -> np.ndarray:
    ys = np.arange(len(frame))
    arrival = frame["arrival_s"].to_numpy(dtype=float)
    widths = []
    for (stage, stage_label, start, end), color in zip(STAGE_SPANS, colors, strict=True):
        left = frame[start].to_numpy(dtype=float) - arrival
        width = frame[end].to_numpy(dtype=float) - arrival - left
        ok = np.isfinite(left) & np.isfinite(width) & (width > 0)
        lane = -0.2 if stage in PREFILL_SIDE else 0.2
        if ok.any():
            ax.barh(
                ys[ok] + lane, width[ok], left=left[ok], height=0.38, color=color, label=stage_label
            )
            widths.append(width[ok])
    ax.plot(
        frame["first_token_s"].to_numpy(dtype=float) - arrival, ys, "k.", ms=5, label="first token"
    )
    return np.concatenate(widths) if widths else np.array([])


def _stage_colors() -> list[tuple[float, float, float, float]]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return [cmap(i % 10) for i in range(len(STAGE_SPANS))]


def value_columns(ts: pd.DataFrame) -> list[str]:
    """Numeric columns to plot: everything numeric except time and instance id."""
    return [
        c
        for c in ts.columns
        if c not in ID_COLUMNS
        and pd.api.types.is_numeric_dtype(ts[c])
        and not pd.api.types.is_bool_dtype(ts[c])
    ]


def _is_share(column: str) -> bool:
    return any(marker in column for marker in SHARE_MARKERS)


def by_role(ts: pd.DataFrame, column: str) -> dict[str, pd.Series]:
    """The column over time per role: mean over instances for shares, sum otherwise."""
    roles = ts["role"].astype(str) if "role" in ts.columns else pd.Series("all", index=ts.index)
    how = "mean" if _is_share(column) else "sum"
    out = {}
    for role, part in ts.groupby(roles, sort=True):
        out[str(role)] = part.groupby("time_s", sort=True)[column].agg(how)
    return out


def _all_zero(ts: pd.DataFrame, column: str) -> bool:
    if column not in ts.columns:
        return True
    values = ts[column].to_numpy(dtype=float)
    return bool(np.all((values == 0) | np.isnan(values)))


def timeseries_overlay(name: str, title: str, runs: dict[str, pd.DataFrame]) -> Plot | None:
    """One panel per numeric column (union over runs), one line per (run, role): colour by
    role, line style by run. Columns that are zero throughout every run are listed in the
    caption instead of drawn."""
    found = sorted({c for ts in runs.values() for c in value_columns(ts)})
    flat = [c for c in found if all(_all_zero(ts, c) for ts in runs.values())]
    columns = [c for c in found if c not in flat]
    if not columns:
        return None
    fig, axes = new_figure(*grid_shape(len(columns), max_cols=2), panel=(6.0, 3.4))
    roles = sorted(
        {
            str(r)
            for ts in runs.values()
            for r in (ts["role"].unique() if "role" in ts.columns else ["all"])
        }
    )
    color = {role: f"C{i % 10}" for i, role in enumerate(roles)}
    for ax, column in zip(axes.ravel(), columns, strict=False):
        for k, (label, ts) in enumerate(runs.items()):
            if column not in ts.columns:
                continue
            for role, series in by_role(ts, column).items():
                ax.plot(
                    series.index,
                    series.to_numpy(),
                    RUN_STYLES[k % len(RUN_STYLES)],
                    lw=1.2,
                    color=color[role],
                    label=f"{label} {role}",
                )
        how = "mean over instances" if _is_share(column) else "sum over instances"
        ax.set(title=column, xlabel="time (s)", ylabel=f"{column} ({how})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    hide_unused(axes, len(columns))
    caption = f"zero throughout, not drawn: {', '.join(flat)}" if flat else ""
    return render(fig, name, title, caption)


def utilisation(name: str, title: str, ts: pd.DataFrame) -> Plot | None:
    """Per instance over time: the share-like columns (e.g. kv_used_fraction), else all."""
    columns = [c for c in value_columns(ts) if _is_share(c)] or value_columns(ts)
    if not columns or "instance_id" not in ts.columns:
        return None
    fig, axes = new_figure(*grid_shape(len(columns), max_cols=2), panel=(6.0, 3.4))
    role = ts["role"].astype(str) if "role" in ts.columns else pd.Series("", index=ts.index)
    keys = sorted(set(zip(role, ts["instance_id"], strict=True)))[:MAX_INSTANCE_LINES]
    for ax, column in zip(axes.ravel(), columns, strict=False):
        for r, instance in keys:
            part = ts[(role == r) & (ts["instance_id"] == instance)]
            ax.plot(part["time_s"], part[column], lw=1.0, label=f"{r} {instance}".strip())
        if not keys:
            no_data(ax, column)
        if _is_share(column):
            ax.set_ylim(-0.02, 1.02)
        ax.set(
            title=column,
            xlabel="time (s)",
            ylabel=f"{column} (share)" if _is_share(column) else column,
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncols=2)
    hide_unused(axes, len(columns))
    return render(fig, name, title)
