"""Client request parsing (OpenAI completions / chat, SGLang-style /generate) and text handling.

Every parser returns an `ApiRequest` or raises `ValueError` naming the bad field and value (the
API answers HTTP 400 with that message). Defaults follow OpenAI: max_tokens 16, temperature 1.0,
top_p 1.0; /generate follows SGLang: sampling_params.max_new_tokens 128. `ignore_eos` (bool) is
accepted by all three as an extension. Chat messages are rendered with the ChatML template the
SmolLM2-Instruct model was trained on (no default system prompt is added); a message's content is
a string or a list of text parts. A request without a seed samples from fresh entropy (a random
seed is drawn for it); with one, its output repeats. OpenAI parameters this server does not
implement (UNSUPPORTED) are refused unless they carry their neutral value (null, false, 0, ...).
`parse_body` (JSON decoding + parsing + tokenizing) is what the router runs off its event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdreal.model.sampling import SamplingParams, fresh_seed
from pdreal.serving.wire import check_token_ids, sampling_from_json

CHAT_ROLES = ("system", "developer", "user", "assistant")
# OpenAI parameters not implemented here, and the values that mean "not used" (accepted)
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "echo": (None, False), "logprobs": (None, False, 0), "top_logprobs": (None, 0), "suffix": (None, ""),
    "best_of": (None, 1), "logit_bias": (None, {}), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
    "response_format": (None, {"type": "text"}), "tools": (None, []), "tool_choice": (None, "none", "auto"),
    "functions": (None, []), "function_call": (None, "none", "auto"), "modalities": (None, ["text"]),
    "audio": (None,), "prediction": (None,),
}


@dataclass(frozen=True)
class ApiRequest:
    input_ids: tuple[int, ...]
    sampling: SamplingParams
    stream: bool = False
    stop: tuple[str, ...] = ()
    request_id: int | None = None  # /generate `rid`: the trace request id (replay)
    model: str = ""


class TextCodec:
    """Tokenizer wrapper; without a tokenizer (random weights) only token ids are accepted.

    `max_prompt_tokens` (0 = unknown; the router sets it from the model's context length or the
    largest KV pool) cuts hopeless prompts before any work: a token-id list longer than it, or a
    text longer than it times the longest token's characters. Tokenizing uses `encode_batch`,
    which releases the GIL (plain `encode` holds it: seconds for a 10 MB prompt)."""

    def __init__(self, tokenizer: Any | None, vocab_size: int, max_prompt_tokens: int = 0) -> None:
        self.tokenizer, self.vocab_size, self.max_prompt_tokens = tokenizer, vocab_size, max_prompt_tokens
        self.limit_name = "the longest prompt this server takes"  # what max_prompt_tokens is
        vocab = tokenizer.get_vocab() if tokenizer is not None else {}
        self.max_token_chars = max((len(t) for t in vocab), default=0)

    def encode(self, text: str, where: str) -> tuple[int, ...]:
        if self.tokenizer is None:
            raise ValueError(f"{where}: this model has no tokenizer; send token ids instead of text")
        limit = self.max_prompt_tokens * self.max_token_chars
        if limit and len(text) > limit:
            raise ValueError(f"{where}: a text of {len(text)} characters cannot fit in {self.max_prompt_tokens} "
                             f"tokens (the longest token has {self.max_token_chars} characters)")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate such as "\ud800" (valid JSON, not text)
            raise ValueError(f"{where}: not valid Unicode text ({exc.reason} {text[exc.start]!r} at index "
                             f"{exc.start})") from None
        ids = tuple(self.tokenizer.encode_batch([text])[0].ids)
        if not ids:
            raise ValueError(f"{where}: empty prompt")
        return ids

    def token_ids(self, ids: Any, where: str) -> tuple[int, ...]:
        """A client's token-id prompt, checked against the vocabulary and the length limit."""
        if self.max_prompt_tokens and isinstance(ids, list) and len(ids) > self.max_prompt_tokens:
            raise ValueError(f"{where}: {len(ids)} token ids exceed {self.limit_name} ({self.max_prompt_tokens} tokens)")
        return check_token_ids(ids, self.vocab_size, where)

    def decode(self, ids: list[int] | tuple[int, ...]) -> str:
        return self.tokenizer.decode(list(ids)) if self.tokenizer is not None else ""

    def chat_prompt(self, messages: Any) -> tuple[int, ...]:
        if not isinstance(messages, list) or not messages:
            raise ValueError("messages must be a non-empty list of {role, content} objects")
        parts = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
                raise ValueError(f"messages[{i}] must be {{'role': one of {CHAT_ROLES}, 'content': ...}}, "
                                 f"got {_short(m)}")
            role = "system" if m["role"] == "developer" else m["role"]
            parts.append(f"<|im_start|>{role}\n{_content_text(m.get('content'), i)}<|im_end|>\n")
        return self.encode("".join(parts) + "<|im_start|>assistant\n", "messages")


