"""Replay of a workload against a pdreal router, recording pdsim's trace schema.

Open loop: every request is sent at its (sped-up) arrival time whether or not earlier ones have
finished. Closed loop (`ReplayOptions.loop`, pdsim.workload.closed_loop, the very loop pdsim
simulates): C clients send the requests in the workload's order, the first C at once, then one
whenever a client's request ends (after its think time), until the workload or the loop's
duration runs out. Each request is `input_tokens` token ids (prefix blocks sharing a hash id get
identical tokens, the rest come from the request's own seeded stream), asking for
`output_tokens` greedy tokens with EOS ignored, streamed to `POST /generate` (default) or
`POST /v1/completions` (`ReplayOptions.endpoint`; pdreal.replay_send says what each records).

Timestamps (all seconds since the replay started, on the client's monotonic clock):
- client-side: arrival_s (request sent), first_token_s / last_token_s / token_times_s (tokens
  received), finish_s (response complete);
- server-side (generate only: the OpenAI stream carries no trace row): route_s and every queue
  time, from the router's trace row, moved from the router's clock to the client's (exactly
  when both share a boot clock, else by the offset measured with /health round trips).

Every planned request ends in exactly one row: HTTP 400 and 429 answers are 'rejected', errors
and requests still running when the replay is stopped are 'failed' with the reason.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import numpy as np

from pdreal.replay_send import ENDPOINTS, SENDERS, SendResult
from pdreal.serving.timebase import ClockSync, clock_id, now_s
from pdsim.rng import stream
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED
from pdsim.workload import Request, Workload
from pdsim.workload.closed_loop import ClosedLoop


@dataclass(frozen=True)
class ReplayOptions:
    speedup: float = 1.0  # divide arrival times by this
    max_requests: int = 0  # 0 = all
    max_duration_s: float = 0.0  # send only requests arriving before this (replay time); 0 = all
    drain_timeout_s: float = 300.0  # after the last send, wait this long for the rest
    max_input_tokens: int = 0  # clip prompt lengths (0 = no clip)
    max_output_tokens: int = 0  # clip output lengths (0 = no clip)
    seed: int = 0
    request_timeout_s: float = 600.0
    loop: ClosedLoop | None = None  # closed loop (send times then come from it); None = open loop
    endpoint: str = "generate"  # generate | completions (pdreal.replay_send)

    def __post_init__(self) -> None:
        if self.speedup <= 0:
            raise ValueError(f"speedup must be > 0, got {self.speedup}")
        for name in ("max_requests", "max_input_tokens", "max_output_tokens"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.endpoint not in ENDPOINTS:
            raise ValueError(f"endpoint must be one of {ENDPOINTS}, got {self.endpoint!r}")


@dataclass(frozen=True)
class PlannedRequest:
    request_id: int
    send_s: float  # replay time at which it is sent
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = 512
    session_id: int = -1


def plan_requests(workload: Workload, options: ReplayOptions) -> list[PlannedRequest]:
    """The workload's requests after the count/time bounds, speed-up and length clips."""
    planned: list[PlannedRequest] = []
    start = float(workload.arrival_s[0]) if len(workload) else 0.0
    for req in workload:
        send_s = (req.arrival_s - start) / options.speedup
        if options.max_requests and len(planned) >= options.max_requests:
            break
        if options.max_duration_s and send_s >= options.max_duration_s and options.loop is None:
            break  # (a closed loop's duration bounds its own sends)
        planned.append(_clip(req, send_s, options))
    return planned


def _clip(req: Request, send_s: float, options: ReplayOptions) -> PlannedRequest:
    inputs = min(req.input_tokens, options.max_input_tokens) if options.max_input_tokens else req.input_tokens
    outputs = min(req.output_tokens, options.max_output_tokens) if options.max_output_tokens else req.output_tokens
    return PlannedRequest(req.request_id, send_s, max(1, inputs), max(1, outputs), req.hash_ids,
                          req.block_tokens, req.session_id)


def prompt_ids(req: PlannedRequest, vocab_size: int, seed: int) -> list[int]:
    """Deterministic token ids: one block of tokens per prefix hash id, then per-request tokens."""
    low = min(256, vocab_size // 4)
    ids: list[int] = []
    for h in req.hash_ids:
        if len(ids) >= req.input_tokens:
            break
        block = stream(seed, f"replay.block.{h}").integers(low, vocab_size, size=req.block_tokens)
        ids.extend(block.tolist())
    rest = req.input_tokens - len(ids)
    if rest > 0:
        ids.extend(stream(seed, f"replay.request.{req.request_id}").integers(low, vocab_size, size=rest).tolist())
    return ids[:req.input_tokens]


async def measure_clock(session: aiohttp.ClientSession, url: str, samples: int = 5) -> ClockSync:
    sync = ClockSync(clock_id())
    for _ in range(samples):
        sent = now_s()
        async with session.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=10.0)) as resp:
            body = await resp.json()
        sync.add_sample(body["clock_id"], sent, body["now_s"], now_s())
    return sync


