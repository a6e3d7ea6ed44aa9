"""The internal router <-> instance request format (JSON) and the NDJSON output lines.

POST /generate on an instance takes

    {"request_id": int, "input_ids": [int, ...], "sampling": {SamplingParams fields},
     "bootstrap_room": int, "bootstrap_host": str, "bootstrap_port": int, "arrival_s": float}

(decode instances use bootstrap_host:port to find the prefill rank; "" and 0 for a colocated
instance) and answers a stream of JSON lines: {"token_ids": [...]} while running (decode and
colocated) and one final
{"finished": true, "status", "failure_reason", "row": {trace half-row}}.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any

from pdreal.engine.types import EngineRequest, RequestOutput
from pdreal.model.sampling import SamplingParams

SAMPLING_FIELDS = tuple(f.name for f in fields(SamplingParams))


def sampling_from_json(data: Any, where: str = "sampling") -> SamplingParams:
    """SamplingParams from a JSON object; ValueError names `where`, the field and the value."""
    if not isinstance(data, dict):
        raise ValueError(f"{where} must be a JSON object, got {type(data).__name__} {_short(data)}")
    unknown = sorted(set(data) - set(SAMPLING_FIELDS))
    if unknown:
        raise ValueError(f"{where}: unknown fields {unknown} (known: {list(SAMPLING_FIELDS)})")
    values = dict(data)
    if "stop_token_ids" in values:
        ids = values["stop_token_ids"]
        if not isinstance(ids, list):
            raise ValueError(f"{where}: field 'stop_token_ids' must be a list of token ids, got {_short(ids)}")
        values["stop_token_ids"] = tuple(ids)
    try:
        return SamplingParams(**values)
    except (ValueError, TypeError) as exc:  # SamplingParams names the field and value
        raise ValueError(f"{where}: {exc}") from None


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def sampling_to_json(params: SamplingParams) -> dict[str, Any]:
    data = asdict(params)
    data["stop_token_ids"] = list(params.stop_token_ids)
    return data


def check_token_ids(ids: Any, vocab_size: int, where: str = "input_ids") -> tuple[int, ...]:
    if not isinstance(ids, list) or not ids:
        raise ValueError(f"{where} must be a non-empty list of token ids")
    bad = next((t for t in ids if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < vocab_size), None)
    if bad is not None:
        raise ValueError(f"{where}: token id {bad!r} is not an int in [0, {vocab_size})")
    return tuple(ids)


def request_to_json(req: EngineRequest, bootstrap: str) -> dict[str, Any]:
    """`bootstrap`: the prefill instance's host:port ('' for a colocated instance)."""
    host, _, port = bootstrap.rpartition(":")
    return {"request_id": req.request_id, "input_ids": list(req.input_ids),
            "sampling": sampling_to_json(req.sampling), "bootstrap_room": req.bootstrap_room,
            "bootstrap_host": host, "bootstrap_port": int(port) if port else 0, "arrival_s": req.arrival_s}


def request_from_json(body: Any, vocab_size: int) -> tuple[EngineRequest, str]:
    """(request, bootstrap host:port); ValueError names the bad field."""
    if not isinstance(body, dict):
        raise ValueError(f"request body must be a JSON object, got {type(body).__name__}")
    missing = [k for k in ("request_id", "input_ids", "bootstrap_room") if k not in body]
    if missing:
        raise ValueError(f"missing fields {missing}")
    rid, room = body["request_id"], body["bootstrap_room"]
    if not isinstance(rid, int) or not isinstance(room, int):
        raise ValueError(f"request_id and bootstrap_room must be integers, got {rid!r}, {room!r}")
    arrival = body.get("arrival_s", math.nan)
    if not isinstance(arrival, int | float) or isinstance(arrival, bool):
        raise ValueError(f"field 'arrival_s' must be a number, got {_short(arrival)}")
    req = EngineRequest(rid, check_token_ids(body["input_ids"], vocab_size),
                        sampling_from_json(body.get("sampling", {})), bootstrap_room=room,
                        arrival_s=float(arrival))
    bootstrap = f"{body.get('bootstrap_host', '')}:{body.get('bootstrap_port', '')}"
    return req, bootstrap


def output_line(out: RequestOutput) -> bytes:
    line: dict[str, Any] = {"token_ids": list(out.token_ids)}
    if out.logprobs:
        line["logprobs"] = list(out.logprobs)
    if out.prompt_logprobs:
        line["prompt_logprobs"] = list(out.prompt_logprobs)
    if out.finished:
        line.update(finished=True, status=out.status, failure_reason=out.failure_reason, row=out.row or {})
    return (json.dumps(line) + "\n").encode()


def failed_line(status: str, reason: str, row: dict[str, Any] | None = None) -> bytes:
    final = {"finished": True, "status": status, "failure_reason": reason, "token_ids": [], "row": row or {}}
    return (json.dumps(final) + "\n").encode()


def json_safe(value: Any) -> Any:
    """NaN -> None recursively (strict JSON for clients)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value
