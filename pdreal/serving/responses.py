"""Response bodies and SSE chunks of the router's three APIs (completion, chat, generate).

Streams are Server-Sent Events: `data: {json}` per chunk, each choice's last chunk with its
`finish_reason` (an `error` object instead when a choice failed), a usage-only chunk (`choices`
empty) when the client asked with stream_options.include_usage, then `data: [DONE]`. Usage has
`prompt_tokens_details.cached_tokens`: prompt tokens the prefix cache served. /generate chunks
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


def error_body(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


@dataclass(frozen=True)
class ResponseFormat:
    kind: str  # completion | chat | generate
    id: str
    created: int
    model: str
    prompt_tokens: int  # over every prompt of the call
    include_usage: bool = False  # streams: `usage: null` on every chunk, then a usage-only chunk

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"response kind {self.kind!r} unknown; use one of {KINDS}")

    @staticmethod
    def sse(payload: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(json_safe(payload), allow_nan=False).encode() + b"\n\n"

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        obj = {"completion": "text_completion", "chat": "chat.completion.chunk"}[self.kind]
        out = {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if self.include_usage:
            out["usage"] = None
        return out

    def chunk(self, index: int, delta: str, token_ids: tuple[int, ...], logprobs: dict[str, Any] | None,
              finish_reason: str | None = None) -> dict[str, Any]:
        """A streamed piece of choice `index` (with `finish_reason`: its last one)."""
        if self.kind == "generate":
            return {"text": delta, "output_ids": list(token_ids), "meta_info": {"id": self.id}}
        if self.kind == "chat":
            content = {"role": "assistant", "content": delta} if delta or finish_reason is None else {}
            choice = {"index": index, "delta": content, "logprobs": logprobs, "finish_reason": finish_reason}
        else:
            choice = {"index": index, "text": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return self._envelope([choice])

    def usage_chunk(self, usage: dict[str, Any]) -> dict[str, Any]:
        """The last chunk of a stream that asked for stream_options.include_usage."""
        return {**self._envelope([]), "usage": usage}

    def usage(self, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": self.prompt_tokens + completion_tokens,
                "prompt_tokens_details": {"cached_tokens": cached_tokens}}

    def meta(self, final: FinalEvent, reason: str, completion_tokens: int) -> dict[str, Any]:
        return {"id": self.id, "status": final.status, "failure_reason": final.failure_reason,
                "finish_reason": reason, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": completion_tokens, "cached_tokens": final.row.get("cached_prefix_tokens", 0),
                "trace": final.row, "clock_id": clock_id(), "now_s": now_s()}

    def generate_last(self, final: FinalEvent, reason: str, output_ids: tuple[int, ...],
                      text: str | None = None) -> dict[str, Any]:
        """/generate's last chunk (text None) or body: meta_info with the trace row, or an error."""
        out: dict[str, Any] = {"text": text if text is not None else "",
                               "output_ids": list(output_ids) if text is not None else [],
                               "meta_info": self.meta(final, reason, len(output_ids))}
        if final.status != STATUS_FINISHED:
            out.update(error_body(final.failure_reason, final.status))
        return json_safe(out)

    def choice(self, index: int, text: str, logprobs: dict[str, Any] | None, reason: str) -> dict[str, Any]:
        if self.kind == "chat":
            return {"index": index, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                    "finish_reason": reason}
        return {"index": index, "text": text, "logprobs": logprobs, "finish_reason": reason}

    def body(self, choices: list[dict[str, Any]], usage: dict[str, Any]) -> dict[str, Any]:
        """The non-streaming response of a call whose choices all finished."""
        obj = "chat.completion" if self.kind == "chat" else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices,
                "usage": usage}
