"""The router core: admission and pair choice with pdsim.policy, dual dispatch, the trace row.

For each request (`Router.generate`): build the request's view and the instances' views, ask
`pdsim.policy.admit` (a rejection ends it with status 'rejected'), ask `pdsim.policy.route` for
a (prefill, decode) pair, draw a random 63-bit bootstrap_room from the router's seeded stream
(the same stream names as pdsim's router), and POST the request to both halves at once; the
decode copy carries the prefill's bootstrap host:port and the room. The decode half's tokens
are yielded as they arrive. If one half fails or is rejected while the other still runs, the
other is aborted; if the client goes away, both are. The final event carries one trace row on
the router's clock (both halves' times converted with each instance's clock offset).

Deadlines follow health: each half is read by a pump task; when the router marks an instance
unhealthy (Upstream.watchers) every unfinished half on it ends at once with a failed line naming
the instance and why, so a stalled or dead instance fails its requests within the health check's
delay, not at node.request_timeout_s. A request whose decode half finished is finished: its text
is complete, and a prefill half that has not reported (a long prefill forward on that instance)
only leaves its prefill times out of the row after PREFILL_ROW_GRACE_S.

Colocated mode (no decode upstreams; the `prefill` list holds the colocated instances, as in
pdsim's router): the policy picks one instance (RouteDecision.decode_id is -1), the request goes
there alone (no bootstrap address; a room is still drawn, keeping the RNG streams in step with
pdsim), and its tokens stream back exactly as a decode half's; the instance's row is the trace row.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp

from pdreal.engine.types import EngineRequest, merge_halves
from pdreal.kv_events import CacheSummary, block_hash_ids
from pdreal.model.sampling import SamplingParams
from pdreal.serving.config import ServeConfig
from pdreal.serving.router_metrics import RouterMetrics
from pdreal.serving.timebase import now_s
from pdreal.serving.upstream import Upstream, failed_line, post_abort, stream_half
from pdreal.serving.wire import request_to_json
from pdsim.policy import RequestView, SloPredictor
from pdsim.policy.router_policy import REJECTED, RouterPolicy
from pdsim.rng import stream
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED, STATUS_REJECTED

log = logging.getLogger(__name__)
STOPPED = "stopped by a stop string"


@dataclass(frozen=True)
class TokenEvent:
    token_ids: tuple[int, ...]
    time_s: float
    # per token when asked (SamplingParams.logprobs >= 0): [logprob, [[token id, logprob], ...]]
    logprobs: tuple[Any, ...] = ()
    prompt_logprobs: tuple[Any, ...] = ()  # on the first token, when asked (SamplingParams.prompt_logprobs)


@dataclass(frozen=True)
class FinalEvent:
    status: str
    failure_reason: str
    output_ids: tuple[int, ...]
    row: dict[str, Any]
    unavailable: bool = False  # no healthy instance, or the chosen one could not take it (HTTP 503)
    side: str = ""  # where a failure arose: router | client | prefill | decode | colocated
    prompt_logprobs: tuple[Any, ...] = ()  # per prompt token when asked (the first is None)


NO_PREFILL_HALF = {"finished": True, "status": STATUS_FINISHED, "failure_reason": "", "row": {}}
CLIENT_GONE = "client disconnected"
PREFILL_ROW_GRACE_S = 4.0


@dataclass
class _Pump:
    """Reads one half's lines into a queue; `cut` ends it with a failed line."""

    upstream: Upstream
    queue: asyncio.Queue[dict[str, Any]]
    task: asyncio.Task[None]

    def cut(self, reason: str) -> None:
        if not self.task.done():
            self.task.cancel()
            self.queue.put_nowait(failed_line(reason))