def _content_text(content: Any, i: int) -> str:
    """A message's text: a string, or a list of {"type": "text", "text": str} parts (joined)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"messages[{i}].content must be a string or a list of text parts, got {_short(content)}")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise ValueError(f"messages[{i}].content[{j}]: only text parts {{'type': 'text', 'text': str}} "
                             f"are supported, got {kind!r}")
        texts.append(part["text"])
    return "".join(texts)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class Detokenizer:
    """Incremental text: each call returns the new text, holding back an incomplete UTF-8 tail."""

    def __init__(self, codec: TextCodec) -> None:
        self.codec, self.ids, self.emitted = codec, [], ""

    def add(self, ids: tuple[int, ...] | list[int]) -> str:
        self.ids.extend(ids)
        text = self.codec.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        delta, self.emitted = text[len(self.emitted):], text
        return delta


def _number(body: dict[str, Any], name: str, default: float, kind: type) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or (kind is int and not isinstance(value, int)):
        raise ValueError(f"field {name!r} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    return kind(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    raise ValueError(f"field 'stop' must be a string or a list of strings, got {value!r}")


def _same(value: Any, neutral: Any) -> bool:
    """Equal, without taking true for 1 or false for 0."""
    return value == neutral and isinstance(value, bool) == isinstance(neutral, bool)


def _check_supported(body: dict[str, Any]) -> None:
    for name, neutral in UNSUPPORTED.items():
        if name in body and not any(_same(body[name], v) for v in neutral):
            raise ValueError(f"field {name!r} is not supported by this server, got {_short(body[name])} "
                             f"(leave it out or send {neutral[-1]!r})")


def _openai_sampling(body: dict[str, Any]) -> tuple[SamplingParams, bool, tuple[str, ...]]:
    _check_supported(body)
    if _number(body, "n", 1, int) != 1:
        raise ValueError(f"field 'n' must be 1 (one choice per request), got {body['n']!r}")
    max_tokens = _number(body, "max_tokens", body.get("max_completion_tokens") or 16, int)
    if max_tokens < 1:
        raise ValueError(f"field 'max_tokens' must be >= 1, got {max_tokens}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ValueError(f"field 'stream' must be true or false, got {stream!r}")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ValueError(f"field 'ignore_eos' must be true or false, got {_short(ignore_eos)}")
    seed = body.get("seed")
    sampling = SamplingParams(max_new_tokens=max_tokens, temperature=_number(body, "temperature", 1.0, float),
                              top_p=_number(body, "top_p", 1.0, float),
                              seed=fresh_seed() if seed is None else _number(body, "seed", 0, int),
                              ignore_eos=ignore_eos)
    return sampling, stream, _stop(body.get("stop"))


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_completion(body: Any, codec: TextCodec) -> ApiRequest:
    body = _object(body)
    if "prompt" not in body:
        raise ValueError("missing field 'prompt'")
    prompt = body["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        ids = codec.encode(prompt, "prompt")
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        ids = codec.token_ids(prompt, "prompt")
    else:
        raise ValueError("field 'prompt' must be a string or a list of token ids (one prompt per request)")
    sampling, stream, stop = _openai_sampling(body)
    return ApiRequest(ids, sampling, stream, stop, model=str(body.get("model", "")))


def parse_chat(body: Any, codec: TextCodec) -> ApiRequest:
    body = _object(body)
    if "messages" not in body:
        raise ValueError("missing field 'messages'")
    sampling, stream, stop = _openai_sampling(body)
    return ApiRequest(codec.chat_prompt(body["messages"]), sampling, stream, stop, model=str(body.get("model", "")))


def parse_generate(body: Any, codec: TextCodec) -> ApiRequest:
    body = _object(body)
    if ("text" in body) == ("input_ids" in body):
        raise ValueError("give exactly one of 'text' and 'input_ids'")
    ids = codec.encode(body["text"], "text") if "text" in body else codec.token_ids(body["input_ids"], "input_ids")
    params = body.get("sampling_params")
    params = {} if params is None else params
    if not isinstance(params, dict):
        raise ValueError(f"field 'sampling_params' must be a JSON object, got {_short(params)}")
    params = {"max_new_tokens": 128, **params}
    if params.get("seed") is None:
        params["seed"] = fresh_seed()
    sampling = sampling_from_json(params, "sampling_params")
    stream, rid = body.get("stream", False), body.get("rid")
    if not isinstance(stream, bool):
        raise ValueError(f"field 'stream' must be true or false, got {stream!r}")
    if rid is not None and (not isinstance(rid, int) or isinstance(rid, bool) or rid < 0):
        raise ValueError(f"field 'rid' must be an integer >= 0, got {rid!r}")
    return ApiRequest(ids, sampling, stream, request_id=rid)


Parser = Callable[[Any, TextCodec], ApiRequest]


def parse_body(raw: bytes, parse: Parser, codec: TextCodec) -> ApiRequest:
    """Decode a request body and parse it (the router runs this on a worker thread: a large body
    never holds its event loop). ValueError (HTTP 400) names the problem, for malformed or too
    deeply nested JSON too."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ValueError("malformed JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise ValueError(f"malformed JSON: {exc}") from None
    try:
        return parse(body, codec)
    except RecursionError:
        raise ValueError("request nested too deeply") from None
