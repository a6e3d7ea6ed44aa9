"""The KV manager of a tensor-parallel instance: one PagedKVManager per rank, one KVManager to
the engine.

Every TP rank runs its own manager over its own pool (its KV heads), as SGLang's ranks each run a
KVManager: the engine, in rank 0's process, calls `TPKVManager`, which applies each call to rank
0's manager and mirrors it to the other ranks over a `RankChannel` (they apply it to theirs with
`RankRooms`). Polls are reduced as the seeds' `poll_and_all_reduce` does: one MIN all-reduce over
every open room's state on every rank (KVPoll.Failed is 0, so one failed rank fails the room on
all), at most once per room per round: the first poll of a room in a round reads the round's
result, a second poll of the same room starts a new round (so a step that polls each queue once
costs one all-reduce, whatever the number of requests). The instance's bootstrap address lists
the ranks' addresses in rank order (common.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import torch

from pdreal.transfer.base import (
    KVManager,
    KVPoll,
    KVReceiver,
    KVSender,
    KVTransferError,
    TransferAux,
)
from pdreal.transfer.common import PagedKVManager
from pdsim.policy.kvpoll import TERMINAL


class RankChannel(Protocol):
    """Rank 0's link to the other ranks of its TP group (pdreal/engine/tp_runner.py)."""

    def post(self, command: tuple[Any, ...]) -> None:
        """Send `command` to every other rank (they run it in order, no reply)."""

    def call(self, command: tuple[Any, ...]) -> list[Any]:
        """Send `command` to every other rank and return their replies, in rank order."""

    def all_reduce_min(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise MIN over the ranks (rank 0's part of the collective)."""

    def set_wake(self, wake: Callable[[], None] | None) -> None:
        """Call `wake` whenever another rank's room changes state."""


class RankRooms:
    """One rank's senders and receivers by room, over its own manager: the calls every rank
    applies in the same order (`apply`), and its local poll of a list of rooms."""

    def __init__(self, manager: PagedKVManager) -> None:
        self.manager = manager
        self.senders: dict[int, KVSender] = {}
        self.receivers: dict[int, KVReceiver] = {}

    def end(self, room: int) -> KVSender | KVReceiver:
        end = self.senders.get(room) or self.receivers.get(room)
        if end is None:
            raise KVTransferError(f"room {room}: no sender or receiver on TP rank {self.manager.config.tp_rank}")
        return end

    def open_rooms(self) -> list[int]:
        return [*self.senders, *self.receivers]

    def apply(self, method: str, args: tuple[Any, ...]) -> Any:
        if method == "create_sender":
            self.senders[args[0]] = self.manager.create_sender(args[0])
        elif method == "create_receiver":
            self.receivers[args[1]] = self.manager.create_receiver(args[0], args[1])
        elif method in ("send", "init"):
            end = self.end(args[0])
            if end.poll() != KVPoll.Failed:  # failed on this rank: the next reduced poll says so
                getattr(end, method)(*args[1:])
        elif method == "abort":
            self.end(args[0]).abort(args[1])
        elif method == "close":
            ends: tuple[KVSender | KVReceiver | None, ...] = (self.senders.pop(args[0], None),
                                                               self.receivers.pop(args[0], None))
            for closing in ends:
                if closing is not None:
                    closing.close()
        elif method == "fail_peer":
            return self.manager.fail_peer(*args)
        else:
            raise ValueError(f"TP KV call {method!r} unknown")
        return None

    def polls(self, rooms: list[int]) -> list[int]:
        """This rank's state of each room (Failed for a room it does not know)."""
        return [int(self.end(room).poll()) if room in self.senders or room in self.receivers else 0
                for room in rooms]

    def reason(self, room: int) -> str:
        end = self.senders.get(room) or self.receivers.get(room)
        return end.failure_reason if end is not None else ""


class TPKVManager(KVManager):
    """Rank 0's manager plus the mirror of every call to the other ranks; polls all-reduced MIN."""

    def __init__(self, local: PagedKVManager, channel: RankChannel, rank_addrs: list[str]) -> None:
        self.local, self.channel, self.rank_addrs = local, channel, list(rank_addrs)
        self.rooms = RankRooms(local)
        self.backend = local.backend
        self._reduced: dict[int, KVPoll] = {}
        self._served: set[int] = set()
        self.rounds = 0  # poll all-reduces so far

    @property
    def wakeup(self) -> Callable[[], None] | None:
        return self.local.wakeup

    @wakeup.setter
    def wakeup(self, wake: Callable[[], None] | None) -> None:
        self.local.wakeup = wake
        self.channel.set_wake(wake)

    @property
    def bootstrap_addr(self) -> str:
        return ",".join(self.rank_addrs)

    def mirror(self, method: str, *args: Any) -> Any:
        self.channel.post(("kv", method, args))
        return self.rooms.apply(method, args)

    def create_sender(self, room: int) -> KVSender:
        self.mirror("create_sender", room)
        return _TPEnd(self, room)

    def create_receiver(self, bootstrap_addr: str, room: int) -> KVReceiver:
        self.mirror("create_receiver", bootstrap_addr, room)
        return _TPEnd(self, room)

    def poll(self, room: int) -> KVPoll:
        cached = self._reduced.get(room)
        if cached is not None and (cached in TERMINAL or room not in self._served):
            self._served.add(room)
            return cached
        rooms = self.rooms.open_rooms()
        self.channel.post(("kv_poll", rooms))
        local = torch.tensor(self.rooms.polls(rooms), dtype=torch.uint8)
        reduced = self.channel.all_reduce_min(local).tolist()
        self._reduced = {r: KVPoll(v) for r, v in zip(rooms, reduced, strict=True)}
        self._served = {room}
        self.rounds += 1
        return self._reduced[room]

    def failure_reason(self, room: int) -> str:
        reason = self.rooms.reason(room)
        if reason or self._reduced.get(room) != KVPoll.Failed:
            return reason
        others = [r for r in self.channel.call(("kv_reason", room)) if r]
        return others[0] if others else "failed on another tensor-parallel rank"

    def forget(self, room: int) -> None:
        self.mirror("close", room)
        self._reduced.pop(room, None)
        self._served.discard(room)

    def fail_peer(self, peer: str, reason: str) -> int:
        return int(self.mirror("fail_peer", peer, reason))

    def num_rooms(self) -> int:
        return self.local.num_rooms()

    def close(self) -> None:
        self.channel.post(("kv_close",))
        self.local.close()


class _TPEnd(KVSender, KVReceiver):
    """A room's sender or receiver on a TP instance (the engine uses each as one or the other)."""

    def __init__(self, manager: TPKVManager, room: int) -> None:
        self.manager, self.room = manager, room

    def poll(self) -> KVPoll:
        return self.manager.poll(self.room)

    def send(self, pages: list[int], aux: TransferAux | None = None) -> None:
        self.manager.mirror("send", self.room, list(pages), aux)

    def init(self, pages: list[int]) -> None:
        self.manager.mirror("init", self.room, list(pages))

    def aux(self) -> TransferAux | None:
        """Rank 0's aux; its bytes x TP size are the instance's (every rank receives as many)."""
        end = self.manager.rooms.receivers.get(self.room)
        aux = end.aux() if end is not None else None
        tp_size = self.manager.local.config.tp_size
        return None if aux is None else replace(aux, transfer_bytes=aux.transfer_bytes * tp_size)

    def abort(self, reason: str) -> None:
        self.manager.mirror("abort", self.room, reason)

    @property
    def failure_reason(self) -> str:
        return self.manager.failure_reason(self.room)

    def close(self) -> None:
        self.manager.forget(self.room)
