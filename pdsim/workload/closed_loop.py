"""Closed-loop load: C clients, each sending its next request when its previous one ends.

This is how public GPU serving results are taken (sglang / vLLM `bench_serving
--max-concurrency`, NVIDIA AIPerf `--concurrency`): requests go out in the workload's order, the
first C at once at t=0 (or spread over `client_ramp_s`), then one each time a request ends (finished, failed or rejected), after
the client's think time. A workload's arrival times are ignored; its order and lengths are kept.
pdsim's simulator and `pdreal replay --concurrency` both run the loop this module describes and
cut the same steady-state window from the trace (`steady_window`).

The steady-state window (docs/CLOSED_LOOP.md):
- warm-up: the first `warmup_requests` requests sent (default C: the burst sent at t=0) are not
  counted; the window opens when request number W (0-based, in send order) is sent;
- drain: the window closes at the first moment a client ends a request and has nothing left to
  send (the workload or `duration_s` is exhausted): from then on fewer than C requests are in
  flight. With n requests sent that is the (n - C + 1)-th smallest `finish_s + think`;
- a request counts when it was sent inside the window (at or after the opening, before the
  close), whenever it ends: chosen by send time, not by end time, so long requests are not
  under-counted near the close (counting only requests that ended inside the window keeps the
  short ones sent late and drops the long ones, which biases latencies low: 10% on a 200-request
  RAG run). Latency statistics are over the counted requests, throughputs over the completions
  inside the window divided by its length; Little's law then holds:
  throughput = C / (mean latency + think time). A window that counts fewer than C requests (not
  one request per client) is no steady state: the run reports every request and says so.

With `warmup_barrier` the loop runs AIPerf's two phases instead (its warm-up docs: profiling
waits for every warm-up response): the clients send the first W requests, then wait until all W
have ended; the profiling phase then starts with every client at once (or along the ramp) and
sends the rest. The window is that whole phase, as AIPerf averages it: every request after the
first W counts, from the phase's first send to its last end, its synchronised first wave and its
drain included.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdsim.config import ScenarioConfig
from pdsim.workload.errors import WorkloadError


@dataclass(frozen=True)
class ClosedLoop:
    """The closed loop a scenario asks for (concurrency >= 1)."""

    concurrency: int
    think_s: float = 0.0
    duration_s: float = 0.0  # 0 = no time limit: every request of the workload is sent
    warmup_requests: int = 0
    ramp_s: float = 0.0  # client i sends its first request at i * ramp_s / concurrency (0: all at t=0)
    barrier: bool = False  # AIPerf's phases: profiling starts when every warm-up request has ended

    def at_barrier(self, sent: int) -> bool:
        """Whether `sent` requests sent means the warm-up phase is all out: the clients then wait
        until every warm-up request has ended (`barrier`), and the profiling phase starts."""
        return self.barrier and 0 < self.warmup_requests == sent

    def window(self, arrival_s: np.ndarray, finish_s: np.ndarray) -> SteadyWindow:
        """The window this loop's statistics are taken over, from a trace's send and end times."""
        return steady_window(arrival_s, finish_s, self.concurrency, self.warmup_requests, self.think_s, self.barrier)

    def may_send(self, send_s: float, sent: int, total: int) -> bool:
        """Whether a request may still be sent at `send_s` with `sent` of `total` already out."""
        return sent < total and (self.duration_s <= 0 or send_s < self.duration_s)

    def first_send_s(self, client: int) -> float:
        """When client `client` (0-based) sends its first request: a ramp of `ramp_s` spreads
        the first wave evenly (AIPerf's --concurrency-ramp-duration), else all at t=0."""
        return client * self.ramp_s / self.concurrency


def closed_loop_of(cfg: ScenarioConfig) -> ClosedLoop | None:
    """The scenario's closed loop (None: open loop), its fields checked with one-line errors."""
    where = f"scenario {cfg.name}"
    if cfg.concurrency < 0:
        raise WorkloadError(where, "concurrency", f"must be >= 0, got {cfg.concurrency}")
    if cfg.concurrency == 0:
        return None
    for name in ("client_think_s", "duration_s", "client_ramp_s"):
        value = getattr(cfg, name)
        if not value >= 0:
            raise WorkloadError(where, name, f"must be >= 0, got {value}")
    if cfg.warmup_requests < -1:
        raise WorkloadError(where, "warmup_requests", f"must be >= 0 (or -1 = concurrency), got {cfg.warmup_requests}")
    warmup = cfg.concurrency if cfg.warmup_requests == -1 else cfg.warmup_requests
    return ClosedLoop(cfg.concurrency, cfg.client_think_s, cfg.duration_s, warmup, cfg.client_ramp_s,
                      bool(cfg.warmup_barrier))


@dataclass(frozen=True)
class SteadyWindow:
    """Which rows of a closed-loop trace count (`counted`) and the window [start_s, end_s]."""

    counted: np.ndarray  # bool per row
    start_s: float
    end_s: float

    @property
    def length_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def reached(self) -> bool:
        """Whether the run reached a steady state at all (some request counted)."""
        return bool(self.counted.any()) and self.length_s > 0


def steady_window(
    arrival_s: np.ndarray, finish_s: np.ndarray, concurrency: int, warmup_requests: int, think_s: float = 0.0,
    barrier: bool = False,
) -> SteadyWindow:
    """The steady-state window of a closed-loop trace (rows in any order; module docstring);
    with `barrier`, the whole profiling phase after the first `warmup_requests`.

    `arrival_s` is when each request was sent, `finish_s` when it ended (every request of a
    complete trace ends: finished, failed or rejected)."""
    arrival = np.asarray(arrival_s, dtype=float)
    finish = np.asarray(finish_s, dtype=float)
    n = arrival.size
    empty = SteadyWindow(np.zeros(n, dtype=bool), float("nan"), float("nan"))
    if n <= max(concurrency, warmup_requests) or concurrency < 1:
        return empty
    order = np.argsort(arrival, kind="stable")  # send order (ties keep row order: the ids')
    start_s = float(arrival[order[warmup_requests]])
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n)
    if barrier:
        return SteadyWindow(rank >= warmup_requests, start_s, float(np.max(finish + think_s)))
    ends = np.sort(finish + think_s)
    end_s = float(ends[n - concurrency])
    counted = (rank >= warmup_requests) & (arrival < end_s)
    if not end_s > start_s or counted.sum() < concurrency:  # (not one full round of the clients)
        return empty
    return SteadyWindow(counted, start_s, end_s)
