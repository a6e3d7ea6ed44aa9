"""Loading traces (and the files written beside them) and aligning two runs request by request.

File conventions, all optional except the trace itself:

    RUN.parquet               the per-request trace (pdsim.trace schema)
    RUN.summary.json          the run summary `write_trace` writes (SLO used, counts, ...)
    RUN.timeseries.parquet    sampled instance state: time_s, instance_id, role, then any
                              numeric columns (per-queue lengths, kv_used_fraction, ...);
                              `timeseries.parquet` in the same directory (what `pdsim run`
                              writes beside trace.parquet) is used when this is absent
    *.jsonl                   NVIDIA AIPerf's per-request export (profile_export.jsonl), read
                              as a measured trace (analysis/aiperf.py: what maps to what)

Every problem a user can cause raises `pdsim.trace.TraceError` with a one-line message naming
the file, the field and the value.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from analysis.aiperf import is_aiperf_export, read_aiperf_export
from pdsim.trace import (
    FIELDS,
    FLOAT,
    INTEGER_TYPES,
    TraceError,
    fill_optional_fields,
    read_parquet_frame,
    read_trace,
    validate_frame,
)

log = logging.getLogger(__name__)

# Below this share of common request ids the runs are taken to be numbered differently and
# are paired by arrival order instead.
MIN_ID_OVERLAP = 0.9
TIMESERIES_FILE = "timeseries.parquet"


@dataclass(frozen=True)
class LoadedTrace:
    """A trace plus what was found beside it."""

    label: str
    frame: pd.DataFrame
    source: str = "<frame>"
    summary: dict[str, Any] | None = None
    timeseries: pd.DataFrame | None = None


@dataclass(frozen=True)
class Alignment:
    """Two traces cut to the requests they share, row i of `a` paired with row i of `b`."""

    method: str  # 'request_id' or 'arrival_order'
    a: pd.DataFrame
    b: pd.DataFrame
    unmatched_a: int
    unmatched_b: int
    input_match_fraction: float  # share of pairs with equal input_tokens (alignment sanity)


def check_types(df: pd.DataFrame, source: str) -> None:
    """Raise TraceError when a schema field holds values of the wrong kind."""
    for field in FIELDS:
        column = df[field.name]
        numeric = field.type == FLOAT or field.type in INTEGER_TYPES
        if numeric and not pd.api.types.is_numeric_dtype(column):
            bad = next((v for v in column if not _is_number(v)), column.iloc[0])
            raise TraceError(f"{source}: field {field.name!r} has non-numeric value {bad!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


def checked_frame(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Validate an in-memory trace (fields, values, types; newer optional fields filled) and
    return it."""
    df = fill_optional_fields(df)
    validate_frame(df, source)
    check_types(df, source)
    return df


def load_trace(
    path: Path | str, label: str | None = None, timeseries: Path | str | None = None
) -> LoadedTrace:
    """Read a trace plus its summary and timeseries (given, or found beside it); an AIPerf
    export (.jsonl) is read as a trace with neither."""
    path = Path(path)
    if is_aiperf_export(path):
        frame = checked_frame(read_aiperf_export(path), str(path))
        log.info("loaded %s: %d requests (AIPerf export)", path, len(frame))
        return LoadedTrace(label or path.stem, frame, str(path))
    frame = checked_frame(read_trace(path), str(path))
    summary_path = path.with_name(path.stem + ".summary.json")
    summary = read_summary(summary_path) if summary_path.is_file() else None
    ts_path = Path(timeseries) if timeseries else find_timeseries(path)
    ts = read_timeseries(ts_path) if ts_path is not None else None
    log.info(
        "loaded %s: %d requests%s", path, len(frame), " + timeseries" if ts is not None else ""
    )
    return LoadedTrace(label or path.stem, frame, str(path), summary, ts)


