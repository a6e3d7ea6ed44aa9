"""`fake` backend: no data moves and every transfer succeeds at once (warm-up, lifecycle tests).

The receiver's aux is None: a decode instance fed by it starts from token 0 over whatever its
pool holds, so its output is meaningless by design.
"""

from __future__ import annotations

from pdreal.transfer.base import KVManager, KVPoll, KVReceiver, KVSender, PollState, TransferAux


class FakeKVManager(KVManager):
    backend = "fake"

    def __init__(self) -> None:
        self._rooms: set[int] = set()

    @property
    def bootstrap_addr(self) -> str:
        return "fake"

    def create_sender(self, room: int) -> KVSender:
        self._rooms.add(room)
        return _FakeEnd(self, room)

    def create_receiver(self, bootstrap_addr: str, room: int) -> KVReceiver:
        self._rooms.add(room)
        return _FakeEnd(self, room)

    def fail_peer(self, peer: str, reason: str) -> int:
        return 0

    def num_rooms(self) -> int:
        return len(self._rooms)

    def close(self) -> None:
        self._rooms.clear()


class _FakeEnd(KVSender, KVReceiver):
    """Both ends at once: WaitingForInput at creation, Success on the last send or on init."""

    def __init__(self, manager: FakeKVManager, room: int) -> None:
        self.manager, self.room = manager, room
        self._state = PollState(KVPoll.WaitingForInput)

    def poll(self) -> KVPoll:
        return self._state.get()

    def send(self, pages: list[int], aux: TransferAux | None = None) -> None:
        self._state.advance(KVPoll.Transferring)
        if aux is not None:
            self._state.advance(KVPoll.Success)

    def init(self, pages: list[int]) -> None:
        self._state.advance(KVPoll.Success)

    def aux(self) -> TransferAux | None:
        return None

    def abort(self, reason: str) -> None:
        self._state.fail(reason)

    @property
    def failure_reason(self) -> str:
        return self._state.reason

    def close(self) -> None:
        self.manager._rooms.discard(self.room)
