"""The per-request trace schema shared by pdsim, pdreal and analysis.

One row per request. Times are float seconds on the run's clock (simulated time in pdsim,
seconds since the replay started in pdreal), NaN when the request never reached that point.
Instance ids are -1 when not assigned. Queue names are the seeds' queue names and are the same
in pdsim, pdreal and analysis:

    prefill side:  bootstrap -> waiting -> (forward) -> inflight
    decode side:   prealloc -> transfer -> waiting -> running
    colocated:     waiting -> running (prefill chunks and decodes share the batch)

`TraceRecorder` collects rows column-wise (cheap appends, no per-request objects kept) and
`write_trace` writes the parquet file plus a JSON summary beside it. Importing this module
costs no pandas or pyarrow (the engines import it for the schema and status names); the I/O
functions import them when called.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

SCHEMA_VERSION = 1

STATUS_FINISHED = "finished"
STATUS_FAILED = "failed"
STATUS_REJECTED = "rejected"
STATUSES = (STATUS_FINISHED, STATUS_FAILED, STATUS_REJECTED)


FLOAT, INT64, INT32, STRING, FLOAT_LIST = "float64", "int64", "int32", "string", "list<float64>"
INTEGER_TYPES = (INT64, INT32)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    type: str  # arrow type name: float64, int64, int32, string, list<float64>
    unit: str
    doc: str


def _t(name: str, doc: str) -> Field:
    return Field(name, FLOAT, "s", doc)


FIELDS: tuple[Field, ...] = (
    Field("request_id", INT64, "-", "request id, unique within a run (trace row order)"),
    Field("session_id", INT64, "-", "conversation/session id, -1 when unknown"),
    _t("arrival_s", "time the request reached the router"),
    Field("input_tokens", INT64, "tokens", "prompt length"),
    Field("output_tokens", INT64, "tokens", "tokens generated (requested count if unfinished)"),
    Field("cached_prefix_tokens", INT64, "tokens", "prompt tokens served from the prefix cache"),
    Field("cached_tokens_gpu", INT64, "tokens", "part of cached_prefix_tokens already in GPU pages"),
    Field("cached_tokens_host", INT64, "tokens", "part of cached_prefix_tokens loaded from host DRAM"),
    Field("cached_tokens_ssd", INT64, "tokens", "part of cached_prefix_tokens loaded from local SSD"),
    Field("cached_tokens_store", INT64, "tokens", "part of cached_prefix_tokens read from the global KV store"),
    Field("kv_load_s", FLOAT, "s", "modelled time to load the host/ssd/store part (alone on the links)"),
    Field("kv_load_skipped_tokens", INT64, "tokens", "tier hits recomputed because loading was slower"),
    Field("mode", STRING, "-", "'disaggregated' or 'colocated'"),
    Field("prefill_instance", INT32, "-", "prefill (or colocated) instance id, -1 if none"),
    Field("decode_instance", INT32, "-", "decode instance id, -1 if none (colocated: same as prefill)"),
    Field("bootstrap_room", INT64, "-", "random 63-bit id pairing the prefill and decode halves"),
    _t("route_s", "time the router dispatched the request (after admission)"),
    _t("bootstrap_enter_s", "entered the prefill bootstrap queue"),
    _t("bootstrap_leave_s", "left the bootstrap queue (decode side handshaken and pre-allocated)"),
    _t("prefill_waiting_enter_s", "entered the prefill waiting queue"),
    _t("prefill_start_s", "first prefill forward (first chunk) started"),
    _t("prefill_end_s", "last prefill chunk finished (first token produced)"),
    _t("inflight_enter_s", "entered the prefill inflight queue (KV being sent)"),
    _t("inflight_leave_s", "left the inflight queue (transfer Success/Failed polled; KV released)"),
    _t("prealloc_enter_s", "entered the decode prealloc queue"),
    _t("prealloc_leave_s", "decode KV pages pre-allocated"),
    _t("transfer_queue_enter_s", "entered the decode transfer queue"),
    _t("transfer_queue_leave_s", "KV arrival polled on the decode side"),
    _t("transfer_start_s", "first KV byte started moving"),
    _t("transfer_end_s", "last KV byte (and aux data) arrived"),
    Field("transfer_bytes", INT64, "bytes", "KV bytes moved prefill -> decode"),
    _t("decode_waiting_enter_s", "entered the decode waiting queue (prebuilt batch)"),
    _t("running_enter_s", "joined a running decode batch (first time)"),
    _t("first_token_s", "first output token available to the client"),
    _t("last_token_s", "last output token available to the client"),
    _t("finish_s", "request left the system (finished, failed or rejected)"),
    Field("status", STRING, "-", "'finished', 'failed' or 'rejected'"),
    Field("failure_reason", STRING, "-", "why it failed or was rejected; empty when finished"),
    Field("num_retractions", INT32, "-", "times the decode side retracted the request"),
    Field("token_times_s", FLOAT_LIST, "s", "per-token times when recorded (ITL), else null"),
)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in FIELDS)
_DEFAULTS: dict[str, Any] = {
    f.name: math.nan if f.type == FLOAT else -1 if f.type in INTEGER_TYPES else "" if f.type == STRING else None
    for f in FIELDS
}


@cache
def arrow_schema() -> pa.Schema:
    """The schema as a pyarrow Schema (with the schema version in its metadata)."""
    import pyarrow as pa

    types = {FLOAT: pa.float64(), INT64: pa.int64(), INT32: pa.int32(), STRING: pa.string(),
             FLOAT_LIST: pa.list_(pa.float64())}
    return pa.schema([pa.field(f.name, types[f.type]) for f in FIELDS]).with_metadata(
        {"pdsim.schema_version": str(SCHEMA_VERSION)}
    )
_DEFAULTS.update(cached_prefix_tokens=0, num_retractions=0, transfer_bytes=0)
# fields added after schema version 1 first shipped: older traces lack them, read_trace fills these
OPTIONAL_DEFAULTS: dict[str, Any] = {
    "cached_tokens_gpu": 0, "cached_tokens_host": 0, "cached_tokens_ssd": 0, "cached_tokens_store": 0,
    "kv_load_s": 0.0, "kv_load_skipped_tokens": 0,
}
_DEFAULTS.update(OPTIONAL_DEFAULTS)


class TraceError(ValueError):
    """A trace file that does not follow the schema."""


class TraceRecorder:
    """Column-wise collector of request rows.

    Rows are appended once, when a request reaches a terminal state, as a dict of the fields
    that differ from the defaults (NaN times, -1 ids, zero counters).
    """

    def __init__(self) -> None:
        self._columns: dict[str, list[Any]] = {name: [] for name in FIELD_NAMES}
        self._ids: set[int] = set()

    def __len__(self) -> int:
        return len(self._columns["request_id"])

    def add(self, row: dict[str, Any]) -> None:
        unknown = set(row) - set(FIELD_NAMES)
        if unknown:
            raise KeyError(f"unknown trace fields {sorted(unknown)}")
        rid = row.get("request_id", -1)
        if rid in self._ids:
            raise ValueError(f"request_id {rid} recorded twice")
        if row.get("status") not in STATUSES:
            raise ValueError(f"request {rid}: status {row.get('status')!r} not in {STATUSES}")
        self._ids.add(rid)
        for name, column in self._columns.items():
            column.append(row.get(name, _DEFAULTS[name]))

    def to_frame(self) -> pd.DataFrame:
        import pyarrow as pa

        table = pa.table(self._columns, schema=arrow_schema())
        return table.to_pandas().sort_values("request_id", kind="stable").reset_index(drop=True)


def empty_frame() -> pd.DataFrame:
    return TraceRecorder().to_frame()


def validate_frame(df: pd.DataFrame, source: str = "<frame>") -> None:
    """Raise TraceError naming the source and the offending field/value."""
    missing = [n for n in FIELD_NAMES if n not in df.columns and n not in OPTIONAL_DEFAULTS]
    if missing:
        raise TraceError(f"{source}: missing trace fields {missing}")
    bad_status = sorted(set(df["status"].unique()) - set(STATUSES))
    if bad_status:
        raise TraceError(f"{source}: field 'status' has invalid value {bad_status[0]!r}")
    if df["request_id"].duplicated().any():
        dup = int(df.loc[df["request_id"].duplicated(), "request_id"].iloc[0])
        raise TraceError(f"{source}: field 'request_id' has duplicate value {dup}")
    for name in ("input_tokens", "output_tokens", "cached_prefix_tokens"):
        neg = df[name] < 0
        if neg.any():
            raise TraceError(f"{source}: field {name!r} has negative value {int(df.loc[neg, name].iloc[0])}")


def write_trace(df: pd.DataFrame, path: Path, summary: dict[str, Any] | None = None) -> Path:
    """Write the trace as parquet (and `<stem>.summary.json` when a summary is given).

    Files are written to a temporary name then renamed, so a failure leaves nothing half-written.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    df = fill_optional_fields(df)
    validate_frame(df, str(path))
    path = Path(path)
    table = pa.Table.from_pandas(df[list(FIELD_NAMES)], schema=arrow_schema(), preserve_index=False)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    if summary is not None:
        summary_path = path.with_name(path.stem + ".summary.json")
        tmp_json = summary_path.with_suffix(".json.tmp")
        tmp_json.write_text(json.dumps(summary, indent=2, sort_keys=True, default=_json_default))
        tmp_json.replace(summary_path)
    return path


