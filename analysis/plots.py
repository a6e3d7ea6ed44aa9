"""Distribution plots: CDF overlays, sim-vs-real scatter, error boxes, stage bars, SLO scale.

Each function takes data (per-request metric frames from `analysis.stages.request_metrics`,
keyed by run label) and returns a rendered `Plot`; nothing is written here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from analysis.figure import (
    Plot,
    ecdf,
    grid_shape,
    hide_unused,
    new_figure,
    no_data,
    render,
    spans_decades,
)
from analysis.stages import Metric
from pdsim import metrics
from pdsim.metrics import Slo

SLO_SCALES = np.geomspace(0.25, 4.0, 17)
RUN_STYLES = ("-", "--", ":", "-.")  # later runs dashed, so identical curves stay visible


def _x_scale(ax: Any, values: np.ndarray) -> None:
    """Log when the values span decades; a readable window when they are all equal."""
    if spans_decades(values):
        ax.set_xscale("log")
        return
    lo, hi = float(np.nanmin(values)), float(np.nanmax(values))
    if lo == hi:
        ax.set_xlim(lo - max(abs(lo), 1e-3) * 0.5, hi + max(abs(hi), 1e-3) * 0.5)
    ax.locator_params(axis="x", nbins=5)


def cdf_overlay(
    name: str, title: str, chosen: tuple[Metric, ...], runs: dict[str, pd.DataFrame]
) -> Plot:
    """One panel per metric, one empirical CDF per run."""
    fig, axes = new_figure(*grid_shape(len(chosen)))
    for ax, metric in zip(axes.ravel(), chosen, strict=False):
        samples = {label: values[metric.name].dropna() for label, values in runs.items()}
        if all(s.empty for s in samples.values()):
            no_data(ax, metric.label)
            continue
        for k, (label, sample) in enumerate(samples.items()):
            x, y = ecdf(sample)
            ax.step(
                x, y, RUN_STYLES[k % len(RUN_STYLES)], where="post", label=f"{label} (n={x.size})"
            )
        _x_scale(ax, np.concatenate([s.to_numpy(dtype=float) for s in samples.values()]))
        ax.set(
            title=metric.label,
            xlabel=f"{metric.label} (s)",
            ylabel="fraction of requests",
            ylim=(0, 1.02),
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    hide_unused(axes, len(chosen))
    return render(fig, name, title)


def scatter(
    name: str,
    title: str,
    chosen: tuple[Metric, ...],
    values_a: pd.DataFrame,
    values_b: pd.DataFrame,
    labels: tuple[str, str],
) -> Plot:
    """Per aligned request: candidate (y) against reference (x), with the y = x line."""
    fig, axes = new_figure(*grid_shape(len(chosen)), panel=(4.2, 4.0))
    for ax, metric in zip(axes.ravel(), chosen, strict=False):
        x = values_b[metric.name].to_numpy(dtype=float)
        y = values_a[metric.name].to_numpy(dtype=float)
        ok = np.isfinite(x) & np.isfinite(y)
        if not ok.any():
            no_data(ax, f"{metric.label} pairs")
            continue
        ax.scatter(x[ok], y[ok], s=8, alpha=0.5, label=f"requests (n={ok.sum()})")
        lo, hi = float(min(x[ok].min(), y[ok].min())), float(max(x[ok].max(), y[ok].max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        if spans_decades(x[ok], y[ok]) and lo > 0:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set(
            title=metric.label,
            xlabel=f"{labels[1]} {metric.label} (s)",
            ylabel=f"{labels[0]} {metric.label} (s)",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    hide_unused(axes, len(chosen))
    return render(fig, name, title)


def error_boxes(name: str, title: str, chosen: tuple[Metric, ...], errors: pd.DataFrame) -> Plot:
    """Per metric, the distribution of per-request relative error (%), whiskers at p5/p95."""
    fig, axes = new_figure(panel=(9.0, 0.45 * len(chosen) + 1.6))
    ax = axes[0, 0]
    data = [errors[m.name].dropna().to_numpy() * 100 for m in chosen]
    keep = [i for i, d in enumerate(data) if d.size]
    if not keep:
        no_data(ax, "per-request errors")
        return render(fig, name, title)
    ax.boxplot(
        [data[i] for i in keep],
        orientation="horizontal",
        whis=(5, 95),
        showfliers=False,
        tick_labels=[f"{chosen[i].label} (n={data[i].size})" for i in keep],
    )
    ax.axvline(0, color="k", lw=1, ls="--")
    ax.invert_yaxis()
    ax.set(xlabel="relative error per request (%), box = p25-p75, whiskers = p5-p95")
    ax.grid(alpha=0.3, axis="x")
    return render(fig, name, title)


def stage_bars(
    name: str, title: str, stages: tuple[Metric, ...], runs: dict[str, pd.DataFrame]
) -> Plot:
    """Mean seconds per request in each stage, one bar per run."""
    fig, axes = new_figure(panel=(9.0, 0.5 * len(stages) * max(len(runs), 1) ** 0.5 + 1.6))
    ax = axes[0, 0]
    height = 0.8 / max(len(runs), 1)
    ys = np.arange(len(stages))
    means_all = []
    for i, (label, values) in enumerate(runs.items()):
        means = np.array([values[s.name].mean() for s in stages], dtype=float)
        means_all.append(means)
        ax.barh(ys + i * height, np.nan_to_num(means), height=height, label=label)
    ax.set_yticks(ys + height * (len(runs) - 1) / 2, [s.label for s in stages])
    ax.invert_yaxis()
    if spans_decades(*means_all):
        ax.set_xscale("log")
    ax.set(xlabel="mean time per request (s)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=8)
    return render(fig, name, title)


def attainment_vs_scale(
    name: str, title: str, traces: dict[str, pd.DataFrame], slo: Slo, tpot_definition: str
) -> Plot:
    """Attainment (TTFT, TPOT, both) as both SLOs are multiplied by a common scale."""
    fig, axes = new_figure(panel=(7.0, 4.2))
    ax = axes[0, 0]
    styles = {"ttft": ":", "tpot": "--", "both": "-"}
    for label, frame in traces.items():
        curves = _attainment_curves(frame, slo, tpot_definition)
        for kind, style in styles.items():
            ax.plot(SLO_SCALES, curves[kind], style, marker=".", label=f"{label}: {kind}")
    ax.axhline(
        slo.attainment_target, color="grey", lw=1, label=f"target {slo.attainment_target:.0%}"
    )
    ax.axvline(1.0, color="grey", lw=1, ls="-.")
    ax.set_xscale("log", base=2)
    ax.set_xticks([0.25, 0.5, 1, 2, 4], ["0.25", "0.5", "1", "2", "4"])
    ax.set(
        xlabel=f"SLO scale (1 = TTFT {slo.ttft_s:g} s, TPOT {slo.tpot_s:g} s)",
        ylabel="share of requests meeting SLO",
        ylim=(-0.02, 1.02),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncols=2)
    return render(fig, name, title)


def _attainment_curves(
    frame: pd.DataFrame, slo: Slo, tpot_definition: str
) -> dict[str, list[float]]:
    curves: dict[str, list[float]] = {"ttft": [], "tpot": [], "both": []}
    for scale in SLO_SCALES:
        scaled = Slo(slo.ttft_s * scale, slo.tpot_s * scale, slo.attainment_target)
        for kind, value in metrics.attainment(frame, scaled, tpot_definition).items():
            curves[kind].append(value)
    return curves
