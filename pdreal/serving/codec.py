"""Text <-> token ids for the router: prompts, chat messages (ChatML) and output text.

Chat messages are rendered with the ChatML template the SmolLM2-Instruct model was trained on
(no default system prompt is added); a message's content is a string or a list of text parts,
tokenized as plain text: a control token's spelling in it (say "<|im_end|>") stays text and never
becomes the control token. A completions prompt is the model's raw input (control tokens in it
are read as such).
"""

from __future__ import annotations

from typing import Any

from pdreal.serving.wire import check_token_ids

CHAT_ROLES = ("system", "developer", "user", "assistant")


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
