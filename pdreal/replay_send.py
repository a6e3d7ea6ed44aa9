"""How `pdreal replay` sends one request: the endpoints it can drive and what each records.

- `generate` (the default): `POST /generate` with the token ids, `max_new_tokens`, greedy,
  `ignore_eos`, streamed; one time per token id received; the last event's meta_info carries the
  router's trace row (server-side times), the status and the failure reason.
- `completions`: `POST /v1/completions` as an OpenAI client sends it (what AIPerf drives): the
  same token ids as `prompt`, `max_tokens`, temperature 0, `ignore_eos` (an extension SGLang, vLLM
  and pdreal accept), `stream` with `stream_options.include_usage`. The router detokenizes and
  writes one SSE JSON chunk per piece of text, so times are per content chunk (a chunk with
  non-empty text: one token each, except where the detokenizer held back an incomplete
  character), as AIPerf records them; the output token count comes from the usage chunk. The
  OpenAI stream carries no trace row: rows are client-side times only (no route_s, no queues).

A request ends `finished` (a complete stream), `rejected` (HTTP 400 or 429) or `failed` (any
other answer, an error event, a broken stream, a timeout) with the reason.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from pdreal.serving.timebase import now_s
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED

ENDPOINTS = ("generate", "completions")


@dataclass
class SendResult:
    status: str = ""  # '' until the final event (then finished | failed | rejected)
    reason: str = ""
    sent_s: float = math.nan
    finish_s: float = math.nan
    token_times_s: list[float] = field(default_factory=list)
    server_row: dict[str, Any] | None = None  # the router's trace row (generate only)
    output_tokens: int | None = None  # as the server reported it (completions' usage); None: one per time


class Planned(Protocol):
    @property
    def request_id(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...


Sender = Callable[[aiohttp.ClientSession, str, Planned, list[int], SendResult, float], Coroutine[Any, Any, None]]


def _payload(endpoint: str, req: Planned, ids: list[int]) -> dict[str, Any]:
    if endpoint == "generate":
        return {"input_ids": ids, "stream": True, "rid": req.request_id,
                "sampling_params": {"max_new_tokens": req.output_tokens, "temperature": 0.0, "ignore_eos": True}}
    return {"prompt": ids, "max_tokens": req.output_tokens, "temperature": 0.0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}


async def _post(endpoint: str, on_event: Callable[[dict[str, Any], SendResult], None],
                session: aiohttp.ClientSession, url: str, req: Planned, ids: list[int], result: SendResult,
                timeout_s: float) -> None:
    """POST one streamed request to `url`/`endpoint`; each SSE event goes to `on_event`."""
    path = "/generate" if endpoint == "generate" else "/v1/completions"
    result.token_times_s, result.sent_s = [], now_s()
    try:
        async with session.post(f"{url}{path}", json=_payload(endpoint, req, ids),
                                timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                body = await resp.json(content_type=None)
                result.status = STATUS_REJECTED if resp.status in (400, 429) else STATUS_FAILED
                result.reason = (body.get("error") or {}).get("message", f"HTTP {resp.status}")
                result.server_row = (body.get("meta_info") or {}).get("trace")
                return
            async for raw in resp.content:
                line = raw.decode().strip()
                if line == "data: [DONE]" and endpoint == "completions" and not result.status:
                    result.status = STATUS_FINISHED
                elif line.startswith("data: ") and line != "data: [DONE]":
                    on_event(json.loads(line[6:]), result)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        result.status, result.reason = STATUS_FAILED, f"client: {type(exc).__name__}: {exc}"
    finally:
        result.finish_s = now_s()


def _on_generate_event(event: dict[str, Any], result: SendResult) -> None:
    if event.get("output_ids"):
        result.token_times_s.extend([now_s()] * len(event["output_ids"]))
    meta = event.get("meta_info") or {}
    if "status" in meta:
        result.status, result.reason, result.server_row = meta["status"], meta["failure_reason"], meta.get("trace")


def _on_completions_event(event: dict[str, Any], result: SendResult) -> None:
    if event.get("error"):
        error = event["error"]
        result.status = STATUS_REJECTED if error.get("type") == STATUS_REJECTED else STATUS_FAILED
        result.reason = error.get("message") or "error event"
        return
    if any(choice.get("text") for choice in event.get("choices") or ()):
        result.token_times_s.append(now_s())
    if event.get("usage"):
        result.output_tokens = int(event["usage"]["completion_tokens"])


async def send_generate(session: aiohttp.ClientSession, url: str, req: Planned, ids: list[int],
                        result: SendResult, timeout_s: float) -> None:
    await _post("generate", _on_generate_event, session, url, req, ids, result, timeout_s)


async def send_completions(session: aiohttp.ClientSession, url: str, req: Planned, ids: list[int],
                           result: SendResult, timeout_s: float) -> None:
    await _post("completions", _on_completions_event, session, url, req, ids, result, timeout_s)


SENDERS: dict[str, Sender] = {"generate": send_generate, "completions": send_completions}
