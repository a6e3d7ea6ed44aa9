"""When a scheduler takes in newly arrived requests: SGLang's `--scheduler-recv-interval`.

SGLang's scheduler loop reads new requests from its tokenizer at the top of an iteration, but with
`--scheduler-recv-interval N` > 1 only when a weighted counter reaches N (its
`SchedulerRecvSkipper`): every decode-only forward adds 1, a forward with prefill work adds 1000
(so the next iteration receives), and a loop that ran no forward receives at once (an idle loop
spins in microseconds). A request that arrives during a run of decodes therefore waits until the
N-th decode step since the last receive: N / 2 steps on average. N = 1 (the default) receives
every iteration, as every other engine does.

An executor keeps the counter (`recv_counter`, starting full: the first loop receives) and the
arrivals it has not taken in yet (its inbox); at the top of each iteration it asks
`receive_point` (whether to take them in, and the counter from then on), and after each forward
it adds `recv_weight`. No simpy, no clock, no I/O.
"""

from __future__ import annotations

from typing import Final

DECODE_WEIGHT: Final = 1  # a decode-only forward
PREFILL_WEIGHT: Final = 1000  # a forward with prefill (extend or mixed) work


def receive_point(recv_interval_steps: int, counter: int, idle: bool) -> tuple[bool, int]:
    """(whether this iteration takes in the arrivals, the counter from then on): it receives
    always with interval 1 or after a loop that ran no forward (`idle`), else once the counter
    has reached the interval; a receive starts the counter again at 0."""
    if recv_interval_steps <= 1 or idle or counter >= recv_interval_steps:
        return True, 0
    return False, counter


def recv_weight(prefill: bool) -> int:
    """What one forward adds to the counter (a span of decodes: `counter_after_decodes`)."""
    return PREFILL_WEIGHT if prefill else DECODE_WEIGHT


def counter_after_decodes(recv_interval_steps: int, counter: int, iterations: int) -> int:
    """The counter after `iterations` more decode-only forwards, each preceded by an iteration
    top that receives (and restarts the counter) once it has reached the interval: what a run
    of decodes with nothing arriving does to it (pdsim's decode spans)."""
    n = recv_interval_steps
    if n <= 1 or iterations <= 0:
        return counter + iterations * DECODE_WEIGHT
    start = counter if counter < n else 0
    total = start + iterations
    return total if total <= n else (total - 1) % n + 1
