"""simpy timeouts made without the interpreter.

`env.timeout(delay)` runs two interpreted frames (simpy's `Timeout.__init__` and
`Environment.schedule`) reached through `type.__call__`: about 4,400 instructions, the single
most frequent thing the simulator asks of simpy (~12 per Mooncake request). `timeout` below sets
the same attributes and pushes the same `(time, priority, event id, event)` entry onto the same
queue, compiled. It uses simpy 4.1's internals (`_queue`, `_eid`, `_now` and the event's
fields), as `span.rearm` does; tests/sim/test_timeouts.py holds it to `env.timeout` entry for
entry, and pyproject.toml pins simpy.
"""

from __future__ import annotations

from heapq import heappush
from typing import Final

import simpy
from simpy.events import NORMAL, Timeout

_NORMAL: Final = NORMAL


def timeout(env: simpy.Environment, delay_s: float) -> Timeout:
    """What `env.timeout(delay_s)` returns and schedules."""
    if delay_s < 0:
        raise ValueError(f"Negative delay {delay_s}")
    event = Timeout.__new__(Timeout)
    event.env = env
    event.callbacks = []
    event._value = None
    event._delay = delay_s
    event._ok = True
    heappush(env._queue, (env._now + delay_s, _NORMAL, next(env._eid), event))
    return event
