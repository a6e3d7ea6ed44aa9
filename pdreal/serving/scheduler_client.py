"""The HTTP process's side of its scheduler process: start it, talk to it, restart it if it dies.

    start()                  spawn `python -m pdreal.serving.scheduler`, wait for `ready` (its facts)
    submit(req) -> channel   the request enters the engine at the scheduler's next iteration
    abort(id, reason)        fail it wherever it is (client gone, other half failed)
    fail_peer(addr, reason)  fail every room exchanged with a dead peer (heartbeat)
    stop()                   stop the scheduler; returns its invariant-check error ('' when clean)

Everything runs on the HTTP process's asyncio loop: one task reads the event pipe (outputs onto
each request's asyncio.Queue, stats, step records), one supervises the process. When the
scheduler dies, every live request fails at once with the reason, `error` says why (/health is
503) and a new scheduler is started after `restart_delay_s`; `on_restart(facts)` then runs (a
prefill re-registers its new KV address with its bootstrap server).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import subprocess
import sys
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import zmq
import zmq.asyncio

from pdreal.engine.types import (
    STEP_LOG_SIZE,
    EngineRequest,
    EngineStats,
    RequestOutput,
    StepRecord,
    trace_row,
)
from pdreal.serving.config import ServeConfig, dump_serve_config
from pdreal.serving.ipc import (
    IpcPaths,
    decode_output,
    decode_stats,
    decode_steps,
    encode_request,
    pack,
    unpack,
)
from pdsim.trace import STATUS_FAILED

log = logging.getLogger(__name__)
SEND_HWM = 100_000  # commands queued for a busy scheduler before submit fails


@dataclass(frozen=True)
class LoopCounters:
    steps: int = 0
    peers_failed: int = 0
    rooms_failed_by_heartbeat: int = 0
    transfer_rooms: int = 0
    restarts: int = 0


class SchedulerClient:
    def __init__(self, cfg: ServeConfig, role: str, ready_timeout_s: float = 600.0, restart_delay_s: float = 1.0,
                 on_restart: Callable[[dict[str, Any]], Awaitable[None]] | None = None) -> None:
        self.role = role
        self.ready_timeout_s, self.restart_delay_s, self.on_restart = ready_timeout_s, restart_delay_s, on_restart
        self.paths = IpcPaths()
        self.config_path = dump_serve_config(cfg, self.paths.config_file)
        self._actx, self._ctx = zmq.asyncio.Context(), zmq.Context()
        self._events = self._actx.socket(zmq.PULL)
        self._events.bind(self.paths.events)
        self._commands = self._ctx.socket(zmq.PUSH)
        self._commands.setsockopt(zmq.SNDHWM, SEND_HWM)
        self._commands.bind(self.paths.commands)
        self._channels: dict[int, asyncio.Queue[RequestOutput]] = {}
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._stopped: asyncio.Future[str] | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self.process: asyncio.subprocess.Process | None = None
        self.facts: dict[str, Any] = {}
        self.stats = EngineStats({}, 0, 0, 0, 0)
        self.counters = LoopCounters()
        self.steps: deque[StepRecord] = deque(maxlen=STEP_LOG_SIZE)
        self.error = "starting"
        self.progress = ""
        self._death = ""
        self._stopping = False

    # ---- lifecycle -----------------------------------------------------------------------
    async def start(self) -> dict[str, Any]:
        """Start the scheduler and wait for it; RuntimeError naming the reason if it fails."""
        self._tasks.append(asyncio.create_task(self._read_events()))
        await self._launch()
        self._tasks.append(asyncio.create_task(self._supervise()))
        return self.facts

    async def _launch(self) -> None:
        loop = asyncio.get_running_loop()
        self._ready, self._death = loop.create_future(), ""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pdreal.serving.scheduler", "--config", str(self.config_path), "--role", self.role,
            "--commands", self.paths.commands, "--events", self.paths.events, stdout=subprocess.DEVNULL)
        exited = asyncio.ensure_future(self.process.wait())
        started: set[asyncio.Future[Any]] = {self._ready, exited}
        done, _ = await asyncio.wait(started, timeout=self.ready_timeout_s,
                                     return_when=asyncio.FIRST_COMPLETED)
        if self._ready in done:
            exited.cancel()
            self.facts, self.error = self._ready.result(), ""
            return
        if exited in done:
            raise RuntimeError(f"{self.role} scheduler exited with code {exited.result()} while starting"
                               + (f": {self._death}" if self._death else ""))
        exited.cancel()
        self.process.kill()
        raise RuntimeError(f"{self.role} scheduler not ready after {self.ready_timeout_s} s ({self.progress})")

    async def _supervise(self) -> None:
        """Fail everything live when the scheduler dies, then start a new one."""
        while not self._stopping:
            assert self.process is not None
            code = await self.process.wait()
            if self._stopping:
                return
            self.error = f"scheduler process exited with code {code}" + (f": {self._death}" if self._death else "")
            log.error("%s %s; restarting it in %s s", self.role, self.error, self.restart_delay_s)
            self._fail_live(self.error)
            await asyncio.sleep(self.restart_delay_s)
            try:
                await self._launch()
            except RuntimeError as exc:
                self.error = str(exc)
                log.error("%s", exc)
                continue
            self.counters = LoopCounters(restarts=self.counters.restarts + 1)
            log.warning("%s scheduler restarted (pid %s)", self.role, self.process.pid)
            if self.on_restart is not None:
                await self.on_restart(self.facts)

    async def stop(self, timeout_s: float = 10.0) -> str:
        """Stop the scheduler (clean: it checks its invariants); returns that check's error.
        Calling it again returns at once."""
        if self._stopping:
            return ""
        self._stopping = True
        error = self.error if self.error != "starting" else ""
        if self.process is not None and self.process.returncode is None:
            self._stopped = asyncio.get_running_loop().create_future()
            self._send(["stop"])
            try:
                error = await asyncio.wait_for(self._stopped, timeout_s)
                await asyncio.wait_for(self.process.wait(), timeout_s)
            except asyncio.TimeoutError:
                error = error or f"scheduler did not stop within {timeout_s} s: killed"
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        for task in self._tasks:
            task.cancel()
        self._fail_live("instance stopping")
        self._events.close(linger=0)
        self._commands.close(linger=0)
        self._actx.term()
        self._ctx.term()
        self.paths.cleanup()
        return error

    # ---- requests ------------------------------------------------------------------------
    def submit(self, req: EngineRequest) -> asyncio.Queue[RequestOutput]:
        """Queue `req` for the engine; its outputs arrive on the returned queue."""
        if self.error:
            raise RuntimeError(f"{self.role} scheduler unavailable: {self.error}")
        if req.request_id in self._channels:
            raise ValueError(f"request_id {req.request_id} is already live on this instance")
        channel: asyncio.Queue[RequestOutput] = asyncio.Queue()
        self._channels[req.request_id] = channel
        try:
            self._send(["add", encode_request(req)])
        except RuntimeError:
            del self._channels[req.request_id]
            raise
        return channel

    def abort(self, request_id: int, reason: str) -> None:
        with contextlib.suppress(RuntimeError):
            self._send(["abort", request_id, reason])

    def fail_peer(self, addr: str, reason: str) -> None:
        with contextlib.suppress(RuntimeError):
            self._send(["fail_peer", addr, reason])

    def num_live(self) -> int:
        return len(self._channels)

    def _send(self, message: list[Any]) -> None:
        try:
            self._commands.send(pack(message), zmq.NOBLOCK)
        except zmq.Again:
            raise RuntimeError(f"{self.role} scheduler is not taking commands ({SEND_HWM} queued)") from None

    # ---- events --------------------------------------------------------------------------
    async def _read_events(self) -> None:
        while True:
            try:
                message = unpack(await self._events.recv())
                self._handle(message)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - a bad event must not stop the reader
                log.exception("%s: bad scheduler event", self.role)

    def _handle(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "batch":
            _, outputs, stats, steps, counters = message
            for out in outputs:
                self._deliver(decode_output(out))
            if stats is not None:
                self.stats = decode_stats(stats)
            self.steps.extend(decode_steps(steps))
            self.counters = replace(LoopCounters(*counters), restarts=self.counters.restarts)
        elif kind == "progress":
            self.progress = message[1]
        elif kind == "ready":
            self.stats = decode_stats(message[2])  # capacity known before the first step
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(message[1])
        elif kind == "died":
            self._death = message[1]
        elif kind == "stopped":
            if self._stopped is not None and not self._stopped.done():
                self._stopped.set_result(message[1])
        else:
            raise ValueError(f"scheduler event {kind!r} unknown")

    def _deliver(self, out: RequestOutput) -> None:
        channel = self._channels.pop(out.request_id) if out.finished else self._channels.get(out.request_id)
        if channel is None:
            log.debug("output for unknown request %d dropped", out.request_id)
            return
        channel.put_nowait(out)

    def _fail_live(self, reason: str) -> None:
        channels, self._channels = self._channels, {}
        for rid, channel in channels.items():
            row = trace_row(request_id=rid, status=STATUS_FAILED, failure_reason=reason, finish_s=math.nan)
            channel.put_nowait(RequestOutput(rid, (), True, STATUS_FAILED, reason, row))
