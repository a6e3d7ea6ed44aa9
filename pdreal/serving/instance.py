"""A prefill, decode or colocated instance's HTTP process: its API in front of its scheduler
process (scheduler.py, reached through scheduler_client.py over ZMQ; the engine never runs here).

    POST /generate  one half of a request (wire.py format); NDJSON output lines
    POST /abort     {"request_id", "reason"}: fail it wherever it is
    GET  /stats     JSON: queues, KV use, counters, engine facts, clock
    GET  /metrics   Prometheus text
    GET  /steps     JSON: the engine's recent timed forwards (kind, batch, tokens, latency, end time)
    GET  /health    200 while the scheduler process runs (503 while it starts or restarts)
    PUT/GET /route  prefill only: the bootstrap server (bootstrap.py)

A decode instance resolves each request's bootstrap host:port through its connection cache
before the request enters the engine, and runs the heartbeat checker over the cached peers. A
colocated instance (pdreal.engine.colocated) has no KV transfer: no bootstrap, no heartbeat; it
streams every token of a request, as a decode instance does.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import asdict, replace
from typing import Any

import aiohttp
from aiohttp import web

from pdreal.engine.types import EngineConfig
from pdreal.serving.bootstrap import (
    BootstrapError,
    BootstrapTable,
    ConnectionCache,
    HeartbeatChecker,
    PeerEntry,
    add_bootstrap_routes,
)
from pdreal.serving.config import ServeConfig
from pdreal.serving.metrics import CONTENT_TYPE, MetricsRegistry
from pdreal.serving.scheduler_client import SchedulerClient
from pdreal.serving.timebase import clock_id, now_s
from pdreal.serving.wire import failed_line, output_line, request_from_json
from pdsim.trace import STATUS_FAILED

log = logging.getLogger(__name__)
INSTANCE_ROLES = ("prefill", "decode", "colocated")


class InstanceServer:
    def __init__(self, role: str, serve: ServeConfig, config: EngineConfig) -> None:
        if role not in INSTANCE_ROLES:
            raise ValueError(f"instance role {role!r} unknown (choose from {INSTANCE_ROLES})")
        self.role, self.serve, self.config, self.faults = role, serve, config, serve.faults
        self.facts: dict[str, Any] = {}
        self.bootstrap = BootstrapTable()
        self.scheduler: SchedulerClient | None = None
        self.session: aiohttp.ClientSession | None = None
        self.cache: ConnectionCache | None = None
        self.heartbeat: HeartbeatChecker | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.num_bootstrap_failures = 0

    @property
    def vocab_size(self) -> int:
        return int(self.facts["vocab_size"])

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/generate", self.generate)
        app.router.add_post("/abort", self.abort)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/steps", self.steps)
        if self.role == "prefill":
            add_bootstrap_routes(app, self.bootstrap, self.healthy)
        else:
            app.router.add_get("/health", self.health)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.scheduler = SchedulerClient(self.serve, self.role, on_restart=self._on_scheduler_ready)
        await self._on_scheduler_ready(await self.scheduler.start())
        self.session = aiohttp.ClientSession()
        if self.role == "decode":
            self.cache = ConnectionCache(self.session, timeout_s=max(1.0, self.faults.heartbeat_interval_s))
            self.heartbeat = HeartbeatChecker(self.cache, self.faults.heartbeat_interval_s,
                                              self.faults.heartbeat_misses, self._peer_dead)
            self._tasks.append(asyncio.create_task(self.heartbeat.run()))

    async def _on_shutdown(self, app: web.Application) -> None:
        """Before in-flight handlers are waited for: stop the scheduler (it finishes its step and
        checks its invariants), which fails every live request with 'instance stopping', so the
        handlers end at once instead of running out the server's drain time."""
        if self.scheduler is not None:
            error = await self.scheduler.stop()
            if error:
                log.error("%s instance invariants: %s", self.role, error)

    async def _on_cleanup(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        if self.session is not None:
            await self.session.close()

    async def _on_scheduler_ready(self, facts: dict[str, Any]) -> None:
        """A (re)started scheduler: its facts; a prefill registers its KV address as rank 0."""
        self.facts = facts
        if self.role == "prefill":
            entry = self.bootstrap.register({"engine_rank": 0, "tp_rank": 0, "tp_size": 1,
                                             "addr": facts["bootstrap_addr"], "instance_id": self.config.instance_id})
            log.info("bootstrap: rank 0 at %s", entry["addr"])

    def _peer_dead(self, entry: PeerEntry, reason: str) -> None:
        assert self.scheduler is not None
        self.scheduler.fail_peer(entry.addr, reason)

    def healthy(self) -> bool:
        return self.scheduler is not None and not self.scheduler.error

    async def health(self, request: web.Request) -> web.Response:
        ok = self.healthy()
        return web.json_response({"status": "ok" if ok else "unhealthy", "clock_id": clock_id(), "now_s": now_s()},
                                 status=200 if ok else 503)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        assert self.scheduler is not None
        try:
            req, bootstrap = request_from_json(await request.json(), self.vocab_size)
        except ValueError as exc:  # malformed JSON is a ValueError too
            return web.json_response({"error": f"{self.role} /generate: {exc}"}, status=400)
        if self.scheduler.error:  # dead or restarting: 503 tells the router to look elsewhere
            return web.json_response({"error": f"{self.role} scheduler unavailable: {self.scheduler.error}"},
                                     status=503, headers={"Retry-After": "1"})
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        submitted = False
        try:
            if request.transport is None or request.transport.is_closing():
                raise ConnectionResetError("closed before the request was read")  # failed by the router already
            await response.prepare(request)
            if self.role == "decode":
                addr, failure = await self._resolve(bootstrap)
                if failure:
                    await response.write(failed_line(STATUS_FAILED, failure, {"request_id": req.request_id}))
                    return response
                req = replace(req, bootstrap_addr=addr)
            try:
                channel = self.scheduler.submit(req)
            except (ValueError, RuntimeError) as exc:
                await response.write(failed_line(STATUS_FAILED, str(exc), {"request_id": req.request_id}))
                return response
            submitted = True
            while True:
                out = await channel.get()
                await response.write(output_line(out))
                if out.finished:
                    break
        except ConnectionResetError as exc:  # the router gave up on this half (it failed it already)
            log.info("%s: router connection of request %d closed (%s)", self.role, req.request_id, exc)
            if submitted:
                self.scheduler.abort(req.request_id, "router connection closed")
        except asyncio.CancelledError:
            if submitted:
                self.scheduler.abort(req.request_id, "router connection closed")
            raise
        return response

    async def _resolve(self, bootstrap: str) -> tuple[str, str]:
        """(the prefill rank's KV address, '') or ('', failure reason)."""
        assert self.cache is not None
        try:
            entry = await self.cache.resolve(bootstrap)
        except BootstrapError as exc:
            self.num_bootstrap_failures += 1
            return "", f"bootstrap: {exc}"
        if self.cache.get(bootstrap) is not entry:  # declared dead while we waited
            self.num_bootstrap_failures += 1
            return "", f"bootstrap: prefill peer {bootstrap} declared dead"
        return entry.addr, ""

    async def abort(self, request: web.Request) -> web.Response:
        assert self.scheduler is not None
        try:
            body = await request.json()
            rid, reason = int(body["request_id"]), str(body.get("reason", "aborted"))
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response({"error": f"/abort needs {{'request_id': int}}: {exc}"}, status=400)
        self.scheduler.abort(rid, reason)
        return web.json_response({"ok": True})

    def snapshot(self) -> dict[str, Any]:
        assert self.scheduler is not None
        s, c = self.scheduler.stats, self.scheduler.counters
        data = {"role": self.role, "instance_id": self.config.instance_id, "queues": s.queues,
                "kv_used_tokens": s.kv_used_tokens, "kv_total_tokens": s.kv_total_tokens,
                "num_finished": s.num_finished, "num_failed": s.num_failed, "num_live": self.scheduler.num_live(),
                "steps": c.steps, "transfer_rooms": c.transfer_rooms, "scheduler_restarts": c.restarts,
                "error": self.scheduler.error, "starting": self.scheduler.progress if not self.facts else "",
                "clock_id": clock_id(), "now_s": now_s(), "engine": {**asdict(self.config), **self.facts}}
        if self.role == "prefill":
            data["bootstrap"] = self.bootstrap.layout()
        if self.heartbeat is not None:
            assert self.cache is not None  # (made with the heartbeat)
            data["heartbeat"] = {"peers": [asdict(e) for e in self.cache.entries()], "missed": self.heartbeat.num_missed,
                                 "peers_dead": self.heartbeat.num_dead, "rooms_failed": c.rooms_failed_by_heartbeat,
                                 "bootstrap_failures": self.num_bootstrap_failures}
        return data

    async def stats(self, request: web.Request) -> web.Response:
        return web.Response(text=json.dumps(self.snapshot()), content_type="application/json")

    async def steps(self, request: web.Request) -> web.Response:
        """The served step latencies (`?since_s=T`: only forwards that ended after T, monotonic)."""
        since = float(request.query.get("since_s", "-inf"))
        assert self.scheduler is not None
        records = [asdict(r) for r in self.scheduler.steps if r.end_s > since]
        return web.json_response({"role": self.role, "instance_id": self.config.instance_id,
                                  "clock_id": clock_id(), "steps": records})

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=instance_metrics(self.snapshot()).encode(), headers={"Content-Type": CONTENT_TYPE})