def _row(req: PlannedRequest, result: SendResult, start_s: float, sync: ClockSync) -> dict[str, Any]:
    row: dict[str, Any] = {}
    for key, value in (result.server_row or {}).items():
        if key.endswith("_s") and key != "token_times_s":
            row[key] = math.nan if value is None else sync.to_local(float(value)) - start_s
        elif key != "token_times_s":
            row[key] = value
    times = [t - start_s for t in result.token_times_s or []]
    finished = result.status == STATUS_FINISHED
    counted = len(times) if result.output_tokens is None else result.output_tokens
    row.update(request_id=req.request_id, session_id=req.session_id, input_tokens=req.input_tokens,
               output_tokens=counted if finished else req.output_tokens, status=result.status,
               failure_reason="" if finished else result.reason, arrival_s=result.sent_s - start_s,
               finish_s=result.finish_s - start_s, token_times_s=times,
               first_token_s=times[0] if times else math.nan, last_token_s=times[-1] if times else math.nan)
    row.setdefault("mode", "disaggregated")
    return row


async def replay(url: str, requests: list[PlannedRequest], vocab_size: int, options: ReplayOptions,
                 on_done: Callable[[str], None] | None = None,
                 on_sent: Callable[[], None] | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Send the requests (open loop: each at its time; closed loop: as clients free up); returns
    (trace rows, replay facts for the summary). Requests a closed loop never sent (its duration
    ran out) have no row. `on_sent()` is called as each request leaves, `on_done(status)` as each
    ends (progress)."""
    url = url.rstrip("/")
    prompts = [prompt_ids(r, vocab_size, options.seed) for r in requests]
    results = [SendResult() for _ in requests]
    sender = _Sender(url, options, on_done, on_sent)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        sync = await measure_clock(session, url)
        sender.start = now_s()
        send = sender.open_loop if options.loop is None else sender.closed_loop
        await send(session, list(zip(requests, prompts, results, strict=True)))
        _, pending = await asyncio.wait(sender.tasks, timeout=options.drain_timeout_s) if sender.tasks else ((), set())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        stopped_s = now_s() - sender.start
    for task, result in sender.tasks.items():
        if task in pending:
            result.status, result.reason = STATUS_FAILED, f"replay stopped at {stopped_s:.1f} s before it finished"
        elif not result.status:
            result.status, result.reason = STATUS_FAILED, "response ended without a final status"
    lags = sender.lags
    facts = {"url": url, "router_clock_offset_s": sync.offset_s, "same_clock": sync.same_clock,
             "send_lag_s_max": float(np.max(lags)) if lags else 0.0, "wall_s": stopped_s,
             "requests_unfinished_at_stop": len(pending), "sent": len(sender.tasks),
             "concurrency": options.loop.concurrency if options.loop is not None else 0, "endpoint": options.endpoint}
    sent = set(map(id, sender.tasks.values()))
    return [_row(r, res, sender.start, sync) for r, res in zip(requests, results, strict=True) if id(res) in sent], facts


_Item = tuple[PlannedRequest, list[int], SendResult]


class _Sender:
    """Sends requests as tasks (`tasks`: each task and the result it fills), open or closed loop."""

    def __init__(self, url: str, options: ReplayOptions, on_done: Callable[[str], None] | None,
                 on_sent: Callable[[], None] | None) -> None:
        self.url, self.options, self.on_done, self.on_sent = url, options, on_done, on_sent
        self.start = 0.0
        self.tasks: dict[asyncio.Task[None], SendResult] = {}
        self.lags: list[float] = []  # open loop: how late each request left

    def send(self, session: aiohttp.ClientSession, item: _Item) -> asyncio.Task[None]:
        req, ids, result = item
        send = SENDERS[self.options.endpoint]
        task = asyncio.create_task(send(session, self.url, req, ids, result, self.options.request_timeout_s))
        if self.on_sent is not None:
            self.on_sent()
        on_done = self.on_done
        if on_done is not None:
            task.add_done_callback(lambda _: on_done(result.status or STATUS_FAILED))
        self.tasks[task] = result
        return task

    async def open_loop(self, session: aiohttp.ClientSession, items: list[_Item]) -> None:
        for item in items:
            delay = self.start + item[0].send_s - now_s()
            if delay > 0:
                await asyncio.sleep(delay)
            self.lags.append(now_s() - self.start - item[0].send_s)
            self.send(session, item)

    async def closed_loop(self, session: aiohttp.ClientSession, items: list[_Item]) -> None:
        """C clients; each takes the next unsent request when its previous one has ended. With
        a warm-up barrier (AIPerf's phases) the clients send the warm-up requests, all of them
        end, then the profiling phase starts with every client at once (pdsim.workload.closed_loop)."""
        loop = self.options.loop
        assert loop is not None
        phases = [items]
        if loop.barrier and 0 < loop.warmup_requests < len(items):
            phases = [items[:loop.warmup_requests], items[loop.warmup_requests:]]
        sent = 0
        for phase in phases:
            sent = await self._clients(session, loop, phase, sent)

    async def _clients(self, session: aiohttp.ClientSession, loop: ClosedLoop, items: list[_Item], sent: int) -> int:
        """One phase of the closed loop, starting now: its clients send `items` (after `sent`
        earlier ones) until none may be sent; returns how many have been sent in all."""
        phase_start = now_s()
        queue = iter(items)
        total = sent + len(items)

        async def client(index: int) -> None:
            nonlocal sent
            delay_s = loop.first_send_s(index)  # a ramp spreads the first wave
            if delay_s > 0:
                await asyncio.sleep(phase_start + delay_s - now_s())
            while loop.may_send(now_s() - self.start, sent, total):
                sent += 1
                await asyncio.wait([self.send(session, next(queue))])
                if loop.think_s > 0:
                    await asyncio.sleep(loop.think_s)

        await asyncio.gather(*(client(i) for i in range(min(loop.concurrency, len(items)))))
        return sent