@dataclass
class _Flight:
    """One dispatched request: which halves are done and the first failure seen. Colocated: the
    one instance is both `prefill` and `decode`, and the prefill half is NO_PREFILL_HALF."""

    prefill: Upstream
    decode: Upstream
    engine_id: int
    prefill_line: dict[str, Any] | None = None
    decode_line: dict[str, Any] | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    first_failure: str = ""
    failure_side: str = ""  # the role of the instance whose half failed first (or client | router)
    unavailable: bool = False  # a half was refused because its instance's scheduler is down
    prefilled: asyncio.Event = field(default_factory=asyncio.Event)  # the prefill half has ended
    sampling_logprobs: int = -1  # SamplingParams.logprobs of the request
    wants_prompt_logprobs: bool = False  # SamplingParams.prompt_logprobs >= 0
    prompt_logprobs: tuple[Any, ...] = ()  # as they arrived (the first token's line or the prefill half's)
    token_times_s: list[float] = field(default_factory=list)
    output_ids: list[int] = field(default_factory=list)
    pumps: list[_Pump] = field(default_factory=list)

    def lose(self, upstream: Upstream, reason: str) -> None:
        """`upstream` was marked unhealthy: its unfinished halves end now, failed with `reason`."""
        for pump in self.pumps:
            if pump.upstream is upstream:
                pump.cut(reason)

    def note(self, line: dict[str, Any], upstream: Upstream) -> None:
        if line["status"] != STATUS_FINISHED and not self.first_failure:
            self.first_failure, self.failure_side = line["failure_reason"], upstream.role
            if line.get("unavailable"):  # its scheduler is down: no longer routed to, told now
                upstream.mark_unhealthy(f"refused a request: {line['failure_reason']}")
                self.unavailable = not self.output_ids


def _unwatch_when_done(flight: _Flight) -> None:
    """Stop watching the flight's instances once its last pump ends (a prefill half left to report
    in the background stays bound to its instance's health until then)."""
    room, pending = flight.engine_id, [p.task for p in flight.pumps if not p.task.done()]

    def unwatch(_: object = None) -> None:
        if all(task.done() for task in pending):
            flight.prefill.watchers.pop(room, None)
            flight.decode.watchers.pop(room, None)

    for task in pending:
        task.add_done_callback(unwatch)
    unwatch()


def slo_predictor(cfg: ServeConfig) -> SloPredictor | None:
    """early_reject's latency model: the table of a `pdreal profile` CSV (node.latency_profile)."""
    if not cfg.node.latency_profile:
        return None
    from pdsim.perf.table import load_table

    table = load_table(Path(cfg.node.latency_profile), "", "", 0)
    return SloPredictor(table, table, cfg.cluster.max_prefill_tokens, cfg.cluster.max_running_requests)


