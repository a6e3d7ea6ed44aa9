"""One API call served end to end: its choices through the router, text with stop strings held
back (textstream.py), logprobs with the text they belong to, then the body or the stream's end.

Non-streaming: the body once every choice ended (the first failure's status otherwise: 429
rejected, 503 no instance could take it, with Retry-After, else 500). Streaming: chunks as text
becomes visible; a failed choice ends the stream with an `error` event. A client that goes away
(a failed write, or the router's HTTP server cancelling the handler of a closed connection,
streamed or not) ends the call: every choice still running is aborted on both halves.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from pdreal.serving.choices import (
    Choice,
    chat_logprobs,
    completion_logprobs,
    make_choices,
    run_choices,
)
from pdreal.serving.requests import ApiRequest, TextCodec
from pdreal.serving.responses import ResponseFormat, error_body
from pdreal.serving.router import FinalEvent, Router
from pdsim.trace import STATUS_FINISHED, STATUS_REJECTED

log = logging.getLogger(__name__)


@dataclass
class ApiCall:
    router: Router
    codec: TextCodec
    req: ApiRequest
    fmt: ResponseFormat
    eos_ids: frozenset[int]

    def __post_init__(self) -> None:
        self.choices = make_choices(self.req, self.codec)
        self.texts = ["" for _ in self.choices]  # each choice's text so far (non-streaming body)
        self.failed: FinalEvent | None = None

    async def serve(self, request: web.Request) -> web.StreamResponse:
        response: web.StreamResponse | None = None
        if self.req.stream:
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await response.prepare(request)
        events = run_choices(self.router, self.req, self.choices, self.req.request_id)
        try:
            if self.req.echo and self.req.sampling.prompt_logprobs < 0:  # the prompt's text at once
                for c in self.choices:
                    await self._echo(response, c)
            async for index, event in events:
                choice = self.choices[index]
                choice.prompt_logprobs = choice.prompt_logprobs or event.prompt_logprobs
                if self.req.echo and not choice.echoed:  # with its first event (the prompt's logprobs)
                    await self._echo(response, choice)
                if not isinstance(event, FinalEvent):
                    delta = choice.add(event) if self.req.generate_tokens else ""
                    if delta or self.fmt.kind == "generate":
                        await self._out(response, choice, delta, event.token_ids)
                    continue
                choice.final = event
                if event.status != STATUS_FINISHED:
                    self.failed = event
                    break
                await self._end_choice(response, choice)
        except (ConnectionError, asyncio.CancelledError) as exc:  # the client went away
            log.info("client of %s went away (%s)", self.fmt.id, type(exc).__name__)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return response if response is not None else web.Response(status=499)  # (no one reads it)
        finally:
            await events.aclose()
        return await self._finish(response)

    async def _echo(self, response: web.StreamResponse | None, choice: Choice) -> None:
        """The prompt heading a choice (echo): its text, and with logprobs the prompt tokens'
        entries, in the choice's first chunk (they come with its first token)."""
        choice.echoed = True
        await self._out(response, choice, self._prompt_text(choice), (), entries=self._prompt_entries(choice))

    async def _out(self, response: web.StreamResponse | None, choice: Choice, delta: str,
                   token_ids: tuple[int, ...], reason: str | None = None,
                   entries: list[tuple[int, Any]] | None = None) -> None:
        """Text (and the logprobs of the tokens it completes, or `entries`) of a choice: streamed or kept."""
        self.texts[choice.index] += delta
        if response is None:
            return
        entries = choice.new_logprobs() if entries is None else entries
        logprobs = self._logprobs(choice, entries, len(self.texts[choice.index]) - len(delta))
        await response.write(self.fmt.sse(self.fmt.chunk(choice.index, delta, token_ids, logprobs, reason)))

    async def _end_choice(self, response: web.StreamResponse | None, choice: Choice) -> None:
        tail = choice.text.finish() if self.req.generate_tokens else ""
        if response is not None and self.fmt.kind != "generate":
            await self._out(response, choice, tail, (), self._reason(choice))
        else:
            self.texts[choice.index] += tail

    async def _finish(self, response: web.StreamResponse | None) -> web.StreamResponse:
        if response is None:
            return self._body()
        try:
            if self.failed is not None:
                await response.write(self.fmt.sse(self._error_payload(self.failed)))
            elif self.fmt.kind == "generate":
                c = self.choices[0]
                assert c.final is not None  # (not failed: every choice ended with its final event)
                await response.write(self.fmt.sse(self.fmt.generate_last(c.final, self._reason(c), c.output_ids)))
            elif self.fmt.include_usage:
                await response.write(self.fmt.sse(self.fmt.usage_chunk(self._usage())))
            await response.write(b"data: [DONE]\n\n")
        except ConnectionError:
            log.info("client of %s went away before the last chunk", self.fmt.id)
        return response

    def _body(self) -> web.Response:
        if self.failed is not None:
            final = self.failed
            status = 503 if final.unavailable else 429 if final.status == STATUS_REJECTED else 500
            headers = {"Retry-After": "1"} if status == 503 else None
            return web.json_response(self._error_payload(final), status=status, dumps=_dumps, headers=headers)
        if self.fmt.kind == "generate":
            c = self.choices[0]
            assert c.final is not None  # (not failed: every choice ended with its final event)
            body = self.fmt.generate_last(c.final, self._reason(c), c.output_ids, self.texts[0])
            return web.json_response(body, dumps=_dumps)
        choices = []
        for c in self.choices:
            entries = self._prompt_entries(c) + [*c.new_logprobs()]
            logprobs = self._logprobs(c, entries, 0)
            choices.append(self.fmt.choice(c.index, self.texts[c.index], logprobs, self._reason(c)))
        return web.json_response(self.fmt.body(choices, self._usage()), dumps=_dumps)

    def _error_payload(self, final: FinalEvent) -> dict[str, Any]:
        if self.fmt.kind == "generate":
            return self.fmt.generate_last(final, "error", tuple(final.output_ids),
                                          None if self.req.stream else self.texts[0])
        return error_body(final.failure_reason, final.status)

    def _usage(self) -> dict[str, Any]:
        completion = sum(len(c.output_ids) for c in self.choices) if self.req.generate_tokens else 0
        firsts = [c for c in self.choices if c.index % self.req.n == 0]  # each prompt counted once
        cached = sum(int(c.final.row.get("cached_prefix_tokens", 0) or 0) for c in firsts if c.final is not None)
        return self.fmt.usage(completion, cached)

    def _reason(self, choice: Choice) -> str:
        final = choice.final
        if final is None or final.status != STATUS_FINISHED:
            return "error"
        if choice.text.stopped:
            return "stop"
        last = final.output_ids[-1] if final.output_ids else -1
        sampling = self.req.sampling
        hit_eos = not sampling.ignore_eos and (last in self.eos_ids or last in sampling.stop_token_ids)
        return "stop" if hit_eos and self.req.generate_tokens else "length"

    def _prompt_text(self, choice: Choice) -> str:
        texts = self.req.prompt_texts
        return texts[choice.prompt_index] if texts else self.codec.decode(self.req.prompts[choice.prompt_index])

    def _prompt_entries(self, choice: Choice) -> list[tuple[int, Any]]:
        """Echo with logprobs: the prompt's tokens (the first has no logprob), before the output's."""
        if self.req.sampling.prompt_logprobs < 0:
            return []
        prompt, found = self.req.prompts[choice.prompt_index], list(choice.prompt_logprobs)
        found = found[-(len(prompt) - 1):] if len(prompt) > 1 else []
        return [(t, found[i - 1] if 0 < i <= len(found) else None) for i, t in enumerate(prompt)]

    def _logprobs(self, choice: Choice, entries: list[tuple[int, Any]], offset_chars: int) -> dict[str, Any] | None:
        if self.req.sampling.logprobs < 0 or self.fmt.kind == "generate":
            return None
        if self.fmt.kind == "chat":
            return chat_logprobs(self.codec, entries)
        return completion_logprobs(self.codec, entries, offset_chars)


def _dumps(data: Any) -> str:
    return json.dumps(data, allow_nan=False)
