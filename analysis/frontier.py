"""`pdsim frontier`'s chart and page: frontier.png and frontier.html in the sweep directory.

Reached through the `pdsim.frontier_reports` entry point (pdsim/plugins.py), called with the
points frame of pdsim.search.frontier_task (one row per deployment and concurrency, with
`family`, `deployment`, `deployment_text`, `concurrency`, `tokens_per_s_per_user_mean`,
`output_tokens_per_s_per_gpu`, `steady_state_reached`, `meets_slo`, `on_frontier`,
`on_slo_frontier`, latency columns) and the run's meta (model, hardware, gpus, scenario,
target, slo_text, best per family).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from analysis.figure import Plot, new_figure, render
from analysis.html import Document, Section, Table, render_html

X, Y = "tokens_per_s_per_user_mean", "output_tokens_per_s_per_gpu"
Y_AT = "output_tokens_per_s_per_gpu_at_target"
RANKING_NOTE = ("the most tokens/s/GPU each deployment gives at >= the target with its SLO met: a measured point, "
                "or (interpolated) the line between two neighbouring ladder points that straddle the target")
COLORS = {"colocated": "#1f77b4", "disaggregated": "#d62728"}
NAMES = {"colocated": "colocated", "disaggregated": "disaggregated (PD)"}
PNG_NAME, HTML_NAME = "frontier.png", "frontier.html"
LABEL_GAP = 0.08  # of the axes' spans
COLUMNS = ["family", "deployment_text", "concurrency", "point_requests", X, Y, "output_tokens_per_s",
           "ttft_p90_s", "tpot_p90_s", "attainment_both", "meets_slo", "steady_state_reached"]


def _draw_deployments(ax: Any, points: pd.DataFrame) -> None:
    """Each deployment's ladder, faint, in its family's colour; SLO misses as crosses."""
    for (family, _), dep in points.groupby(["family", "deployment"], sort=True):
        dep = dep.sort_values("concurrency")
        color = COLORS.get(family, "gray")
        ax.plot(dep[X], dep[Y], "-", color=color, alpha=0.18, lw=0.8)
        met = dep["meets_slo"].astype(bool)
        ax.plot(dep.loc[met, X], dep.loc[met, Y], "o", color=color, alpha=0.35, ms=3)
        ax.plot(dep.loc[~met, X], dep.loc[~met, Y], "x", color=color, alpha=0.35, ms=3.5)


def _draw_frontiers(ax: Any, points: pd.DataFrame) -> None:
    """Per family: the frontier of SLO-meeting points (solid, labelled where the deployment
    changes) and of all steady points (dashed)."""
    for family, group in points.groupby("family", sort=True):
        color = COLORS.get(family, "gray")
        every = group[group["on_frontier"]].sort_values(X)
        ax.plot(every[X], every[Y], "--", color=color, lw=1.0, alpha=0.7)
        front = group[group["on_slo_frontier"]].sort_values(X)
        ax.plot(front[X], front[Y], "-o", color=color, lw=2.2, ms=4.5, label=f"{NAMES.get(family, family)} frontier")
        _label_runs(ax, front, color, scale=(points[X].max() or 1.0, points[Y].max() or 1.0))


def _label_runs(ax: Any, front: pd.DataFrame, color: str, scale: tuple[float, float]) -> None:
    """Name the deployment where the frontier changes to it, unless a label is already close
    by (within LABEL_GAP of the axes' spans: near-equal deployments trade places there)."""
    previous, last = None, None
    for _, row in front.iterrows():
        here = (row[X] / scale[0], row[Y] / scale[1])
        near = last is not None and abs(here[0] - last[0]) < LABEL_GAP and abs(here[1] - last[1]) < LABEL_GAP
        if row["deployment_text"] != previous and not near:
            text = row["deployment_text"].removeprefix("colocated ").removeprefix("PD ")
            ax.annotate(text, (row[X], row[Y]), textcoords="offset points", xytext=(4, 4), fontsize=6.5, color=color)
            last = here
        previous = row["deployment_text"]


def _draw_target(ax: Any, meta: dict[str, Any]) -> None:
    """The target line; a star on the best deployment's tokens/s/GPU there, hollow for the other family's."""
    target = meta["target_tokens_per_s_per_user"]
    ax.axvline(target, color="0.4", ls=":", lw=1.2)
    best = meta.get("best")
    if best is not None:
        ax.plot([target], [best[Y_AT]], "*", color="gold", mec="black", ms=16, zorder=5,
                label=f"best at {target:g} tok/s/user: {best['deployment_text']} ({best[Y_AT]:.0f} tok/s/GPU)")
    for family in COLORS:
        other = meta.get(family)
        if other is not None and (best is None or other["deployment"] != best["deployment"]):
            ax.plot([target], [other[Y_AT]], "*", color="white", mec=COLORS[family], ms=11, zorder=4,
                    label=f"best {NAMES[family]}: {other['deployment_text']} ({other[Y_AT]:.0f})")


def frontier_plot(points: pd.DataFrame, meta: dict[str, Any]) -> Plot:
    fig, axes = new_figure(panel=(8.0, 5.0))
    ax = axes[0, 0]
    _draw_deployments(ax, points)
    _draw_frontiers(ax, points)
    _draw_target(ax, meta)
    ax.set_xlabel("tokens/s per user (1 / TPOT, mean over requests)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7.5, loc="upper right")
    title = f"{meta['model']} on {meta['gpus']} x {meta['hardware']}: {meta['scenario']}, {meta['slo_text']}"
    caption = ("faint: each deployment's concurrency ladder (x: SLO missed); solid: frontier of SLO-meeting "
               "points; dashed: frontier of all steady points; dotted: the interactivity target")
    return render(fig, "frontier", title, caption)


def _verdict(meta: dict[str, Any]) -> str:
    """One sentence: the best deployment at the target, per family, and the gain."""
    target, best = meta["target_tokens_per_s_per_user"], meta.get("best")
    if best is None:
        return f"No deployment reaches {target:g} tokens/s/user while meeting {meta['slo_text']}."
    parts = [f"At {target:g} tokens/s/user meeting {meta['slo_text']}: best {best['deployment_text']}, "
             f"{best[Y_AT]:.0f} output tokens/s per GPU"]
    for family, name in NAMES.items():
        other = meta.get(family)
        parts.append(f"best {name}: " + ("none" if other is None else f"{other['deployment_text']} ({other[Y_AT]:.0f})"))
    gain = meta.get("gain_disaggregated_over_colocated")
    return "; ".join(parts) + (f"; disaggregated / colocated x{gain:.2f}." if gain else ".")


def frontier_document(points: pd.DataFrame, meta: dict[str, Any], plot: Plot) -> Document:
    target = meta["target_tokens_per_s_per_user"]
    text = (_verdict(meta),
            "Closed loop: C clients, each sending its next request when its previous one ends; every point sends "
            "C x (1 + frontier.rounds) requests and is measured over its steady-state window (warm-up burst and "
            "drain excluded). tokens/s per user = 1 / TPOT per request, TPOT = (last token - first token) / "
            "(output tokens - 1); output tokens/s per GPU = output tokens finished in the window / window / GPUs.")
    front = points[points["on_slo_frontier"] | points["on_frontier"]].sort_values(["family", X])
    sections = (
        Section("Frontier", text=text, plots=(plot,),
                tables=(Table(f"every deployment at {target:g} tokens/s/user", pd.DataFrame(meta.get("ranking", [])),
                              note=RANKING_NOTE),)),
        Section("Frontier points", tables=(Table("on either frontier", front[COLUMNS + ["on_slo_frontier"]]),)),
        Section("Every point", tables=(Table("all deployments and concurrencies", points[COLUMNS]),)),
    )
    return Document(f"Frontier: {meta['model']} on {meta['gpus']} x {meta['hardware']}", sections)


def write_frontier_report(points: pd.DataFrame, meta: dict[str, Any], out_dir: Path | str) -> Path:
    """frontier.png and frontier.html (self-contained) in `out_dir`; returns the page's path."""
    out_dir = Path(out_dir)
    plot = frontier_plot(points, meta)
    (out_dir / PNG_NAME).write_bytes(plot.png)
    page = out_dir / HTML_NAME
    page.write_text(render_html(frontier_document(points, meta, plot)), encoding="utf-8")
    return page
