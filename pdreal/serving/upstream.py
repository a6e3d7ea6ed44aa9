"""The router's view of one instance: polled stats, health, clock offset, queued work.

`Upstream.poll` fetches /stats (one round trip also samples the clock offset); after
`unhealthy_after` failed polls in a row the instance is unhealthy and the routing policy no
longer sees it as a candidate; one good poll makes it healthy again. Queued work is the
router's own accounting, as in pdsim's router: a request counts as queued on the prefill side
from dispatch until its prefill half finishes, on the decode side until its first token, so
back-to-back decisions see each other before any poll does.

When an instance turns unhealthy (failed polls, or its engine reports an error) every in-flight
request using it is told at once through `watchers` (the router fails its unfinished halves), so
no client waits for a stalled or dead instance beyond the health check's own delay.

`stream_half` posts one half of a request and yields its NDJSON lines; any HTTP or connection
error ends the stream with a synthetic failed line naming the instance.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from pdreal.serving.auth import TOKEN_HEADER
from pdreal.serving.timebase import ClockSync, clock_id, now_s
from pdsim.policy import InstanceView
from pdsim.trace import STATUS_FAILED

log = logging.getLogger(__name__)


@dataclass
class Upstream:
    role: str
    index: int
    url: str
    unhealthy_after: int = 3
    healthy: bool = False
    misses: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    sync: ClockSync = field(default_factory=lambda: ClockSync(clock_id()))
    queued: dict[int, int] = field(default_factory=dict)  # engine request id -> prompt tokens
    watchers: dict[int, Callable[[str], None]] = field(default_factory=dict)  # room -> told when it turns unhealthy
    token: str = ""  # the control-plane token sent to the instance (X-PDReal-Token)

    @property
    def name(self) -> str:
        return f"{self.role}:{self.index} ({self.url})"

    @property
    def kv_total_tokens(self) -> int:
        return int(self.stats.get("kv_total_tokens", 0))

    async def poll(self, session: aiohttp.ClientSession, timeout_s: float) -> None:
        sent = now_s()
        try:
            async with session.get(f"{self.url}/stats", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
                if resp.status != 200:
                    raise aiohttp.ClientError(f"HTTP {resp.status}")
                stats = await resp.json()
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            self.misses += 1
            if self.healthy and self.misses >= self.unhealthy_after:
                detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self._mark_unhealthy(f"{self.misses} failed /stats polls ({detail})")
            return
        self.sync.add_sample(stats["clock_id"], sent, stats["now_s"], now_s())
        self.stats, self.misses = stats, 0
        if stats.get("error"):
            if self.healthy:
                self._mark_unhealthy(f"engine error: {stats['error']}")
            return
        if not self.healthy:
            log.info("%s healthy", self.name)
        self.healthy = True

    def mark_unhealthy(self, why: str) -> None:
        """Told by a refused request (the instance's scheduler is down) before any poll saw it."""
        if self.healthy:
            self._mark_unhealthy(why)

    def _mark_unhealthy(self, why: str) -> None:
        """No longer routed to; every in-flight request using it is failed now (watchers)."""
        self.healthy = False
        log.warning("%s unhealthy: %s; failing its %d in-flight request(s)", self.name, why, len(self.watchers))
        for notify in list(self.watchers.values()):
            notify(f"{self.name} marked unhealthy by the router: {why}")

    def view(self) -> InstanceView:
        queues = self.stats.get("queues", {})
        return InstanceView(
            instance_id=self.index, role=self.role, queued_requests=len(self.queued),
            queued_tokens=sum(self.queued.values()), running_requests=int(queues.get("running", 0)),
            inflight_requests=int(queues.get("inflight", 0)), kv_used_tokens=int(self.stats.get("kv_used_tokens", 0)),
            kv_total_tokens=self.kv_total_tokens, healthy=self.healthy,
        )

    def times_to_local(self, row: dict[str, Any]) -> dict[str, Any]:
        """A half-row with every time put on the router's clock."""
        if self.sync.same_clock:
            return dict(row)
        out: dict[str, Any] = {}
        for key, value in row.items():
            if key.endswith("_s") and isinstance(value, float):
                out[key] = self.sync.to_local(value)
            elif key == "token_times_s" and isinstance(value, list):
                out[key] = [self.sync.to_local(t) for t in value]
            else:
                out[key] = value
        return out


async def stream_half(session: aiohttp.ClientSession, upstream: Upstream, payload: dict[str, Any],
                      timeout_s: float) -> AsyncIterator[dict[str, Any]]:
    """POST /generate to `upstream`; yields its lines, always ending with one `finished` line."""
    try:
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 10.0))
        async with session.post(f"{upstream.url}/generate", json=payload, timeout=timeout,
                                headers=control_headers(upstream.token)) as resp:
            if resp.status != 200:
                text = await resp.text()
                line = _failed(upstream, f"HTTP {resp.status}: {text[:300]}")
                yield {**line, "unavailable": True} if resp.status == 503 else line
                return
            async for raw in resp.content:
                if raw.strip():
                    line = json.loads(raw)
                    yield line
                    if line.get("finished"):
                        return
        yield _failed(upstream, "stream ended without a final line")
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
        yield _failed(upstream, f"{type(exc).__name__}: {exc}".rstrip(": "))


def control_headers(token: str) -> dict[str, str]:
    return {TOKEN_HEADER: token} if token else {}


def failed_line(reason: str) -> dict[str, Any]:
    return {"finished": True, "status": STATUS_FAILED, "failure_reason": reason, "token_ids": [], "row": {}}


def _failed(upstream: Upstream, why: str) -> dict[str, Any]:
    return {"finished": True, "status": STATUS_FAILED, "failure_reason": f"{upstream.name}: {why}",
            "token_ids": [], "row": {}}


async def post_abort(session: aiohttp.ClientSession, upstream: Upstream, request_id: int, reason: str) -> None:
    try:
        async with session.post(f"{upstream.url}/abort", json={"request_id": request_id, "reason": reason},
                                timeout=aiohttp.ClientTimeout(total=5.0), headers=control_headers(upstream.token)) as resp:
            await resp.read()
    except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError) as exc:  # RuntimeError: session closed
        log.info("abort of %d on %s not delivered: %s", request_id, upstream.name, exc)
