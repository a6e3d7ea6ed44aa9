"""Comparing two aligned runs metric by metric: percentiles, errors, distribution distance.

Side `a` is the candidate (usually the simulation), side `b` the reference (usually the real
engine). Errors are signed and relative to the reference:

    relative error = (a - b) / |b|        (0 when a == b, NaN when only b is 0)

computed both on percentiles of each side's distribution and per aligned request. The
distribution distance is the two-sample Kolmogorov-Smirnov statistic, the largest vertical gap
between the two empirical CDFs (0 = identical samples, 1 = disjoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from analysis.load import Alignment, LoadedTrace, align
from analysis.stages import Metric, present_metrics, request_metrics
from pdsim import metrics
from pdsim.metrics import PERCENTILES, Slo


def ks_distance(a: np.ndarray | pd.Series, b: np.ndarray | pd.Series) -> float:
    """Two-sample KS statistic sup_x |F_a(x) - F_b(x)| over the non-NaN values."""
    xa = np.sort(_finite(a))
    xb = np.sort(_finite(b))
    if xa.size == 0 or xb.size == 0:
        return float("nan")
    grid = np.concatenate([xa, xb])
    cdf_a = np.searchsorted(xa, grid, side="right") / xa.size
    cdf_b = np.searchsorted(xb, grid, side="right") / xb.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def relative_error(a: np.ndarray | pd.Series, b: np.ndarray | pd.Series) -> np.ndarray:
    """Element-wise (a - b) / |b|; 0 where a == b, NaN where b is 0 or either is NaN."""
    xa = np.asarray(a, dtype=float)
    xb = np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        err = (xa - xb) / np.abs(xb)
    err = np.where(xa == xb, 0.0, err)
    return np.where(np.isfinite(err), err, np.nan)


def _finite(values: np.ndarray | pd.Series) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    return arr[np.isfinite(arr)]


@dataclass(frozen=True)
class Comparison:
    """Everything the comparison report shows, as data."""

    labels: tuple[str, str]
    alignment: Alignment
    metrics: tuple[Metric, ...]
    values_a: pd.DataFrame  # request_metrics of the aligned a rows
    values_b: pd.DataFrame
    errors: pd.DataFrame  # per-request relative error, one column per metric
    table: pd.DataFrame  # one row per metric (see metric_table)
    attainment: pd.DataFrame  # rows ttft/tpot/both/goodput, one column per side
    slo: Slo
    tpot_definition: str


def compare(
    a: LoadedTrace, b: LoadedTrace, slo: Slo, tpot_definition: str = "standard"
) -> Comparison:
    """Align `a` and `b` and compute the tables of the comparison report."""
    alignment = align(a.frame, b.frame)
    values_a = request_metrics(alignment.a, tpot_definition)
    values_b = request_metrics(alignment.b, tpot_definition)
    present = present_metrics([values_a, values_b], tpot_definition)
    errors = pd.DataFrame(
        {m.name: relative_error(values_a[m.name], values_b[m.name]) for m in present}
    )
    return Comparison(
        labels=(a.label, b.label),
        alignment=alignment,
        metrics=present,
        values_a=values_a,
        values_b=values_b,
        errors=errors,
        table=metric_table(values_a, values_b, present),
        attainment=attainment_table(a.frame, b.frame, (a.label, b.label), slo, tpot_definition),
        slo=slo,
        tpot_definition=tpot_definition,
    )


def metric_table(
    values_a: pd.DataFrame, values_b: pd.DataFrame, present: tuple[Metric, ...]
) -> pd.DataFrame:
    """Per metric: n, p50/p90/p99 per side, relative error of each percentile, KS distance,
    and the per-request relative error (median and p90 of its absolute value)."""
    rows = [_metric_row(m, values_a[m.name], values_b[m.name]) for m in present]
    return pd.DataFrame(rows).set_index("metric")


def _metric_row(metric: Metric, a: pd.Series, b: pd.Series) -> dict[str, Any]:
    pa_, pb_ = metrics.percentiles(a), metrics.percentiles(b)
    per_request = np.abs(_finite(relative_error(a, b)))
    row: dict[str, Any] = {
        "metric": metric.name,
        "n_a": int(a.notna().sum()),
        "n_b": int(b.notna().sum()),
    }
    for p in PERCENTILES:
        key = f"p{p}"
        row[f"a_{key}"] = pa_[key]
        row[f"b_{key}"] = pb_[key]
        row[f"relerr_{key}"] = float(relative_error(pa_[key], pb_[key]))
    row["ks"] = ks_distance(a, b)
    row["req_abs_relerr_p50"] = float(np.median(per_request)) if per_request.size else float("nan")
    row["req_abs_relerr_p90"] = (
        float(np.percentile(per_request, 90)) if per_request.size else float("nan")
    )
    row["mean_diff_s"] = float(np.nanmean(a - b)) if (a - b).notna().any() else float("nan")
    return row


def itl_table(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> pd.DataFrame | None:
    """Percentiles of all inter-token gaps per side, their relative error and KS, or None
    when either trace recorded no token times."""
    gaps_a, gaps_b = metrics.itl_s(a), metrics.itl_s(b)
    if gaps_a.size == 0 or gaps_b.size == 0:
        return None
    pa_, pb_ = metrics.percentiles(gaps_a), metrics.percentiles(gaps_b)
    rows = [
        {
            "statistic": k,
            labels[0]: pa_[k],
            labels[1]: pb_[k],
            "relerr": float(relative_error(pa_[k], pb_[k])),
        }
        for k in pa_
    ]
    rows.append(
        {
            "statistic": "ks",
            labels[0]: ks_distance(gaps_a, gaps_b),
            labels[1]: float("nan"),
            "relerr": float("nan"),
        }
    )
    return pd.DataFrame(rows)


def attainment_table(
    a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str], slo: Slo, tpot_definition: str
) -> pd.DataFrame:
    """SLO attainment (TTFT, TPOT, both) and goodput at the offered rate, side by side.

    Computed on each full trace, not only the aligned requests: failed and rejected requests
    count as misses, as in `pdsim.metrics.attainment`.
    """
    columns = {}
    for label, frame in zip(labels, (a, b), strict=True):
        summary = metrics.summarize(frame, slo, tpot_definition)
        columns[label] = {
            **{f"attainment_{k}": v for k, v in summary["attainment"].items()},
            "offered_rate_rps": summary["offered_rate_rps"],
            "goodput_at_rate_rps": summary["goodput_at_rate_rps"],
            "finished": summary["finished"],
            "failed": summary["failed"],
            "rejected": summary["rejected"],
        }
    return pd.DataFrame(columns).rename_axis("quantity")
