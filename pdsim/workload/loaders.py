"""Trace loaders: Mooncake JSONL, Azure CSV, lengths-only CSV, plain CSV.

Each file is read once into columnar arrays by pyarrow (no per-row Python objects), validated
with vectorised checks, and wrapped in a `Workload`, which yields `Request`s lazily. Every
problem raises `WorkloadError` naming the file, the field and the offending value (with its
1-based row number).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from pdsim.workload.errors import WorkloadError
from pdsim.workload.request import Workload, make_workload

MOONCAKE_BLOCK_TOKENS = 512


def load_mooncake(path: Path, name: str = "mooncake") -> Workload:
    """Mooncake JSONL: timestamp (ms), input_length, output_length, hash_ids (512-token blocks)."""
    table = _read(path, lambda p: pajson.read_json(p))
    _require(table, path, ("timestamp", "input_length", "output_length", "hash_ids"))
    arrival_s = _numeric(table, "timestamp", path) / 1000.0
    hashes = table.column("hash_ids").combine_chunks()
    if not pa.types.is_list(hashes.type) and not pa.types.is_large_list(hashes.type):
        raise WorkloadError(str(path), "hash_ids", f"expected a list of integers, got {hashes.type}")
    if hashes.null_count:
        raise WorkloadError(str(path), "hash_ids", f"null at row {_first(hashes.is_null()) + 1}")
    offsets = hashes.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    values = hashes.flatten().to_numpy(zero_copy_only=False).astype(np.int64)
    wl = _build(name, path, arrival_s, "timestamp", table, ("input_length", "output_length"))
    return Workload(**{**wl.__dict__, "hash_offsets": offsets, "hash_values": values})


def load_azure(path: Path, name: str = "azure") -> Workload:
    """Azure LLM inference trace CSV: TIMESTAMP (datetime), ContextTokens, GeneratedTokens."""
    table = _read(path, lambda p: pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(
        column_types={"TIMESTAMP": pa.string()})))
    _require(table, path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    stamps = table.column("TIMESTAMP").combine_chunks()
    if stamps.null_count:
        raise WorkloadError(str(path), "TIMESTAMP", f"empty value at row {_first(stamps.is_null()) + 1}")
    try:
        parsed = stamps.cast(pa.timestamp("ns"))
    except pa.ArrowInvalid as exc:
        raise WorkloadError(str(path), "TIMESTAMP", f"unparsable ({exc})") from None
    nanos = parsed.cast(pa.int64()).to_numpy()
    arrival_s = (nanos - nanos[0]).astype(np.float64) / 1e9
    return _build(name, path, arrival_s, "TIMESTAMP", table, ("ContextTokens", "GeneratedTokens"))


def load_plain_csv(path: Path, name: str = "csv") -> Workload:
    """Plain CSV: arrival_s,input_tokens,output_tokens[,session_id][,hash_ids,block_tokens]
    (hash_ids: the prefix block hashes, space-separated; block_tokens: their block size)."""
    table = _read(path, lambda p: pacsv.read_csv(p, convert_options=pacsv.ConvertOptions(
        column_types={"hash_ids": pa.string()})))
    _require(table, path, ("arrival_s", "input_tokens", "output_tokens"))
    arrival_s = _numeric(table, "arrival_s", path)
    wl = _build(name, path, arrival_s, "arrival_s", table, ("input_tokens", "output_tokens"))
    extra: dict = {}
    if "session_id" in table.column_names:
        extra["session_id"] = _numeric(table, "session_id", path).astype(np.int64)
    if "hash_ids" in table.column_names:
        _require(table, path, ("block_tokens",))
        lists = [[int(h) for h in (text or "").split()] for text in table.column("hash_ids").to_pylist()]
        extra["hash_offsets"] = np.cumsum([0, *map(len, lists)]).astype(np.int64)
        extra["hash_values"] = np.array([h for hs in lists for h in hs], dtype=np.int64)
        extra["block_tokens"] = int(_lengths(table, "block_tokens", path)[0])
    return Workload(**{**wl.__dict__, **extra}) if extra else wl


def load_lengths_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Lengths-only CSV (num_prefill_tokens,num_decode_tokens,...): the two length columns."""
    table = _read(path, lambda p: pacsv.read_csv(p))
    _require(table, path, ("num_prefill_tokens", "num_decode_tokens"))
    inputs = _lengths(table, "num_prefill_tokens", path)
    outputs = _lengths(table, "num_decode_tokens", path)
    return inputs, outputs


def _read(path: Path, reader) -> pa.Table:
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(str(path), "path", "trace file not found")
    if path.stat().st_size == 0:
        raise WorkloadError(str(path), "path", "trace file is empty")
    try:
        table = reader(path)
    except (pa.ArrowInvalid, pa.ArrowTypeError, UnicodeDecodeError) as exc:
        raise WorkloadError(str(path), "path", f"cannot parse ({str(exc).splitlines()[0]})") from None
    if table.num_rows == 0:
        raise WorkloadError(str(path), "path", "trace has no rows")
    return table


def _require(table: pa.Table, path: Path, columns: tuple[str, ...]) -> None:
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise WorkloadError(str(path), missing[0], f"column missing (have {table.column_names})")


def _numeric(table: pa.Table, column: str, path: Path) -> np.ndarray:
    col = table.column(column).combine_chunks()
    if col.null_count:
        raise WorkloadError(str(path), column, f"empty value at row {_first(col.is_null()) + 1}")
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
        bad = _first_non_numeric(col)
        raise WorkloadError(str(path), column, f"non-numeric value {bad!r}")
    values = col.to_numpy(zero_copy_only=False).astype(np.float64)
    if not np.isfinite(values).all():
        row = int(np.flatnonzero(~np.isfinite(values))[0])
        raise WorkloadError(str(path), column, f"non-finite value {values[row]} at row {row + 1}")
    return values


def _lengths(table: pa.Table, column: str, path: Path) -> np.ndarray:
    values = _numeric(table, column, path)
    bad = np.flatnonzero((values < 1) | (values != np.floor(values)))
    if bad.size:
        row = int(bad[0])
        raise WorkloadError(str(path), column, f"length must be a positive integer, got {values[row]:g} at row {row + 1}")
    return values.astype(np.int64)


def _build(
    name: str, path: Path, arrival_s: np.ndarray, time_col: str, table: pa.Table, length_cols: tuple[str, str]
) -> Workload:
    """Validate arrivals (non-negative, non-decreasing) and lengths; rebase time to 0."""
    if arrival_s.size and arrival_s[0] < 0:
        raise WorkloadError(str(path), time_col, f"negative value {arrival_s[0]:g} at row 1")
    back = np.flatnonzero(np.diff(arrival_s) < 0)
    if back.size:
        row = int(back[0]) + 1
        raise WorkloadError(str(path), time_col, f"not monotonic: {arrival_s[row]:g} s at row {row + 1} after {arrival_s[row - 1]:g} s")
    return make_workload(
        name,
        arrival_s=arrival_s - arrival_s[0],
        input_tokens=_lengths(table, length_cols[0], path),
        output_tokens=_lengths(table, length_cols[1], path),
        block_tokens=MOONCAKE_BLOCK_TOKENS,
    )


def _first(mask: pa.Array) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def _first_non_numeric(col: pa.Array) -> str:
    for value in col.to_pylist():
        try:
            float(value)
        except (TypeError, ValueError):
            return str(value)
    return str(col[0].as_py())
