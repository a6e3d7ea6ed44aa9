"""Response bodies and SSE chunks of the router's three APIs (completion, chat, generate).

Streams are Server-Sent Events: `data: {json}` per chunk, a last chunk with `finish_reason` and
`usage` (or an `error` object when the request failed), then `data: [DONE]`. /generate chunks
carry `text`, `output_ids` and `meta_info`; its last chunk's meta_info has the trace row.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pdreal.serving.router import FinalEvent
from pdreal.serving.timebase import clock_id, now_s
from pdreal.serving.wire import json_safe
from pdsim.trace import STATUS_FINISHED

KINDS = ("completion", "chat", "generate")


def error_body(message: str, kind: str, code: int | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


@dataclass(frozen=True)
class ResponseFormat:
    kind: str  # completion | chat | generate
    id: str
    created: int
    model: str
    prompt_tokens: int

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"response kind {self.kind!r} unknown; use one of {KINDS}")

    @staticmethod
    def sse(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(json_safe(payload), allow_nan=False).encode() + b"\n\n"

    def _envelope(self, choice: dict[str, Any]) -> dict[str, Any]:
        obj = {"completion": "text_completion", "chat": "chat.completion.chunk"}[self.kind]
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice]}

    def chunk(self, delta: str, token_ids: tuple[int, ...]) -> dict[str, Any]:
        if self.kind == "generate":
            return {"text": delta, "output_ids": list(token_ids), "meta_info": {"id": self.id}}
        if self.kind == "chat":
            return self._envelope({"index": 0, "delta": {"role": "assistant", "content": delta}, "finish_reason": None})
        return self._envelope({"index": 0, "text": delta, "logprobs": None, "finish_reason": None})

    def usage(self, final: FinalEvent) -> dict[str, int]:
        completion = len(final.output_ids)
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                "total_tokens": self.prompt_tokens + completion}

    def meta(self, final: FinalEvent, reason: str) -> dict[str, Any]:
        return {"id": self.id, "status": final.status, "failure_reason": final.failure_reason,
                "finish_reason": reason, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": len(final.output_ids), "trace": final.row, "clock_id": clock_id(),
                "now_s": now_s()}

    def final_chunks(self, final: FinalEvent, reason: str) -> list[dict[str, Any]]:
        if self.kind == "generate":
            last = {"text": "", "output_ids": [], "meta_info": self.meta(final, reason)}
            if final.status != STATUS_FINISHED:
                last.update(error_body(final.failure_reason, final.status))
            return [last]
        if final.status != STATUS_FINISHED:
            return [error_body(final.failure_reason, final.status)]
        if self.kind == "chat":
            last = self._envelope({"index": 0, "delta": {}, "finish_reason": reason})
        else:
            last = self._envelope({"index": 0, "text": "", "logprobs": None, "finish_reason": reason})
        return [{**last, "usage": self.usage(final)}]

    def body(self, text: str, final: FinalEvent, reason: str) -> dict[str, Any]:
        """The non-streaming response (an error object when the request did not finish)."""
        if self.kind == "generate":
            out = {"text": text, "output_ids": list(final.output_ids), "meta_info": self.meta(final, reason)}
            if final.status != STATUS_FINISHED:
                out.update(error_body(final.failure_reason, final.status))
            return json_safe(out)
        if final.status != STATUS_FINISHED:
            return error_body(final.failure_reason, final.status)
        if self.kind == "chat":
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            obj = "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": [choice],
                "usage": self.usage(final)}
