"""KVPoll: the per-request KV-transfer state machine shared by pdsim, pdreal and the trace.

    Bootstrapping -> WaitingForInput -> Transferring -> Success;  any non-terminal -> Failed

Values only grow, except Failed (=0, so a TP all-reduce MIN over ranks' polls lets Failed
win); Success and Failed are terminal and sticky.
"""

from __future__ import annotations

from enum import IntEnum

from mypy_extensions import mypyc_attr


class KVPoll(IntEnum):
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


TERMINAL = (KVPoll.Failed, KVPoll.Success)


@mypyc_attr(native_class=False)  # (compiled: an exception class stays a Python class)
class KVPollError(RuntimeError):
    """An illegal KVPoll transition."""


def poll_transition(current: KVPoll, new: KVPoll) -> tuple[KVPoll, bool]:
    """The one transition rule: (the state after moving `current` to `new`, whether the move is
    legal). Legal: forward moves, staying put, Failed from a non-terminal state, and failing a
    terminal state (a late failure report after Success: kept as it was). Illegal moves
    (backwards, or leaving a terminal state) leave the state unchanged."""
    if current in TERMINAL:
        return current, new == KVPoll.Failed or new == current
    if new == KVPoll.Failed or new >= current:
        return new, True
    return current, False


def advance_poll(current: KVPoll, new: KVPoll, request_id: int) -> KVPoll:
    """`poll_transition` for a single-threaded owner (pdsim): an illegal move is a bug and
    raises KVPollError naming the request."""
    state, legal = poll_transition(current, new)
    if legal:
        return state
    if current in TERMINAL:
        raise KVPollError(f"request {request_id}: KVPoll {current.name} is terminal, cannot go to {new.name}")
    raise KVPollError(f"request {request_id}: KVPoll cannot go back from {current.name} to {new.name}")


def all_reduce_min(polls: list[KVPoll]) -> KVPoll:
    """The state TP ranks agree on: the minimum (Failed wins, then the slowest rank)."""
    if not polls:
        raise ValueError("all_reduce_min needs at least one poll")
    return min(polls)