class Router:
    def __init__(self, cfg: ServeConfig, prefill: list[Upstream], decode: list[Upstream]) -> None:
        self.cfg, self.prefill, self.decode = cfg, prefill, decode
        self.colocated = not decode  # prefill holds the colocated instances
        # KV events hash one page per block: that is the block size cache-aware routing sees
        self.policy = RouterPolicy.create(cfg.policy, cfg.slo, cfg.cluster.page_size_tokens,
                                          stream(cfg.seed, "router.route"), stream(cfg.seed, "router.bootstrap_room"),
                                          slo_predictor(cfg))
        self.metrics = RouterMetrics()
        self.prefill_row_grace_s = PREFILL_ROW_GRACE_S
        self.session: aiohttp.ClientSession | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._next_id = 0
        # pdreal.kv_events: block summaries fed by the prefill instances' KV events (None = off);
        # cache_aware / kv_centric then see them as InstanceView.cached_blocks
        self.kv_summary: CacheSummary | None = CacheSummary() if cfg.kv_events_enabled else None

    @property
    def http(self) -> aiohttp.ClientSession:
        """The client session to the instances (opened when the router's server starts)."""
        if self.session is None:
            raise RuntimeError("router: no HTTP session to the instances (the server has not started)")
        return self.session

    def new_request_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    async def drain_background(self, timeout_s: float) -> None:
        """Let background work (aborts sent to instances) end, at most `timeout_s`."""
        if self._background:
            await asyncio.wait(set(self._background), timeout=timeout_s)

    def _spawn(self, coro: Any) -> None:
        """Keep a background coroutine (or task) referenced until it ends."""
        task = coro if isinstance(coro, asyncio.Task) else asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _choose(self, view: RequestView, now: float) -> tuple[tuple[Upstream, Upstream] | None, int, str, str]:
        """((prefill, decode), room, '', '') or (None, 0, status, reason): pdsim.policy.router_policy decides."""
        p_views, d_views = [u.view() for u in self.prefill], [u.view() for u in self.decode]
        if self.kv_summary is not None:
            p_views = [replace(v, cached_blocks=self.kv_summary.cached_blocks(v.instance_id)) for v in p_views]
        decision = self.policy.decide(view, p_views, d_views, now)
        if not decision.routed:
            return None, 0, STATUS_REJECTED if decision.outcome == REJECTED else STATUS_FAILED, decision.reason
        first = self.prefill[decision.prefill_id]
        pair = (first, first if self.colocated else self.decode[decision.decode_id])
        return pair, decision.bootstrap_room, "", ""

    async def generate(self, input_ids: tuple[int, ...], sampling: SamplingParams, request_id: int,
                       stop: asyncio.Event | None = None,
                       prefilled: asyncio.Event | None = None) -> AsyncGenerator[TokenEvent | FinalEvent, None]:
        """Serve one request; setting `stop` (a stop string matched) ends it as finished early;
        `prefilled` is set once its prefill half has ended (its prompt is then in the prefix cache;
        colocated: once it ends), or it could not be dispatched."""
        arrival = now_s()
        base = {"request_id": request_id, "input_tokens": len(input_ids), "output_tokens": sampling.max_new_tokens,
                "mode": "colocated" if self.colocated else "disaggregated", "arrival_s": arrival}
        hashes = block_hash_ids(input_ids, self.policy.state.params.block_tokens) if self.kv_summary is not None else ()
        pair, room, status, reason = self._choose(RequestView(request_id, len(input_ids), sampling.max_new_tokens,
                                                        arrival_s=arrival, hash_ids=hashes), arrival)
        if pair is None:
            row = {**base, "status": status, "failure_reason": reason, "finish_s": now_s()}
            self.metrics.observe(row, 0, "router")
            if prefilled is not None:
                prefilled.set()
            yield FinalEvent(status, reason, (), row, unavailable=status != STATUS_REJECTED, side="router")
            return
        flight = _Flight(pair[0], pair[1], engine_id=room, stop=stop or asyncio.Event(),
                         prefill_line=dict(NO_PREFILL_HALF) if self.colocated else None,
                         prefilled=prefilled or asyncio.Event(), sampling_logprobs=sampling.logprobs,
                         wants_prompt_logprobs=sampling.prompt_logprobs >= 0)
        req = EngineRequest(room, input_ids, sampling, bootstrap_room=room, arrival_s=arrival)
        payload = request_to_json(req, "" if self.colocated else flight.prefill.url.removeprefix("http://"))
        flight.prefill.queued[room] = flight.decode.queued[room] = len(input_ids)
        base.update(route_s=now_s(), prefill_instance=flight.prefill.index, decode_instance=flight.decode.index,
                    bootstrap_room=room)
        self.metrics.inflight += 1
        for upstream in {id(u): u for u in (flight.prefill, flight.decode)}.values():
            upstream.watchers[room] = functools.partial(flight.lose, upstream)
        prefill_task = None
        if not self.colocated:
            prefill_task = asyncio.create_task(self._prefill_half(flight, self._pump(flight, flight.prefill, payload)))
        decode_queue = self._pump(flight, flight.decode, payload)
        ended = False
        try:
            async for event in self._decode_half(flight, decode_queue):
                yield event
            if prefill_task is not None:
                await self._await_prefill(flight, prefill_task)
            ended = True
            yield self._final(flight, base)
        finally:
            self.metrics.inflight -= 1
            for upstream in (flight.prefill, flight.decode):
                upstream.queued.pop(room, None)
            flight.prefilled.set()
            if not ended:
                self._client_gone(flight, base, prefill_task)
            _unwatch_when_done(flight)

    def _pump(self, flight: _Flight, upstream: Upstream, payload: dict[str, Any]) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()

        async def run() -> None:
            async for line in stream_half(self.http, upstream, payload, self.cfg.node.request_timeout_s):
                queue.put_nowait(line)

        flight.pumps.append(_Pump(upstream, queue, asyncio.create_task(run())))
        return queue

    def _client_gone(self, flight: _Flight, base: dict[str, Any], prefill_task: asyncio.Task[None] | None) -> None:
        """The client went away mid-way: abort both halves; the request counts as failed."""
        for pump in flight.pumps:
            pump.task.cancel()
        if prefill_task is not None:
            prefill_task.cancel()
        if flight.decode_line is None or flight.prefill_line is None:
            for upstream in {id(u): u for u in (flight.prefill, flight.decode)}.values():
                self._spawn(post_abort(self.http, upstream, flight.engine_id, CLIENT_GONE))
        row = {**base, "status": STATUS_FAILED, "failure_reason": CLIENT_GONE, "finish_s": now_s()}
        self.metrics.observe(row, len(flight.output_ids), "client")

    async def _prefill_half(self, flight: _Flight, queue: asyncio.Queue[dict[str, Any]]) -> None:
        while not (line := await queue.get()).get("finished"):
            continue
        flight.prefill_line = line
        flight.prefill.queued.pop(flight.engine_id, None)
        flight.prefilled.set()
        flight.note(line, flight.prefill)
        if line["status"] != STATUS_FINISHED and flight.decode_line is None:
            why = f"prefill half {line['status']}: {line['failure_reason']}"
            self._spawn(post_abort(self.http, flight.decode, flight.engine_id, why))

    async def _decode_half(self, flight: _Flight, queue: asyncio.Queue[dict[str, Any]]) -> AsyncIterator[TokenEvent]:
        while True:
            line = await queue.get()
            if not line.get("finished"):
                t = now_s()
                flight.decode.queued.pop(flight.engine_id, None)
                flight.output_ids.extend(line["token_ids"])
                flight.token_times_s.extend([t] * len(line["token_ids"]))
                logprobs = tuple(line.get("logprobs") or ())
                if not logprobs and flight.sampling_logprobs >= 0:  # the first token: made by prefill
                    logprobs = await self._first_logprobs(flight, len(line["token_ids"]))
                prompt = await self._prompt_logprobs(flight, line) if len(flight.output_ids) == len(line["token_ids"]) else ()
                yield TokenEvent(tuple(line["token_ids"]), t, logprobs, prompt)
                if flight.stop.is_set() and not flight.first_failure:
                    flight.first_failure = STOPPED
                    self._spawn(post_abort(self.http, flight.decode, flight.engine_id, STOPPED))
                continue
            if flight.first_failure == STOPPED:
                line = {**line, "status": STATUS_FINISHED, "failure_reason": ""}
            flight.decode_line = line
            flight.note(line, flight.decode)
            if line["status"] != STATUS_FINISHED and flight.prefill_line is None:
                why = f"decode half {line['status']}: {line['failure_reason']}"
                self._spawn(post_abort(self.http, flight.prefill, flight.engine_id, why))
            return

    async def _first_logprobs(self, flight: _Flight, count: int) -> tuple[Any, ...]:
        """The first token's logprobs, which the prefill half reports (its final line), not the
        decode half: wait for that line (it ends as the KV arrives), at most the row's grace."""
        if not self.colocated:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(flight.prefilled.wait(), self.prefill_row_grace_s)
        found = tuple((flight.prefill_line or {}).get("logprobs") or ())
        return found[:count] if len(found) >= count else (None,) * count

    async def _prompt_logprobs(self, flight: _Flight, line: dict[str, Any]) -> tuple[Any, ...]:
        """With the first token, the prompt's logprobs when asked: on a colocated instance's token
        line, else on the prefill half's final line (waited for as `_first_logprobs` does)."""
        if not flight.wants_prompt_logprobs:
            return ()
        if not self.colocated:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(flight.prefilled.wait(), self.prefill_row_grace_s)
        flight.prompt_logprobs = tuple(line.get("prompt_logprobs") or (flight.prefill_line or {}).get("prompt_logprobs")
                                       or ())
        return flight.prompt_logprobs

    async def _await_prefill(self, flight: _Flight, task: asyncio.Task[None]) -> None:
        """The prefill half normally reports before the first token. After a finished decode half
        the request is finished whatever the prefill half says later: a late report (its instance
        busy with a long forward) only leaves the prefill times out of the row; the half is left
        to end in the background. A failed decode half waits as long, then the prefill half is
        given up (its instance was told to abort). An unhealthy instance ends the wait at once."""
        decode_ok = flight.decode_line is not None and flight.decode_line["status"] == STATUS_FINISHED
        try:
            await asyncio.wait_for(asyncio.shield(task), self.prefill_row_grace_s)
        except asyncio.TimeoutError:
            if decode_ok:
                log.info("%s: prefill half of room %d unreported %g s after decode finished; row without its "
                         "times", flight.prefill.name, flight.engine_id, self.prefill_row_grace_s)
                self._spawn(task)
                flight.prefill_line = dict(NO_PREFILL_HALF)
                return
            task.cancel()
            next(p for p in flight.pumps if p.upstream is flight.prefill).task.cancel()  # told to abort
            line = failed_line(f"{flight.prefill.name}: prefill half unfinished {self.prefill_row_grace_s:g} s "
                               "after decode")
            flight.prefill_line = line
            flight.note(line, flight.prefill)
            return
        prefill_line = flight.prefill_line
        assert prefill_line is not None, "the prefill half's task ended without its line"
        if decode_ok and prefill_line["status"] != STATUS_FINISHED:  # the KV did arrive
            log.info("room %d finished although its prefill half reports %s", flight.engine_id,
                     prefill_line["failure_reason"])
            flight.prefill_line = {**prefill_line, "status": STATUS_FINISHED, "failure_reason": ""}
            if flight.first_failure != STOPPED:
                flight.first_failure = ""

    def _final(self, flight: _Flight, base: dict[str, Any]) -> FinalEvent:
        halves = []
        for upstream, line in ((flight.prefill, flight.prefill_line), (flight.decode, flight.decode_line)):
            assert line is not None, "a final row needs both halves' lines"
            row = upstream.times_to_local(line.get("row") or {})
            row.update(status=line["status"], failure_reason=line["failure_reason"])
            halves.append(row)
        row = merge_halves(*halves)
        times = flight.token_times_s
        row.update(base, first_token_s=times[0] if times else math.nan, last_token_s=times[-1] if times else math.nan,
                   token_times_s=list(times), finish_s=now_s())
        if flight.first_failure == STOPPED and row["status"] == STATUS_FINISHED:
            row["failure_reason"] = ""
        if row["status"] == STATUS_FINISHED:
            row["output_tokens"] = len(flight.output_ids)
        else:  # as in pdsim: only a finished request has a last token (token_times_s keeps them)
            row["failure_reason"] = flight.first_failure or row["failure_reason"]
            row["last_token_s"] = math.nan
        side = "" if row["status"] == STATUS_FINISHED else flight.failure_side or flight.decode.role
        self.metrics.observe(row, len(flight.output_ids), side)
        prompt_logprobs = flight.prompt_logprobs or tuple((flight.prefill_line or {}).get("prompt_logprobs") or ())
        return FinalEvent(row["status"], row["failure_reason"], tuple(flight.output_ids), row,
                          unavailable=flight.unavailable, side=side, prompt_logprobs=prompt_logprobs)