def instance_metrics(snap: dict[str, Any]) -> str:
    """Prometheus text of an instance snapshot."""
    reg, labels = MetricsRegistry(), {"role": snap["role"], "instance": snap["instance_id"]}
    queue = reg.gauge("pdreal_queue_requests", "requests in each engine queue")
    for name, count in snap["queues"].items():
        queue.set(count, queue=name, **labels)
    reg.gauge("pdreal_kv_used_tokens", "KV pool tokens in use").set(snap["kv_used_tokens"], **labels)
    reg.gauge("pdreal_kv_total_tokens", "KV pool capacity in tokens").set(snap["kv_total_tokens"], **labels)
    reg.gauge("pdreal_transfer_rooms", "KV transfer rooms not yet closed").set(snap["transfer_rooms"], **labels)
    done = reg.counter("pdreal_engine_requests_total", "request halves the engine finished, by status")
    done.inc(snap["num_finished"], status="finished", **labels)
    done.inc(snap["num_failed"], status="failed", **labels)
    reg.counter("pdreal_engine_steps_total", "engine loop iterations").inc(snap["steps"], **labels)
    heartbeat = snap.get("heartbeat")
    if heartbeat is not None:
        reg.counter("pdreal_heartbeat_missed_total", "heartbeats to prefill peers that failed").inc(
            heartbeat["missed"], **labels)
        reg.counter("pdreal_peers_dead_total", "prefill peers declared dead").inc(heartbeat["peers_dead"], **labels)
        reg.counter("pdreal_heartbeat_failed_rooms_total", "transfer rooms failed by the heartbeat").inc(
            heartbeat["rooms_failed"], **labels)
        reg.counter("pdreal_bootstrap_failures_total", "requests failed resolving the bootstrap server").inc(
            heartbeat["bootstrap_failures"], **labels)
    reg.counter("pdreal_scheduler_restarts_total", "scheduler processes restarted after dying").inc(
        snap.get("scheduler_restarts", 0), **labels)
    reg.gauge("pdreal_up", "1 while the scheduler process runs").set(0 if snap["error"] else 1, **labels)
    return reg.render()
