"""The simulator's per-request records: one row per terminal request, held in typed columns.

Same contract and output as `pdsim.trace.TraceRecorder` (rows are dicts of the fields that
differ from the schema's defaults; `to_frame` gives the schema's DataFrame sorted by
request_id), but numeric fields live in two 8-byte `array`s, row after row (one `extend` per row
for the floats and one for the integers), instead of lists of Python objects, which keeps a
200k-request run's records in ~60 MB, and a request id is checked for duplicates against a bitmap
of the workload's ids.
"""

from __future__ import annotations

from array import array
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pdsim.trace import _DEFAULTS as TRACE_DEFAULTS
from pdsim.trace import FIELD_NAMES, FIELDS, FLOAT, INTEGER_TYPES, STATUSES, arrow_schema

_FLOATS = tuple(f.name for f in FIELDS if f.type == FLOAT)
_INTS = tuple(f.name for f in FIELDS if f.type in INTEGER_TYPES)
_OBJECTS = tuple(f.name for f in FIELDS if f.name not in _FLOATS and f.name not in _INTS)
_KNOWN = frozenset(FIELD_NAMES)
_FLOAT_INDEX = {name: k for k, name in enumerate(_FLOATS)}
_INT_INDEX = {name: k for k, name in enumerate(_INTS)}


class SimRecorder:
    def __init__(self, num_requests: int) -> None:
        self._seen = bytearray(num_requests)
        self._floats = array("d")  # _FLOATS of each row, row after row
        self._ints = array("q")  # _INTS likewise
        self._objects: dict[str, list[Any]] = {name: [] for name in _OBJECTS}
        self._float_defaults = tuple(TRACE_DEFAULTS[name] for name in _FLOATS)
        self._int_defaults = tuple(TRACE_DEFAULTS[name] for name in _INTS)
        self._object_appenders = tuple((name, TRACE_DEFAULTS[name], column.append)
                                       for name, column in self._objects.items())
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, row: dict[str, Any]) -> None:
        if not _KNOWN.issuperset(row):
            raise KeyError(f"unknown trace fields {sorted(set(row) - _KNOWN)}")
        rid = row.get("request_id", -1)
        if not 0 <= rid < len(self._seen):
            raise ValueError(f"request_id {rid} outside the workload (0..{len(self._seen) - 1})")
        if self._seen[rid]:
            raise ValueError(f"request_id {rid} recorded twice")
        if row.get("status") not in STATUSES:
            raise ValueError(f"request {rid}: status {row.get('status')!r} not in {STATUSES}")
        self._seen[rid] = 1
        get = row.get
        self._floats.extend(map(get, _FLOATS, self._float_defaults))
        self._ints.extend(map(get, _INTS, self._int_defaults))
        for name, default, append in self._object_appenders:
            append(get(name, default))
        self._rows += 1

    def statuses(self) -> list[str]:
        return self._objects["status"]

    def to_frame(self) -> pd.DataFrame:
        # views over the arrays, not copies: a 200k-request run's rows are ~60 MB, and each column
        # below is copied once more (peak RSS, docs/PERFORMANCE.md)
        floats = rows_view(self._floats, np.float64, len(_FLOATS))
        ints = rows_view(self._ints, np.int64, len(_INTS))
        columns: dict[str, Any] = {}
        schema = arrow_schema()
        for f in FIELDS:
            arrow_type = schema.field(f.name).type
            if f.name in self._objects:
                columns[f.name] = pa.array(self._objects[f.name], type=arrow_type)
            else:
                data = floats[:, _FLOAT_INDEX[f.name]] if f.name in _FLOAT_INDEX else ints[:, _INT_INDEX[f.name]]
                columns[f.name] = pa.array(np.ascontiguousarray(data), type=arrow_type)
        table = pa.table(columns, schema=schema)
        return table.to_pandas().sort_values("request_id", kind="stable").reset_index(drop=True)


TOKEN_TIME_FIELDS = ("first_token_s", "last_token_s", "finish_s")


def delivered(trace: pd.DataFrame, delay_s: float) -> pd.DataFrame:
    """The trace as the client sees it: every token time (and the finish) `delay_s` later. NaN
    times stay NaN; with delay_s == 0 the frame is returned as is."""
    if delay_s == 0:
        return trace
    out = trace.copy()
    for name in TOKEN_TIME_FIELDS:
        out[name] = out[name] + delay_s
    out["token_times_s"] = [None if t is None else [x + delay_s for x in t] for t in out["token_times_s"]]
    return out


def rows_view(values: array, dtype: type, width: int) -> np.ndarray:
    """`values` (row after row, `width` per row) as a rows x width array sharing its memory."""
    if not len(values):
        return np.zeros((0, width), dtype=dtype)
    return np.frombuffer(values, dtype=dtype).reshape(-1, width)
