"""Where two runs diverge most: which stage, and which requests (long prompts? bursts?).

- Stages are ranked by the mean per-request difference in seconds (a - b, over requests that
  passed through the stage on either side, a missing stage counting as 0 s), so the first row
  is the stage that contributes most to the end-to-end gap; a stage only one side records is
  flagged.
- Requests are grouped by quartile of prompt length and of *local load* (the number of
  arrivals in the window of BURST_WINDOW_ARRIVALS mean inter-arrival times before the request,
  in the reference run), and the per-request error is summarised per group.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.compare import Comparison
from analysis.stages import STAGES

BURST_WINDOW_ARRIVALS = 10
GROUPS = 4


def stage_ranking(cmp: Comparison) -> pd.DataFrame:
    """Per stage: mean seconds per side, mean difference, KS, sorted by |difference|."""
    rows = []
    for stage in STAGES:
        a = cmp.values_a[stage.name]
        b = cmp.values_b[stage.name]
        if a.isna().all() and b.isna().all():
            continue
        rows.append(
            {
                "stage": stage.name,
                "label": stage.label,
                "mean_a_s": float(a.mean()),
                "mean_b_s": float(b.mean()),
                "mean_diff_s": float((a.fillna(0.0) - b.fillna(0.0))[a.notna() | b.notna()].mean()),
                "ks": cmp.table.loc[stage.name, "ks"],
                "only_in": _only_in(a, b, cmp.labels),
            }
        )
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    order = frame["mean_diff_s"].abs().sort_values(ascending=False, kind="stable").index
    return frame.loc[order].reset_index(drop=True)


def _only_in(a: pd.Series, b: pd.Series, labels: tuple[str, str]) -> str:
    if a.notna().any() and b.isna().all():
        return labels[0]
    if b.notna().any() and a.isna().all():
        return labels[1]
    return ""


def local_load(arrival_s: pd.Series) -> np.ndarray:
    """Arrivals in the window before each request (itself included); window =
    BURST_WINDOW_ARRIVALS mean inter-arrival times."""
    t = np.asarray(arrival_s, dtype=float)
    order = np.sort(t)
    span = order[-1] - order[0] if t.size > 1 else 0.0
    if span <= 0:
        return np.full(t.size, float(t.size))
    window = BURST_WINDOW_ARRIVALS * span / (t.size - 1)
    upto = np.searchsorted(order, t, side="right")
    since = np.searchsorted(order, t - window, side="left")
    return (upto - since).astype(float)


def error_by_group(cmp: Comparison, key: np.ndarray | pd.Series, metric: str) -> pd.DataFrame:
    """Per quantile group of `key`: count, key range, median relative and absolute error."""
    key = pd.Series(np.asarray(key, dtype=float))
    try:
        groups = pd.qcut(key, GROUPS, duplicates="drop")
    except ValueError:
        groups = pd.Series(["all"] * len(key))
    diff = cmp.values_a[metric].to_numpy() - cmp.values_b[metric].to_numpy()
    frame = pd.DataFrame({"group": groups, "key": key, "rel": cmp.errors[metric], "diff": diff})
    out = frame.groupby("group", observed=True, sort=True).agg(
        n=("rel", "count"),
        key_min=("key", "min"),
        key_max=("key", "max"),
        median_relerr=("rel", "median"),
        median_diff_s=("diff", "median"),
    )
    out = out.reset_index(drop=True)
    out.insert(0, "group", [f"Q{i + 1}" for i in range(len(out))] if len(out) > 1 else ["all"])
    return out


def top_requests(cmp: Comparison, metric: str, k: int = 10) -> pd.DataFrame:
    """The k requests with the largest absolute difference on `metric`."""
    b = cmp.alignment.b
    diff = cmp.values_a[metric] - cmp.values_b[metric]
    frame = pd.DataFrame(
        {
            "request_id": b["request_id"].to_numpy(),
            "arrival_s": b["arrival_s"].to_numpy(),
            "input_tokens": b["input_tokens"].to_numpy(),
            "output_tokens": b["output_tokens"].to_numpy(),
            "local_load": local_load(b["arrival_s"]),
            f"{metric}_a": cmp.values_a[metric].to_numpy(),
            f"{metric}_b": cmp.values_b[metric].to_numpy(),
            "diff_s": diff.to_numpy(),
            "relerr": cmp.errors[metric].to_numpy(),
        }
    )
    frame = frame[frame["diff_s"].notna()]
    order = frame["diff_s"].abs().sort_values(ascending=False, kind="stable").index[:k]
    return frame.loc[order].reset_index(drop=True)


def findings(cmp: Comparison) -> list[str]:
    """Plain sentences for the summary: biggest stage gap, worst metric, worst request group."""
    a, b = cmp.labels
    ks = cmp.table["ks"].dropna()
    if (cmp.errors.fillna(0.0) == 0).all().all() and (ks == 0).all():
        return [f"{a} and {b} agree on every aligned request: no metric or stage differs."]
    notes = []
    ranking = stage_ranking(cmp)
    if not ranking.empty and ranking.iloc[0]["mean_diff_s"] != 0:
        top = ranking.iloc[0]
        notes.append(
            f"Largest stage gap: {top['label']} ({a} {top['mean_a_s']:.4g} s vs {b} "
            f"{top['mean_b_s']:.4g} s per request on average, difference {top['mean_diff_s']:+.4g} s)."
        )
    for _, row in ranking[ranking["only_in"] != ""].iterrows() if not ranking.empty else ():
        notes.append(f"Stage {row['label']} is recorded only in {row['only_in']}.")
    if not ks.empty and ks.max() > 0:
        notes.append(f"Most different distribution: {ks.idxmax()} (KS {ks.max():.3f}).")
    for key_name, key in (
        ("prompt length", cmp.alignment.b["input_tokens"]),
        ("local load", local_load(cmp.alignment.b["arrival_s"])),
    ):
        notes.extend(_group_note(cmp, key_name, key))
    return notes


def _group_note(cmp: Comparison, key_name: str, key: np.ndarray | pd.Series) -> list[str]:
    if "ttft_s" not in cmp.errors.columns:
        return []
    groups = error_by_group(cmp, key, "ttft_s").dropna(subset=["median_relerr"])
    if len(groups) < 2 or (groups["median_relerr"] == 0).all():
        return []
    worst = groups.loc[groups["median_relerr"].abs().idxmax()]
    return [
        f"TTFT error by {key_name}: largest in the group {worst['key_min']:.4g}-{worst['key_max']:.4g} "
        f"(median relative error {worst['median_relerr']:+.1%} over {int(worst['n'])} requests)."
    ]