def find_timeseries(trace_path: Path) -> Path | None:
    """RUN.timeseries.parquet beside the trace, else timeseries.parquet in its directory."""
    for candidate in (
        trace_path.with_name(trace_path.stem + ".timeseries.parquet"),
        trace_path.with_name(TIMESERIES_FILE),
    ):
        if candidate.is_file():
            return candidate
    return None


def load_traces(paths: list[Path | str], labels: list[str] | None = None) -> list[LoadedTrace]:
    """Load any number of traces; labels default to labels_from_paths."""
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} traces")
    names = labels or labels_from_paths([Path(p) for p in paths])
    return [load_trace(p, name) for p, name in zip(paths, names, strict=True)]


def labels_from_paths(paths: list[Path]) -> list[str]:
    """Short distinct labels: the fewest trailing path parts (file stem last) that tell the paths
    apart, less the parts they all end with (a/trace.parquet, b/trace.parquet -> a, b)."""
    parts = [(*p.parent.parts, p.stem) for p in paths]
    for k in range(1, max((len(x) for x in parts), default=1) + 1):
        tails = [x[-k:] for x in parts]
        if len(set(tails)) == len(tails):
            common = 0
            while common < k - 1 and len({t[len(t) - 1 - common] for t in tails}) == 1:
                common += 1
            return ["/".join(t[: len(t) - common]) for t in tails]
    return [f"{i}:{p.stem}" for i, p in enumerate(paths)]


def read_summary(path: Path) -> dict[str, Any]:
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"{path}: not a readable JSON summary ({exc})") from None
    if not isinstance(summary, dict):
        raise TraceError(f"{path}: summary is a {type(summary).__name__}, expected an object")
    return summary


def read_timeseries(path: Path | str) -> pd.DataFrame:
    """Read a timeseries parquet; needs a numeric `time_s`, keeps whatever else is there."""
    return checked_timeseries(read_parquet_frame(path, "timeseries"), str(path))


def checked_timeseries(df: pd.DataFrame, source: str) -> pd.DataFrame:
    """Check the one required column (numeric `time_s`); return the frame sorted by time."""
    if "time_s" not in df.columns:
        raise TraceError(
            f"{source}: timeseries field 'time_s' missing (columns: {list(df.columns)})"
        )
    if not pd.api.types.is_numeric_dtype(df["time_s"]):
        raise TraceError(
            f"{source}: timeseries field 'time_s' has non-numeric value {df['time_s'].iloc[0]!r}"
        )
    return df.sort_values("time_s", kind="stable").reset_index(drop=True)


def align(a: pd.DataFrame, b: pd.DataFrame) -> Alignment:
    """Pair the requests of two runs of the same workload.

    By request_id when at least MIN_ID_OVERLAP of the smaller run's ids appear in both;
    otherwise by arrival order (rank i of `a` with rank i of `b`, ties by request_id).
    """
    common = np.intersect1d(a["request_id"].to_numpy(), b["request_id"].to_numpy())
    smaller = min(len(a), len(b))
    if smaller and len(common) >= MIN_ID_OVERLAP * smaller:
        pa_ = a.set_index("request_id").loc[common].reset_index()
        pb_ = b.set_index("request_id").loc[common].reset_index()
        method = "request_id"
    else:
        order = ["arrival_s", "request_id"]
        pa_ = a.sort_values(order, kind="stable").head(smaller).reset_index(drop=True)
        pb_ = b.sort_values(order, kind="stable").head(smaller).reset_index(drop=True)
        method = "arrival_order"
    same_input = (pa_["input_tokens"].to_numpy() == pb_["input_tokens"].to_numpy()).mean()
    result = Alignment(
        method,
        pa_,
        pb_,
        len(a) - len(pa_),
        len(b) - len(pb_),
        float(same_input) if len(pa_) else 1.0,
    )
    if result.unmatched_a or result.unmatched_b or result.input_match_fraction < 1.0:
        log.warning(
            "aligned by %s: %d/%d unmatched, %.0f%% of pairs have equal input_tokens",
            method,
            result.unmatched_a,
            result.unmatched_b,
            100 * result.input_match_fraction,
        )
    return result
