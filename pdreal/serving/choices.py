"""The choices of one API call and their OpenAI logprobs objects.

A call has `n` choices per prompt (a completions batch has several prompts); choice index =
prompt index x n + j, as OpenAI numbers them. Each choice is one request through the router
(`Router.generate`: admission, routing, both halves, its own trace row). With n > 1, choice 0 of
a prompt goes first and the others follow once its prefill half has ended, so they find its
prompt in the prefill instance's prefix cache (as SGLang's parallel sampling warms the cache
with the prompt first); choice j samples from seed + j. `run_choices` merges their events into
one stream of (choice index, event).

Logprobs: per token [logprob, [[token id, logprob], ...]] from the engine (log-softmax of the raw
logits, before temperature and top-p), shaped here as OpenAI's completions object (`tokens`,
`token_logprobs`, `top_logprobs`, `text_offset`) or chat object (`content`: token, logprob,
bytes, top_logprobs). They go out with the text they belong to (TextStream.released_tokens).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import Any

from pdreal.model.sampling import SEED_LIMIT
from pdreal.serving.requests import ApiRequest, TextCodec
from pdreal.serving.router import FinalEvent, Router, TokenEvent
from pdreal.serving.textstream import TextStream

Event = TokenEvent | FinalEvent


@dataclass
class Choice:
    index: int
    prompt_index: int
    text: TextStream
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    logprobs: list[Any] = field(default_factory=list)  # per output token as it arrived
    logprobs_sent: int = 0
    final: FinalEvent | None = None
    prompt_logprobs: tuple[Any, ...] = ()  # echo + logprobs: per prompt token (the first None), with its first token
    echoed: bool = False  # echo: the prompt's text is out

    def add(self, event: TokenEvent) -> str:
        """The text to show now; sets `stop` once a stop string matched (the router then ends it)."""
        delta = self.text.add(event.token_ids)
        self.logprobs.extend(event.logprobs or (None,) * len(event.token_ids))
        if self.text.stopped:
            self.stop.set()
        return delta

    def new_logprobs(self) -> list[tuple[int, Any]]:
        """(token id, its logprob entry) of the tokens whose text is out and whose logprobs are not."""
        upto = self.text.released_tokens
        start, self.logprobs_sent = self.logprobs_sent, max(self.logprobs_sent, upto)
        return [(self.text.ids[i], self.logprobs[i] if i < len(self.logprobs) else None) for i in range(start, upto)]

    @property
    def output_ids(self) -> tuple[int, ...]:
        """The tokens the choice returns: up to the one that completed a stop string."""
        ids = self.final.output_ids if self.final is not None else tuple(self.text.ids)
        return ids[:self.text.stop_tokens] if self.text.stopped else ids


def make_choices(req: ApiRequest, codec: TextCodec) -> list[Choice]:
    return [Choice(p * req.n + j, p, TextStream(codec, req.stop)) for p in range(len(req.prompts)) for j in range(req.n)]


async def run_choices(router: Router, req: ApiRequest, choices: list[Choice],
                      first_request_id: int | None = None) -> AsyncGenerator[tuple[int, Event], None]:
    """Dispatch every choice (n > 1: the rest of a prompt's after its first one's prefill) and
    yield (choice index, event) as they come; closing the iterator cancels what still runs
    (the router aborts those requests)."""
    queue: asyncio.Queue[tuple[int, Event]] = asyncio.Queue()

    async def pump(choice: Choice, prefilled: asyncio.Event | None) -> None:
        sampling = replace(req.sampling, seed=(req.sampling.seed + choice.index % req.n) % SEED_LIMIT)
        rid = first_request_id if first_request_id is not None else router.new_request_id()
        events = router.generate(req.prompts[choice.prompt_index], sampling, rid, choice.stop, prefilled)
        try:
            async for event in events:
                queue.put_nowait((choice.index, event))
        finally:
            await events.aclose()

    async def prompt_group(group: list[Choice]) -> None:
        prefilled = asyncio.Event()
        first = asyncio.create_task(pump(group[0], prefilled))
        rest: list[asyncio.Task[None]] = []
        try:
            if len(group) > 1:
                await prefilled.wait()
                rest = [asyncio.create_task(pump(c, None)) for c in group[1:]]
            await asyncio.gather(first, *rest)
        finally:
            for task in (first, *rest):
                task.cancel()
            await asyncio.gather(first, *rest, return_exceptions=True)

    groups = [asyncio.create_task(prompt_group([c for c in choices if c.prompt_index == p]))
              for p in range(len(req.prompts))]
    try:
        remaining = len(choices)
        while remaining:
            index, event = await queue.get()
            remaining -= isinstance(event, FinalEvent)
            yield index, event
    finally:
        for task in groups:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*groups, return_exceptions=True)


def token_text(codec: TextCodec, token_id: int) -> str:
    return codec.decode([token_id])


def completion_logprobs(codec: TextCodec, entries: list[tuple[int, Any]], offset_chars: int) -> dict[str, Any]:
    """OpenAI completions' logprobs object of these tokens; text offsets start at `offset_chars`."""
    tokens, values, tops, offsets = [], [], [], []
    for token_id, entry in entries:
        text = token_text(codec, token_id)
        tokens.append(text)
        values.append(entry[0] if entry is not None else None)
        tops.append({token_text(codec, t): lp for t, lp in entry[1]} if entry is not None and entry[1] else None)
        offsets.append(offset_chars)
        offset_chars += len(text)
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def chat_logprobs(codec: TextCodec, entries: list[tuple[int, Any]]) -> dict[str, Any]:
    """OpenAI chat's logprobs object (`content`: one item per token)."""
    def item(token_id: int, logprob: float | None) -> dict[str, Any]:
        text = token_text(codec, token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    content = [{**item(t, e[0] if e is not None else None),
                "top_logprobs": [item(a, lp) for a, lp in e[1]] if e is not None else []} for t, e in entries]
    return {"content": content, "refusal": None}
