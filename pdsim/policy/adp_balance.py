"""TensorRT-LLM's attention-DP balance: new prompts wait until every DP rank has one.

Under attention DP a TensorRT-LLM engine (`enable_attention_dp`) hands each new request to one
rank: among the ranks holding fewer requests than the even share, the one with the fewest
(`assign_dp_rank`; TensorRT-LLM breaks ties by the rank's tokens, this model by the lowest rank).
With `attention_dp_config.enable_balance` every iteration then decides, for all ranks at once,
whether the prompts scheduled on them run (`adp_gate`; TensorRT-LLM's PyExecutor
`_balance_adp_requests`, release 1.2):

- every rank has a prompt and a free slot (its running requests below its max_batch_size): the
  prompts run; when every rank also decodes, they first wait `batching_wait_iters` iterations;
- else they are held, and a counter of such iterations grows by one (whether or not any prompt
  waits); when it reaches `timeout_iters`, or when some rank has nothing to decode, the counter
  starts again at 0 and whatever prompts there are run.

So under a trickle of arrivals a prompt waits for the counter's next turn: up to `timeout_iters`
decode iterations (InferenceX's DeepSeek scripts: 60; TensorRT-LLM's default: 50). The counters are
the executor's (`AdpCounters`, returned with each plan). No simpy, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final, Protocol

from pdsim.policy.record import Record


class AdpCounters(Record):
    """The balance's two counters: held iterations (`waiting_iters`, the timeout's) and the
    iterations all ranks' prompts waited to batch (`batching_iters`)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("waiting_iters", "batching_iters")

    def __init__(self, waiting_iters: int = 0, batching_iters: int = 0) -> None:
        self.waiting_iters: Final = waiting_iters
        self.batching_iters: Final = batching_iters

    def after_idle(self, iterations: int, timeout_iters: int, every_rank_decodes: bool) -> AdpCounters:
        """The counters after `iterations` more iterations in which no rank had a prompt (a
        decode-only span): the timeout's counter turns over every `timeout_iters`, and stays at 0
        while some rank has nothing to decode."""
        if not every_rank_decodes:
            return AdpCounters(0, self.batching_iters)
        return AdpCounters((self.waiting_iters + iterations) % timeout_iters, self.batching_iters)


ADP_START: Final = AdpCounters()


class DpRanks(Protocol):
    """What the balance reads of an executor's attention-DP ranks."""

    def waiting_per_rank(self) -> Sequence[int]:
        """Prompts waiting (or part-prefilled) on each rank."""

    def running_per_rank(self) -> Sequence[int]:
        """Running (decoding) requests on each rank."""


def assign_dp_rank(active_per_rank: Sequence[int]) -> int:
    """The rank a new request goes to: the one holding the fewest requests (lowest on ties)."""
    if not active_per_rank:
        raise ValueError("adp: no DP ranks to assign a request to")
    return min(range(len(active_per_rank)), key=lambda r: (active_per_rank[r], r))


def adp_gate(dp_ranks: int, prompt_ranks: int, decode_ranks: int, slots_free: bool, counters: AdpCounters,
             timeout_iters: int, batching_wait_iters: int) -> tuple[bool, AdpCounters]:
    """(whether this iteration holds its prompts back, the counters after it) for `dp_ranks`
    ranks of which `prompt_ranks` have a prompt to schedule and `decode_ranks` a running request;
    `slots_free`: every rank's running requests are below its max_batch_size."""
    every_rank_decodes = decode_ranks >= dp_ranks
    if slots_free and prompt_ranks >= dp_ranks:
        if every_rank_decodes and counters.batching_iters < batching_wait_iters:
            return True, AdpCounters(0, counters.batching_iters + 1)
        return False, AdpCounters(0, 0)
    waiting = counters.waiting_iters + 1
    if waiting >= timeout_iters or not every_rank_decodes:
        return False, AdpCounters(0, counters.batching_iters)
    return True, AdpCounters(waiting, counters.batching_iters)
