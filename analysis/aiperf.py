"""NVIDIA AIPerf's per-request export (`profile_export.jsonl`, AIPerf 0.13) read as a pdsim trace.

Each line is one request: `metadata` (wall-clock ns: `request_start_ns`, `request_end_ns`,
`credit_issued_ns`; `benchmark_phase` = warmup | profiling; `was_cancelled`), `metrics` (each
`{"value": v, "unit": u}`: `time_to_first_token` and `request_latency` in ms from the request's
start, `inter_chunk_latency` a list of ms gaps between streamed chunks, `input_sequence_length`,
`output_sequence_length`, `usage_prompt_cache_read_tokens`) and, for a failed request, `error`
(`{"code", "type", "message"}`). AIPerf's own definitions (aiperf/metrics/types, 0.13.0):
TTFT = first content response - request start; request latency = last content response -
request start (not the end of the stream); ITL = (request latency - TTFT) / (output tokens - 1),
i.e. pdsim's TPOT; output token throughput = all output tokens / (last response - first request).

Mapping to the trace schema (pdsim/trace.py), times in s from the earliest request start:
`arrival_s` = request start, `first_token_s` = start + TTFT, `token_times_s` = the first token
then one per inter-chunk gap (pdreal streams one token per chunk), `last_token_s` = start +
request latency, `finish_s` = request end (the stream's last byte), `input_tokens` /
`output_tokens` = the sequence lengths, `cached_prefix_tokens` = the server's reported cache
reads. Request ids are the send order. Warm-up records (benchmark_phase warmup) are left out, as
AIPerf leaves them out of its statistics. Everything else (queues, instances) is unknown: NaN / -1.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, TraceError, TraceRecorder

NS_PER_S = 1e9
MS_PER_S = 1e3


def is_aiperf_export(path: Path | str) -> bool:
    """Whether `path` names an AIPerf per-request export (a .jsonl file)."""
    return Path(path).suffix == ".jsonl"


def read_aiperf_export(path: Path | str, keep_warmup: bool = False) -> pd.DataFrame:
    """The export's requests as a trace frame (pdsim schema); TraceError names the file and line."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: AIPerf export not found")
    records = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{number}: not JSON ({exc})") from None
        if not isinstance(record, dict) or not isinstance(record.get("metadata"), dict):
            raise TraceError(f"{path}:{number}: not an AIPerf record (no 'metadata' object)")
        if keep_warmup or record["metadata"].get("benchmark_phase") != "warmup":
            records.append((number, record))
    if not records:
        raise TraceError(f"{path}: no profiling records")
    starts = [_start_ns(r, f"{path}:{n}") for n, r in records]
    origin_ns = min(starts)
    order = np.argsort(starts, kind="stable")
    recorder = TraceRecorder()
    for request_id, i in enumerate(order):
        number, record = records[i]
        recorder.add(_row(record, request_id, (starts[i] - origin_ns) / NS_PER_S, origin_ns, f"{path}:{number}"))
    return recorder.to_frame()


def _start_ns(record: dict[str, Any], where: str) -> int:
    start = record["metadata"].get("request_start_ns")
    if not isinstance(start, int):
        raise TraceError(f"{where}: field 'metadata.request_start_ns' must be an integer, got {start!r}")
    return start


def _metric(record: dict[str, Any], name: str, where: str) -> Any:
    """A metric's value (None when absent); ms and tokens as AIPerf writes them."""
    entry = (record.get("metrics") or {}).get(name)
    if entry is None:
        return None
    if not isinstance(entry, dict) or "value" not in entry:
        raise TraceError(f"{where}: field 'metrics.{name}' must be {{'value': ..., 'unit': ...}}, got {entry!r}")
    return entry["value"]


def _row(record: dict[str, Any], request_id: int, arrival_s: float, origin_ns: int, where: str) -> dict[str, Any]:
    meta = record["metadata"]
    ttft_ms = _metric(record, "time_to_first_token", where)
    latency_ms = _metric(record, "request_latency", where)
    gaps_ms = _metric(record, "inter_chunk_latency", where) or []
    osl = _metric(record, "output_sequence_length", where) or _metric(record, "output_token_count", where) or 0
    end_ns = meta.get("request_end_ns")
    error = record.get("error")
    failed = error is not None or meta.get("was_cancelled") or ttft_ms is None
    row: dict[str, Any] = {
        "request_id": request_id, "arrival_s": arrival_s,
        "input_tokens": int(_metric(record, "input_sequence_length", where) or 0), "output_tokens": int(osl),
        "cached_prefix_tokens": int(_metric(record, "usage_prompt_cache_read_tokens", where) or 0),
        "finish_s": (end_ns - origin_ns) / NS_PER_S if isinstance(end_ns, int) else math.nan,
        "status": STATUS_FAILED if failed else STATUS_FINISHED,
        "failure_reason": _reason(error, meta) if failed else "",
    }
    if ttft_ms is not None:
        first_s = arrival_s + ttft_ms / MS_PER_S
        row["first_token_s"] = first_s
        row["token_times_s"] = list(first_s + np.cumsum([0.0, *gaps_ms]) / MS_PER_S)
    if latency_ms is not None and not failed:
        row["last_token_s"] = arrival_s + latency_ms / MS_PER_S
    return row


def _reason(error: Any, meta: dict[str, Any]) -> str:
    if isinstance(error, dict):
        return f"aiperf: {error.get('type') or 'error'} {error.get('code') or ''}: {error.get('message', '')}".strip()
    return "aiperf: cancelled" if meta.get("was_cancelled") else "aiperf: no content response"
