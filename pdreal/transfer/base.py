"""The KV-transfer contract (SGLang-shaped): KVPoll, KVManager, KVSender, KVReceiver.

Lifecycle of one request, identified on both sides by its `bootstrap_room`:

    prefill (KVSender)                         decode (KVReceiver)
    Bootstrapping  -- decode's transfer info --  Bootstrapping -> WaitingForInput (peer resolved)
    WaitingForInput  <-------------------------  init(dst pages) -> Transferring
    send(chunk pages) ... send(last, aux) -> Transferring
    Success (KV written, status sent)  ------->  Success (aux: first token, timings)

Polls are non-blocking: the data moves on background threads. States are monotone and
terminal states (Success, Failed) are sticky; any state may go to Failed (timeout, dead peer,
transfer error, abort). Every path ends in a terminal state, after which the owner frees the
request's pages and calls `close()`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pdsim.policy.kvpoll import KVPoll, poll_transition


class KVTransferError(RuntimeError):
    """A transfer ended in Failed; the message names the room and the reason."""


class PollState:
    """A thread-safe monotone KVPoll value with a failure reason, moved by pdsim.policy.kvpoll's one
    transition rule. Transfer threads race (a late Transferring after Success), so an illegal
    move is ignored here instead of raising as in the single-threaded simulator. `on_change` is
    called (on the moving thread, outside the lock) after every change: the scheduler's wake-up,
    so it blocks instead of polling while KV is in flight."""

    def __init__(self, start: KVPoll = KVPoll.Bootstrapping, on_change: Callable[[], None] | None = None) -> None:
        self._state = start
        self._lock = threading.Lock()
        self._on_change = on_change
        self.reason = ""

    def get(self) -> KVPoll:
        return self._state

    def advance(self, to: KVPoll) -> bool:
        """Move forward to `to`; False (ignored) unless the state changed."""
        if to == KVPoll.Failed:
            raise ValueError("use fail(reason) to fail a transfer")
        return self._move(to, "")

    def fail(self, reason: str) -> bool:
        """Mark Failed unless terminal already; the first reason wins."""
        return self._move(KVPoll.Failed, reason)

    def _move(self, to: KVPoll, reason: str) -> bool:
        with self._lock:
            state, legal = poll_transition(self._state, to)
            if not legal or state == self._state:
                return False
            self._state = state
            if state == KVPoll.Failed:
                self.reason = reason
        if self._on_change is not None:
            self._on_change()
        return True


@dataclass(frozen=True, slots=True)
class TransferAux:
    """Metadata sent with the last chunk (the seeds' MetadataBuffers): first token, timings."""

    bootstrap_room: int
    first_token_id: int
    cached_tokens: int = 0
    transfer_start_s: float = float("nan")
    transfer_end_s: float = float("nan")
    transfer_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TransferAux:
        return cls(**data)


class KVSender(ABC):
    """Prefill side of one request's transfer."""

    room: int

    @abstractmethod
    def poll(self) -> KVPoll:
        """Non-blocking state (also applies the bootstrap timeout)."""

    @abstractmethod
    def send(self, pages: list[int], aux: TransferAux | None = None) -> None:
        """Queue one chunk's source pages; `aux` marks the last chunk (non-last: full pages only)."""

    @abstractmethod
    def abort(self, reason: str) -> None:
        """Fail the transfer from this side."""

    @property
    @abstractmethod
    def failure_reason(self) -> str: ...

    def failure_exception(self) -> None:
        raise KVTransferError(f"room {self.room}: {self.failure_reason}")

    @abstractmethod
    def close(self) -> None:
        """Forget the room (after a terminal state); the manager keeps no trace of it."""


class KVReceiver(ABC):
    """Decode side of one request's transfer."""

    room: int

    @abstractmethod
    def poll(self) -> KVPoll:
        """Non-blocking state (also applies the transfer timeout)."""

    @abstractmethod
    def init(self, pages: list[int]) -> None:
        """Tell the prefill side where to write: the pre-allocated destination pages."""

    @abstractmethod
    def aux(self) -> TransferAux | None:
        """The aux metadata once Success (None for the fake backend)."""

    @abstractmethod
    def abort(self, reason: str) -> None: ...

    @property
    @abstractmethod
    def failure_reason(self) -> str: ...

    def failure_exception(self) -> None:
        raise KVTransferError(f"room {self.room}: {self.failure_reason}")

    @abstractmethod
    def close(self) -> None: ...


class KVManager(ABC):
    """One per instance: owns the registered pool, the background threads and the rooms."""

    backend: str = "base"

    @property
    @abstractmethod
    def bootstrap_addr(self) -> str:
        """Address a decode-side manager passes to `create_receiver` to reach this prefill side."""

    @abstractmethod
    def create_sender(self, room: int) -> KVSender: ...

    @abstractmethod
    def create_receiver(self, bootstrap_addr: str, room: int) -> KVReceiver: ...

    @abstractmethod
    def fail_peer(self, peer: str, reason: str) -> int:
        """Fail every live room exchanged with `peer` (heartbeat loss); returns how many."""

    @abstractmethod
    def num_rooms(self) -> int:
        """Rooms not yet closed (for leak checks)."""

    @abstractmethod
    def close(self) -> None:
        """Stop background threads and release registered memory."""
