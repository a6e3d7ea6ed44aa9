"""Client request parsing (OpenAI completions / chat, SGLang-style /generate) and text handling.

Every parser returns an `ApiRequest` or raises `ValueError` naming the bad field and value (the
API answers HTTP 400 with that message). Defaults follow OpenAI: max_tokens 16, temperature 1.0,
top_p 1.0; /generate follows SGLang: sampling_params.max_new_tokens 128. `ignore_eos` (bool) is
accepted by all three as an extension. Chat messages and prompts are tokenized by `TextCodec`
(codec.py: ChatML, user content never becomes control tokens). A completions prompt is a string,
a list of token ids, or a batch (a list of either); `n` choices per prompt; `echo` with
`logprobs` asks the engines for the prompt tokens' logprobs too. A request without a seed samples from fresh entropy (a random
seed is drawn for it); with one, its output repeats. OpenAI parameters this server does not
implement (UNSUPPORTED) are refused unless they carry their neutral value (null, false, 0, ...).
`parse_body` (JSON decoding + parsing + tokenizing) is what the router runs off its event loop.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdreal.model.sampling import MAX_TOP_LOGPROBS, SamplingParams, fresh_seed
from pdreal.serving.codec import TextCodec
from pdreal.serving.wire import sampling_from_json

# OpenAI parameters not implemented here, and the values that mean "not used" (accepted)
UNSUPPORTED: dict[str, tuple[Any, ...]] = {
    "suffix": (None, ""), "best_of": (None, 1), "logit_bias": (None, {}), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
    "response_format": (None, {"type": "text"}), "tools": (None, []), "tool_choice": (None, "none", "auto"),
    "functions": (None, []), "function_call": (None, "none", "auto"), "modalities": (None, ["text"]),
    "audio": (None,), "prediction": (None,),
}


MAX_CHOICES = 128  # prompts x n of one call
MAX_COMPLETION_LOGPROBS = 5  # OpenAI completions' `logprobs` limit (chat's top_logprobs: 20)


@dataclass(frozen=True)
class ApiRequest:
    prompts: tuple[tuple[int, ...], ...]  # one, or a batch (completions)
    sampling: SamplingParams  # its seed is choice 0's; choice j draws from seed + j
    stream: bool = False
    stop: tuple[str, ...] = ()
    request_id: int | None = None  # /generate `rid`: the trace request id (replay)
    model: str = ""
    n: int = 1  # choices per prompt
    echo: bool = False  # completions: the prompt's text (and with logprobs its logprobs) heads each choice's
    generate_tokens: bool = True  # False: echo with max_tokens 0 (the prompt's logprobs only)
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    prompt_texts: tuple[str, ...] = ()  # the prompts as sent, where they were text (echo)

    @property
    def input_ids(self) -> tuple[int, ...]:
        return self.prompts[0]


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


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


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"field {name!r} must be true or false, got {_short(value)}")
    return value


def _max_tokens(body: dict[str, Any], allow_zero: bool) -> int:
    """max_completion_tokens (OpenAI's current name) wins over the deprecated max_tokens."""
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    value = _number(body, name, 16, int)
    if value < (0 if allow_zero else 1):
        raise ValueError(f"field {name!r} must be >= {0 if allow_zero else 1}, got {value}"
                         + (" (0 only with echo)" if name == "max_tokens" else ""))
    return value


def _include_usage(body: dict[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise ValueError("field 'stream_options' is only allowed with stream: true")
    if not isinstance(options, dict) or set(options) - {"include_usage", "continuous_usage_stats"}:
        raise ValueError(f"field 'stream_options' must be {{'include_usage': bool}}, got {_short(options)}")
    return _flag(options, "include_usage")


def _openai_request(body: dict[str, Any], prompts: tuple[tuple[int, ...], ...], logprobs: int,
                    echo: bool = False, prompt_texts: tuple[str, ...] = ()) -> ApiRequest:
    """The fields completions and chat share; `logprobs`: -1 none, else top alternatives per token
    (with `echo` the prompt tokens' too: SamplingParams.prompt_logprobs)."""
    _check_supported(body)
    n = _number(body, "n", 1, int)
    if n < 1 or n * len(prompts) > MAX_CHOICES:
        raise ValueError(f"field 'n' must be >= 1 with n x prompts <= {MAX_CHOICES}, got n={n} for "
                         f"{len(prompts)} prompt(s)")
    max_tokens = _max_tokens(body, allow_zero=echo)
    stream = _flag(body, "stream")
    seed = body.get("seed")
    sampling = SamplingParams(max_new_tokens=max(1, max_tokens), temperature=_number(body, "temperature", 1.0, float),
                              top_p=_number(body, "top_p", 1.0, float),
                              seed=fresh_seed() if seed is None else _number(body, "seed", 0, int),
                              ignore_eos=_flag(body, "ignore_eos"), logprobs=logprobs,
                              prompt_logprobs=logprobs if echo else -1)
    return ApiRequest(prompts, sampling, stream, _stop(body.get("stop")), model=str(body.get("model", "")), n=n,
                      echo=echo, generate_tokens=max_tokens > 0, include_usage=_include_usage(body, stream),
                      prompt_texts=prompt_texts)


def _object(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValueError(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _prompts(prompt: Any, codec: TextCodec) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """(token ids per prompt, text per prompt where given as text): a string, a list of token ids,
    or a batch - a list of strings or of token-id lists."""
    if isinstance(prompt, str):
        return (codec.encode(prompt, "prompt"),), (prompt,)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return (codec.token_ids(prompt, "prompt"),), ()
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return tuple(codec.encode(p, f"prompt[{i}]") for i, p in enumerate(prompt)), tuple(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(p, list) for p in prompt):
        return tuple(codec.token_ids(p, f"prompt[{i}]") for i, p in enumerate(prompt)), ()
    raise ValueError(f"field 'prompt' must be a string, a list of token ids, or a non-empty list of either "
                     f"(a batch), got {_short(prompt)}")


def parse_completion(body: Any, codec: TextCodec) -> ApiRequest:
    body = _object(body)
    if "prompt" not in body:
        raise ValueError("missing field 'prompt'")
    prompts, texts = _prompts(body["prompt"], codec)
    logprobs = body.get("logprobs")
    if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                 or not 0 <= logprobs <= MAX_COMPLETION_LOGPROBS):
        raise ValueError(f"field 'logprobs' must be an integer in [0, {MAX_COMPLETION_LOGPROBS}] (completions), "
                         f"got {_short(logprobs)}")
    return _openai_request(body, prompts, -1 if logprobs is None else logprobs, _flag(body, "echo"), texts)


def parse_chat(body: Any, codec: TextCodec) -> ApiRequest:
    body = _object(body)
    if "messages" not in body:
        raise ValueError("missing field 'messages'")
    _check_supported(body)
    if "echo" in body and body["echo"] not in (None, False):
        raise ValueError(f"field 'echo' is not a chat parameter, got {_short(body['echo'])}")
    top = body.get("top_logprobs")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise ValueError(f"field 'top_logprobs' must be an integer in [0, {MAX_TOP_LOGPROBS}], got {_short(top)}")
    wanted = _flag(body, "logprobs")
    if top and not wanted:
        raise ValueError(f"field 'top_logprobs' ({top}) needs 'logprobs': true")
    prompt = codec.chat_prompt(body["messages"])
    return _openai_request(body, (prompt,), (top or 0) if wanted else -1)


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
    return ApiRequest((ids,), sampling, stream, request_id=rid)


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