def read_parquet_frame(path: Path | str, what: str = "trace") -> pd.DataFrame:
    """Read a parquet file into pandas; TraceError naming the file if absent or unreadable."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: {what} file not found")
    try:
        return pq.read_table(path).to_pandas()
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceError(f"{path}: not a readable parquet {what} ({exc})") from None


def read_trace(path: Path | str) -> pd.DataFrame:
    """Read a trace parquet, checking it follows this schema."""
    df = fill_optional_fields(read_parquet_frame(path, "trace"))
    validate_frame(df, str(path))
    return df


def fill_optional_fields(df: pd.DataFrame) -> pd.DataFrame:
    """Add the columns newer than a trace (OPTIONAL_DEFAULTS) with their defaults, in schema order.

    A trace without the KV-tier columns predates them: every cached token was a GPU hit.
    """
    missing = [name for name in OPTIONAL_DEFAULTS if name not in df.columns]
    if not missing:
        return df
    df = df.copy()
    for name in missing:
        df[name] = OPTIONAL_DEFAULTS[name]
    if "cached_tokens_gpu" in missing and "cached_prefix_tokens" in df.columns:
        df["cached_tokens_gpu"] = df["cached_prefix_tokens"]
    order = [n for n in FIELD_NAMES if n in df.columns] + [c for c in df.columns if c not in FIELD_NAMES]
    return df[order]


def _json_default(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot serialise {type(value).__name__} to JSON")
