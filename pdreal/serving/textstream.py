"""Incremental output text of one choice, with stop strings matched across token boundaries.

`TextStream.add(token_ids)` returns the text a client may see now. Text that could still turn
into a stop string is held back: after each token, the longest end of the text that is a prefix
of some stop string stays unshown until a later token rules the stop out (then it is shown) or
completes it (then the text ends where the stop string starts, and `stopped` is set). An
incomplete UTF-8 character at the end is held back too. `finish()` releases what is still held
when the request ends without a stop string.

`released_tokens` counts the leading tokens whose text has been shown in full (after a stop:
every token up to the one that completed it), so per-token data (logprobs) can go out with the
text it belongs to, streamed or not.
"""

from __future__ import annotations

from typing import Protocol


class Decoder(Protocol):
    def decode(self, ids: list[int] | tuple[int, ...]) -> str: ...


class TextStream:
    def __init__(self, codec: Decoder, stops: tuple[str, ...] = ()) -> None:
        bad = [s for s in stops if not isinstance(s, str) or not s]
        if bad:
            raise ValueError(f"stop strings must be non-empty strings, got {bad!r}")
        self.codec, self.stops = codec, stops
        self.ids: list[int] = []
        self.text = ""  # the decoded text of `ids` (up to its last complete character)
        self.shown_chars = 0  # characters of `text` released to the client
        self.stopped = False
        self.stop_tokens = -1  # tokens up to the one that completed a stop string (-1: none)
        self._token_end_chars: list[int] = []  # per token: len(text) once its text is complete (-1 before)
        self._longest_hold = max((len(s) for s in stops), default=1) - 1

    def add(self, ids: tuple[int, ...] | list[int]) -> str:
        """The newly visible text after these tokens ("" once stopped)."""
        if self.stopped:
            return ""
        self.ids.extend(ids)
        self._token_end_chars.extend([-1] * len(ids))
        text = self.codec.decode(self.ids)
        if text.endswith("\ufffd"):  # an incomplete UTF-8 sequence: wait for the next token
            return ""
        self.text = text
        self._token_end_chars = [len(text) if e < 0 else e for e in self._token_end_chars]
        cut = self._stop_start()
        if cut >= 0:
            self.stopped, self.stop_tokens = True, len(self.ids)
            return self._release(cut)
        return self._release(len(text) - self._held_chars())

    def finish(self) -> str:
        """The text still held back, at the end of a request that did not stop on a string."""
        if self.stopped:
            return ""
        self.text = self.codec.decode(self.ids)
        self._token_end_chars = [len(self.text)] * len(self._token_end_chars)
        return self._release(len(self.text))

    @property
    def released_tokens(self) -> int:
        if self.stopped:
            return self.stop_tokens
        count = 0
        for end in self._token_end_chars:
            if end < 0 or end > self.shown_chars:
                break
            count += 1
        return count

    def _release(self, upto: int) -> str:
        if upto <= self.shown_chars:
            return ""
        delta, self.shown_chars = self.text[self.shown_chars:upto], upto
        return delta

    def _stop_start(self) -> int:
        """Where the earliest stop string starts in the unshown text, or -1."""
        found = [i for i in (self.text.find(s, self.shown_chars) for s in self.stops) if i >= 0]
        return min(found) if found else -1

    def _held_chars(self) -> int:
        """The length of the longest unshown end of the text that begins some stop string."""
        limit = min(self._longest_hold, len(self.text) - self.shown_chars)
        for size in range(limit, 0, -1):
            tail = self.text[-size:]
            if any(s.startswith(tail) for s in self.stops):
                return size
        return 0
