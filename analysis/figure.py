"""Small helpers shared by the plot modules: figures without pyplot, PNG rendering, scales.

matplotlib is imported inside the functions (never when `pdsim` or `analysis` is imported)
and figures are drawn on the Agg canvas directly, so no global pyplot state is created or
leaked between reports.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# Use a log axis when the positive values span at least this many decades.
LOG_DECADES = 2.0
DPI = 100


@dataclass(frozen=True)
class Plot:
    """A rendered figure: `name` is the file stem, `title` the figure's title."""

    name: str
    title: str
    png: bytes
    caption: str = ""


def new_figure(
    nrows: int = 1, ncols: int = 1, panel: tuple[float, float] = (5.0, 3.6)
) -> tuple[Figure, np.ndarray]:
    """A figure with an (nrows x ncols) array of axes, each panel `panel` inches."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, axes


def render(fig: Figure, name: str, title: str, caption: str = "") -> Plot:
    fig.suptitle(title, fontsize=13)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return Plot(name, title, buf.getvalue(), caption)


def grid_shape(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(max(n, 1), max_cols)
    return (max(n, 1) + cols - 1) // cols, cols


def spans_decades(*arrays: Any) -> bool:
    """True when the positive finite values together span LOG_DECADES or more."""
    values = [np.asarray(a, dtype=float).ravel() for a in arrays]
    both = np.concatenate(values) if values else np.array([])
    positive = both[np.isfinite(both) & (both > 0)]
    if positive.size < 2:
        return False
    return bool(np.log10(positive.max() / positive.min()) >= LOG_DECADES)


def ecdf(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sorted finite values and their empirical CDF."""
    x = np.sort(np.asarray(values, dtype=float))
    x = x[np.isfinite(x)]
    return x, np.arange(1, x.size + 1) / max(x.size, 1)


def hide_unused(axes: np.ndarray, used: int) -> None:
    for ax in axes.ravel()[used:]:
        ax.set_visible(False)


def no_data(ax: Any, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
