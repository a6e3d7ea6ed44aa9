"""The simulated clock, read the cheap way.

simpy's `Environment.now` is a Python property: read from compiled code it runs an interpreted
frame, ~870 instructions, and the simulator reads it ~50 times per request. `now_s` reads the
attribute behind it (simpy 4.1's `_now`, as `span.rearm` uses its Process internals; pyproject
pins simpy) in ~260. Compiled, the value is always a float (simpy starts its clock at the int 0,
which the compiled return converts); the pure-Python sources return it as simpy holds it.
"""

from __future__ import annotations

import simpy


def now_s(env: simpy.Environment) -> float:
    """env.now (a float once compiled)."""
    return env._now
