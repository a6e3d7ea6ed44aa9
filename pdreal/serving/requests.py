"""Client request parsing (OpenAI completions / chat, SGLang-style /generate) and text handling.

Every parser returns an `ApiRequest` or raises `ValueError` naming the bad field and value (the
API answers HTTP 400 with that message). Defaults follow OpenAI: max_tokens 16, temperature 1.0,
top_p 1.0; /generate follows SGLang: sampling_params.max_new_tokens 128. `ignore_eos` (bool) is
accepted by all three as an extension. Chat messages are rendered with the ChatML template the
SmolLM2-Instruct model was trained on (no default system prompt is added); a message's content is
a string or a list of text parts, tokenized as plain text: a control token's spelling in it (say
"<|im_end|>") stays text and never becomes the control token. A completions prompt is the
model's raw input (control tokens in it are read as such), a string, a list of token ids, or a
batch (a list of either); `n` choices per prompt. A request without a seed samples from fresh entropy (a random
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
from pdreal.serving.wire import check_token_ids, sampling_from_json

CHAT_ROLES = ("system", "developer", "user", "assistant")
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
    echo: bool = False  # completions: the prompt's text heads each choice's text
    generate_tokens: bool = True  # False: echo with max_tokens 0 (the prompt's logprobs only)
    include_usage: bool = False  # stream_options.include_usage: a last chunk with the usage
    prompt_texts: tuple[str, ...] = ()  # the prompts as sent, where they were text (echo)

    @property
    def input_ids(self) -> tuple[int, ...]:
        return self.prompts[0]


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
        self.plain = None  # the same tokenizer reading control tokens' spellings as text
        if tokenizer is not None and hasattr(tokenizer, "to_str"):
            from tokenizers import Tokenizer

            self.plain = Tokenizer.from_str(tokenizer.to_str())
            self.plain.encode_special_tokens = True

    def encode(self, text: str, where: str, plain: bool = False) -> tuple[int, ...]:
        """`plain`: control tokens' spellings in `text` are text (user content)."""
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
        tokenizer = self.plain if plain and self.plain is not None else self.tokenizer
        ids = tuple(tokenizer.encode_batch([text])[0].ids)
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
        turns = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
                raise ValueError(f"messages[{i}] must be {{'role': one of {CHAT_ROLES}, 'content': ...}}, "
                                 f"got {_short(m)}")
            role = "system" if m["role"] == "developer" else m["role"]
            turns.append(f"{role}\n{_content_text(m.get('content'), i)}")
        start, end = self._control_id("<|im_start|>"), self._control_id("<|im_end|>")
        newline, ids = self.encode("\n", "messages", plain=True), []
        for i, turn in enumerate(turns):  # control tokens by id, the rest as plain text (ChatML)
            ids += [start, *self.encode(turn, f"messages[{i}].content", plain=True), end, *newline]
        ids += [start, *self.encode("assistant\n", "messages", plain=True)]
        if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:
            raise ValueError(f"messages: {len(ids)} tokens exceed {self.limit_name} ({self.max_prompt_tokens} tokens)")
        return tuple(ids)

    def _control_id(self, token: str) -> int:
        if self.tokenizer is None:
            raise ValueError("messages: this model has no tokenizer; send token ids to /v1/completions instead")
        found = self.tokenizer.token_to_id(token) if self.tokenizer is not None else None
        if found is None:
            raise ValueError(f"messages: this model's tokenizer has no {token!r} token for the chat template")
        return int(found)


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
    """The fields completions and chat share; `logprobs`: -1 none, else top alternatives per token."""
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
                              ignore_eos=_flag(body, "ignore_eos"), logprobs=logprobs)
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
    echo = _flag(body, "echo")
    if echo and logprobs is not None:  # the engines do not compute prompt logprobs yet
        raise ValueError("field 'echo' with 'logprobs' (the prompt's logprobs) is not supported by this server yet; "
                         "send echo or logprobs, not both")
    return _openai_request(body, prompts, -1 if logprobs is None else logprobs, echo, texts)


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
