"""The bootstrap server (prefill side) and its client (decode side).

Prefill instance, HTTP on its own port (SGLang's bootstrap server):

    PUT /route   register a rank: {"engine_rank", "tp_rank", "tp_size", "addr" (the KV
                 manager's ZMQ host:port), "instance_id"}; the instance registers itself at start
    GET /route   ?engine_rank=N: that rank's entry; no argument: the parallel layout and ranks
    GET /health  liveness (the decode side's heartbeat target), with the clock id and time and
                 rank 0's KV address (`addr`: a restarted instance has a new one)

Decode instance: a `ConnectionCache` resolves a request's bootstrap host:port to the rank's
ZMQ address once and keeps it; a `HeartbeatChecker` polls /health of every cached bootstrap
server every `interval_s` and, after `misses` consecutive failures - or at once when /health names
another KV address than the cached one (the prefill instance was restarted behind the same HTTP
port) - calls `on_dead` (which fails the peer's in-flight transfer rooms) and drops the cached
connection, so the next request to that server resolves again (and fails at once while it is down).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from pdreal.serving.timebase import clock_id, now_s

log = logging.getLogger(__name__)
REQUIRED_FIELDS = ("engine_rank", "addr")


class BootstrapError(RuntimeError):
    """The bootstrap server could not be reached or does not know the rank."""


@dataclass
class BootstrapTable:
    ranks: dict[int, dict[str, Any]] = field(default_factory=dict)

    def register(self, entry: dict[str, Any]) -> dict[str, Any]:
        missing = [f for f in REQUIRED_FIELDS if f not in entry]
        if missing:
            raise ValueError(f"PUT /route: missing fields {missing} (needs {REQUIRED_FIELDS})")
        rank = entry["engine_rank"]
        if not isinstance(rank, int) or rank < 0:
            raise ValueError(f"PUT /route: field 'engine_rank' must be an int >= 0, got {rank!r}")
        host, sep, port = str(entry["addr"]).rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"PUT /route: field 'addr' must be host:port, got {entry['addr']!r}")
        self.ranks[rank] = {"tp_rank": rank, "tp_size": 1, **entry}
        return self.ranks[rank]

    def layout(self) -> dict[str, Any]:
        tp_size = max((e.get("tp_size", 1) for e in self.ranks.values()), default=0)
        return {"tp_size": tp_size, "ranks": {str(r): e for r, e in sorted(self.ranks.items())}}


def add_bootstrap_routes(app: web.Application, table: BootstrapTable, healthy: Callable[[], bool]) -> None:
    async def put_route(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise ValueError(f"PUT /route: body must be a JSON object, got {type(body).__name__}")
            entry = table.register(body)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            return web.json_response({"error": str(exc)}, status=400)
        log.info("bootstrap: registered rank %s at %s", entry["engine_rank"], entry["addr"])
        return web.json_response(entry)

    async def get_route(request: web.Request) -> web.Response:
        rank_text = request.query.get("engine_rank")
        if rank_text is None:
            return web.json_response(table.layout())
        if not rank_text.isdigit():
            return web.json_response({"error": f"engine_rank must be an int >= 0, got {rank_text!r}"}, status=400)
        entry = table.ranks.get(int(rank_text))
        if entry is None:
            return web.json_response({"error": f"engine_rank {rank_text} not registered"}, status=404)
        return web.json_response(entry)

    async def health(request: web.Request) -> web.Response:
        ok = healthy()
        addr = table.ranks.get(0, {}).get("addr", "")
        return web.json_response({"status": "ok" if ok else "unhealthy", "clock_id": clock_id(), "now_s": now_s(),
                                  "addr": addr}, status=200 if ok else 503)

    app.router.add_put("/route", put_route)
    app.router.add_get("/route", get_route)
    app.router.add_get("/health", health)


@dataclass
class PeerEntry:
    bootstrap: str  # the bootstrap server's host:port
    addr: str  # the rank's KV control address (what KVReceivers are created with)
    misses: int = 0


class ConnectionCache:
    """Decode side: bootstrap host:port -> the prefill rank's KV address, resolved once."""

    def __init__(self, session: aiohttp.ClientSession, timeout_s: float = 5.0) -> None:
        self.session, self.timeout_s = session, timeout_s
        self._entries: dict[str, PeerEntry] = {}

    def entries(self) -> list[PeerEntry]:
        return list(self._entries.values())

    def get(self, bootstrap: str) -> PeerEntry | None:
        return self._entries.get(bootstrap)

    def drop(self, bootstrap: str) -> None:
        self._entries.pop(bootstrap, None)

    async def resolve(self, bootstrap: str, engine_rank: int = 0) -> PeerEntry:
        entry = self._entries.get(bootstrap)
        if entry is not None:
            return entry
        url = f"http://{bootstrap}/route"
        try:
            timeout = aiohttp.ClientTimeout(total=self.timeout_s)
            async with self.session.get(url, params={"engine_rank": str(engine_rank)}, timeout=timeout) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200:
                    raise BootstrapError(f"GET {url}: HTTP {resp.status}: {body.get('error', body)}")
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            raise BootstrapError(f"bootstrap server {bootstrap} unreachable: {type(exc).__name__} {exc}") from None
        entry = self._entries.setdefault(bootstrap, PeerEntry(bootstrap, str(body["addr"])))
        return entry


class HeartbeatChecker:
    """Polls /health of every cached bootstrap server; declares a peer dead after `misses` failures."""

    def __init__(self, cache: ConnectionCache, interval_s: float, misses: int,
                 on_dead: Callable[[PeerEntry, str], None]) -> None:
        if interval_s <= 0 or misses < 1:
            raise ValueError(f"heartbeat needs interval_s > 0 and misses >= 1, got {interval_s}, {misses}")
        self.cache, self.interval_s, self.misses, self.on_dead = cache, interval_s, misses, on_dead
        self.num_missed = 0  # heartbeats missed in total (for /metrics)
        self.num_dead = 0

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await asyncio.gather(*(self._check(e) for e in self.cache.entries()))

    async def _check(self, entry: PeerEntry) -> None:
        why, body = "", None
        try:
            timeout = aiohttp.ClientTimeout(total=self.interval_s)
            async with self.cache.session.get(f"http://{entry.bootstrap}/health", timeout=timeout) as resp:
                body = await resp.json(content_type=None)
                if resp.status != 200:
                    why = f"HTTP {resp.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            why = type(exc).__name__
        addr = body.get("addr") if not why and isinstance(body, dict) else None
        restarted = bool(addr) and addr != entry.addr
        if not why and not restarted:
            entry.misses = 0
            return
        entry.misses = self.misses if restarted else entry.misses + 1
        self.num_missed += not restarted
        if restarted:
            why = f"restarted: KV address {entry.addr} is now {addr}"
        if entry.misses >= self.misses and self.cache.get(entry.bootstrap) is entry:
            self.num_dead += 1
            self.cache.drop(entry.bootstrap)
            reason = (f"prefill peer {entry.bootstrap} {why}" if restarted
                      else f"prefill peer {entry.bootstrap} missed {entry.misses} heartbeats ({why})")
            log.warning("%s: failing its in-flight requests", reason)
            self.on_dead(entry, reason)
