"""The simulator's per-request records: one row per terminal request, held in typed columns.

Same contract and output as `pdsim.trace.TraceRecorder` (rows are dicts of the fields that
differ from the schema's defaults; `to_frame` gives the schema's DataFrame sorted by
request_id), but a row's numeric fields go into two flat unboxed arrays (librt vecs: its floats
into one, its integers into the other, row after row, made for the whole workload up front and
written by index; a float not written is NaN) instead of lists of Python objects, which keeps a
200k-request run's records in ~60 MB, and a request id is checked for duplicates against a
bitmap of the workload's ids. The simulator writes its own rows value by value (`check_row`,
`put_float_at`, `put_floats_at` for a request's times array, `put_int`, `end_row`:
pdsim.sim.state.record_row), with no list, tuple or Python number per value; a row given as a
dict or as lists (`add`, `add_columns`) is converted by `struct` first, so a value its column
cannot hold is refused before anything of the row is kept.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa
from librt.vecs import vec
from mypy_extensions import i64

from pdsim.trace import _DEFAULTS as TRACE_DEFAULTS
from pdsim.trace import FIELD_NAMES, FIELDS, FLOAT, INTEGER_TYPES, STATUSES, arrow_schema

# the columns a row is held in, in the order `add_columns` takes them
FLOAT_COLUMNS: Final = tuple(f.name for f in FIELDS if f.type == FLOAT)
INT_COLUMNS: Final = tuple(f.name for f in FIELDS if f.type in INTEGER_TYPES)
OBJECT_COLUMNS: Final = tuple(f.name for f in FIELDS if f.name not in FLOAT_COLUMNS and f.name not in INT_COLUMNS)
_KNOWN = frozenset(FIELD_NAMES)
_FLOAT_INDEX = {name: k for k, name in enumerate(FLOAT_COLUMNS)}
_INT_INDEX = {name: k for k, name in enumerate(INT_COLUMNS)}
_NUMERIC: Final = (*FLOAT_COLUMNS, *INT_COLUMNS)
# the conversions a row given as values goes through: its floats, then its integers
_ROW: Final = struct.Struct(f"={len(FLOAT_COLUMNS)}d{len(INT_COLUMNS)}q")
_ABSENT: Final = object()  # (a field not in a row)
_RID: Final = len(FLOAT_COLUMNS) + INT_COLUMNS.index("request_id")  # where add_columns finds them
_STATUS: Final = OBJECT_COLUMNS.index("status")
_NUM_FLOATS: Final = len(FLOAT_COLUMNS)


class SimRecorder:
    def __init__(self, num_requests: int) -> None:
        self._seen = bytearray(num_requests)
        # FLOAT_COLUMNS of each row (NaN: not written), INT_COLUMNS of each row (_num_ints written)
        self._floats = vec[float]([math.nan] * (num_requests * _NUM_FLOATS))
        self._ints = vec[i64]([0] * (num_requests * len(INT_COLUMNS)))
        self._num_ints: i64 = 0
        self._objects: dict[str, list[Any]] = {name: [] for name in OBJECT_COLUMNS}
        self._numeric_defaults = [(name, TRACE_DEFAULTS[name]) for name in _NUMERIC]
        self._object_defaults = [(name, TRACE_DEFAULTS[name]) for name in self._objects]
        self._object_columns = list(self._objects.values())
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, row: dict[str, Any]) -> None:
        """A row as a dict of trace fields (absent ones take the schema's defaults)."""
        numbers: list[Any] = []
        objects: list[Any] = []
        known = _take(row, self._numeric_defaults, numbers) + _take(row, self._object_defaults, objects)
        if known != len(row):  # a field that is not a trace field
            raise KeyError(f"unknown trace fields {sorted(set(row) - _KNOWN)}")
        self.add_columns(numbers, objects)

    def add_columns(self, numbers: list[Any], objects: list[Any]) -> None:
        """A row as its values in column order: FLOAT_COLUMNS then INT_COLUMNS, and
        OBJECT_COLUMNS."""
        self.check_row(numbers[_RID], objects[_STATUS])
        values = _ROW.unpack(_ROW.pack(*numbers))  # (before anything is kept: a bad value leaves no trace)
        for k in range(len(values)):
            if k < _NUM_FLOATS:
                self.put_float_at(k, values[k])
            else:
                self.put_int(values[k])
        self.end_row(numbers[_RID], objects)

    def check_row(self, rid: int, status: str) -> None:
        """Refuse a row, before any of it is kept, whose id is outside the workload or recorded
        already, or whose status is unknown."""
        if not 0 <= rid < len(self._seen):
            raise ValueError(f"request_id {rid} outside the workload (0..{len(self._seen) - 1})")
        if self._seen[rid]:
            raise ValueError(f"request_id {rid} recorded twice")
        if status not in STATUSES:
            raise ValueError(f"request {rid}: status {status!r} not in {STATUSES}")

    def put_float_at(self, column: i64, value: float) -> None:
        """The row's float in FLOAT_COLUMNS[column] (after check_row; one not put is NaN)."""
        self._floats[self._rows * _NUM_FLOATS + column] = value

    def put_floats_at(self, first: i64, values: vec[float]) -> None:
        """The row's floats in FLOAT_COLUMNS[first:first + len(values)], NaN included."""
        floats, base, k, n = self._floats, self._rows * _NUM_FLOATS + first, i64(0), len(values)
        while k < n:
            floats[base + k] = values[k]
            k += 1

    def put_int(self, value: i64) -> None:
        """The row's next integer column (INT_COLUMNS order, after its floats)."""
        self._ints[self._num_ints] = value
        self._num_ints += 1

    def drop_partial_row(self) -> None:
        """Forget the numbers put since the last recorded row (a row that failed half-way)."""
        base: i64 = self._rows * _NUM_FLOATS
        for k in range(_NUM_FLOATS):
            self._floats[base + k] = math.nan
        self._num_ints = self._rows * len(INT_COLUMNS)

    def end_row(self, rid: int, objects: list[Any]) -> None:
        """The row's OBJECT_COLUMNS, after its numbers: the row is recorded."""
        self._seen[rid] = 1
        columns = self._object_columns
        for k in range(len(columns)):  # (an index loop: compiled, zip is a generic call)
            columns[k].append(objects[k])
        self._rows += 1

    def statuses(self) -> list[str]:
        return self._objects["status"]

    def to_frame(self) -> pd.DataFrame:
        # views over the arrays, not copies: a 200k-request run's rows are ~60 MB, and each
        # column below is copied once more (peak RSS, docs/PERFORMANCE.md)
        floats = _rows(self._floats, np.float64, len(FLOAT_COLUMNS), self._rows)
        ints = _rows(self._ints, np.int64, len(INT_COLUMNS), self._rows)
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


def _rows(values: Any, dtype: Any, width: int, rows: int) -> Any:
    """The first `rows` rows of a flat column-per-position array, as a (rows, width) view."""
    flat = np.frombuffer(values, dtype=dtype, count=rows * width) if rows else np.zeros(0, dtype)
    return flat.reshape(-1, width)


def _take(row: dict[str, Any], defaults: list[tuple[str, Any]], out: list[Any]) -> int:
    """Append the row's value of each (name, default) to `out` (the default where the row has
    none); returns how many the row had."""
    found = 0  # (row.get, not a bound `get`: compiled, a dict's own get is a C call)
    for name, default in defaults:
        value = row.get(name, _ABSENT)
        if value is _ABSENT:
            value = default
        else:
            found += 1
        out.append(value)
    return found


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

