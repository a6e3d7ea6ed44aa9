"""KVPoll: the per-request KV-transfer state machine shared by pdsim, pdreal and the trace.

    Bootstrapping -> WaitingForInput -> Transferring -> Success;  any non-terminal -> Failed

Values only grow, except Failed (=0, so a TP all-reduce MIN over ranks' polls lets Failed
win); Success and Failed are terminal and sticky.
"""

from __future__ import annotations

from enum import IntEnum


class KVPoll(IntEnum):
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


TERMINAL = (KVPoll.Failed, KVPoll.Success)


class KVPollError(RuntimeError):
    """An illegal KVPoll transition."""


def advance_poll(current: KVPoll, new: KVPoll, request_id: int) -> KVPoll:
    """The state after moving `current` to `new`: monotone, terminal states sticky.

    Failing an already-terminal transfer keeps its state (a late failure report after Success
    is ignored); any other illegal move raises KVPollError naming the request.
    """
    if current in TERMINAL:
        if new == KVPoll.Failed or new == current:
            return current
        raise KVPollError(f"request {request_id}: KVPoll {current.name} is terminal, cannot go to {new.name}")
    if new == KVPoll.Failed or new >= current:
        return new
    raise KVPollError(f"request {request_id}: KVPoll cannot go back from {current.name} to {new.name}")


def all_reduce_min(polls: list[KVPoll]) -> KVPoll:
    """The state TP ranks agree on: the minimum (Failed wins, then the slowest rank)."""
    if not polls:
        raise ValueError("all_reduce_min needs at least one poll")
    return min(polls)
