"""The engine's step loop on its own thread, fed by the instance server's asyncio loop.

Only the loop thread touches the engine and its KV manager. The asyncio side sends commands
(add, abort, fail_peer) through a queue and receives each request's `RequestOutput`s on the
request's own asyncio.Queue (handed over with `call_soon_threadsafe`). After every step the
thread publishes a stats snapshot, which /stats and /metrics read without locking.

    submit(req) -> channel   the request enters the engine at the next iteration
    abort(id, reason)        fail it wherever it is (client gone, other half failed)
    fail_peer(addr, reason)  fail every room exchanged with a dead peer (heartbeat)
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from pdreal.engine.common import EngineRequest, EngineStats, RequestOutput, trace_row
from pdsim.trace import STATUS_FAILED, STATUS_REJECTED

log = logging.getLogger(__name__)
IDLE_WAIT_S = 0.05  # wait for a command when the engine has no work at all


class Engine(Protocol):
    kv: Any

    def add_request(self, req: EngineRequest) -> None: ...
    def step(self) -> list[RequestOutput]: ...
    def has_work(self) -> bool: ...
    def ready_to_run(self) -> bool: ...
    def abort(self, request_id: int, reason: str) -> Any: ...
    def stats(self) -> EngineStats: ...
    def check_invariants(self) -> None: ...


@dataclass(frozen=True)
class LoopCounters:
    steps: int = 0
    peers_failed: int = 0
    rooms_failed_by_heartbeat: int = 0


class EngineLoop:
    def __init__(self, engine: Engine, loop: asyncio.AbstractEventLoop, idle_sleep_s: float = 0.001) -> None:
        self.engine, self.loop, self.idle_sleep_s = engine, loop, idle_sleep_s
        self._commands: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._channels: dict[int, asyncio.Queue[RequestOutput]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self.stats: EngineStats = engine.stats()
        self.counters = LoopCounters()
        self.error = ""  # set when the loop died of an exception
        set_emitter = getattr(engine, "set_emitter", None)
        if set_emitter is not None:  # decode: first tokens leave before the step's forward
            set_emitter(self._deliver)

    def start(self) -> None:
        self._thread.start()

    def submit(self, req: EngineRequest) -> asyncio.Queue[RequestOutput]:
        """Queue `req` for the engine; its outputs arrive on the returned queue (asyncio side)."""
        if self.error:
            raise RuntimeError(f"engine loop stopped: {self.error}")
        channel: asyncio.Queue[RequestOutput] = asyncio.Queue()
        with self._lock:
            if req.request_id in self._channels:
                raise ValueError(f"request_id {req.request_id} is already live on this instance")
            self._channels[req.request_id] = channel
        self._commands.put(("add", req))
        return channel

    def abort(self, request_id: int, reason: str) -> None:
        self._commands.put(("abort", request_id, reason))

    def fail_peer(self, addr: str, reason: str) -> None:
        self._commands.put(("fail_peer", addr, reason))

    def num_live(self) -> int:
        with self._lock:
            return len(self._channels)

    def stop(self, timeout_s: float = 10.0) -> str:
        """Stop the thread; returns the invariant-check error ('' when clean)."""
        self._stop.set()
        self._commands.put(("wake",))
        self._thread.join(timeout=timeout_s)
        try:
            self.engine.check_invariants()
        except AssertionError as exc:
            return str(exc)
        return self.error

    # ---- loop thread ---------------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._drain_commands()
                outputs = self.engine.step()
                self._deliver(outputs)
                self.stats = self.engine.stats()
                self.counters = LoopCounters(self.counters.steps + 1, self.counters.peers_failed,
                                             self.counters.rooms_failed_by_heartbeat)
        except Exception as exc:  # noqa: BLE001 - report to every waiting request, then stop
            log.exception("engine loop died")
            self.error = f"{type(exc).__name__}: {exc}"
            with self._lock:
                live = list(self._channels)
            self._deliver([_failed_output(rid, f"engine error: {self.error}", STATUS_FAILED) for rid in live])

    def _drain_commands(self) -> None:
        if self.engine.ready_to_run():
            wait_s = 0.0
        else:
            wait_s = self.idle_sleep_s if self.engine.has_work() else IDLE_WAIT_S
        try:
            command = self._commands.get(timeout=wait_s) if wait_s > 0 else self._commands.get_nowait()
        except queue.Empty:
            return
        while True:
            self._apply(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return

    def _apply(self, command: tuple[Any, ...]) -> None:
        kind = command[0]
        if kind == "add":
            req: EngineRequest = command[1]
            try:
                self.engine.add_request(req)
            except ValueError as exc:
                self._deliver([_failed_output(req.request_id, str(exc), STATUS_REJECTED)])
        elif kind == "abort":
            self.engine.abort(command[1], command[2])
        elif kind == "fail_peer":
            count = self.engine.kv.fail_peer(command[1], command[2])
            log.warning("peer %s failed (%s): %d transfer rooms failed", command[1], command[2], count)
            c = self.counters
            self.counters = LoopCounters(c.steps, c.peers_failed + 1, c.rooms_failed_by_heartbeat + count)

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            with self._lock:
                channel = self._channels.get(out.request_id)
                if out.finished:
                    self._channels.pop(out.request_id, None)
            if channel is None:
                log.debug("output for unknown request %d dropped", out.request_id)
                continue
            self.loop.call_soon_threadsafe(channel.put_nowait, out)


def _failed_output(request_id: int, reason: str, status: str) -> RequestOutput:
    row = trace_row(request_id=request_id, status=status, failure_reason=reason, finish_s=math.nan)
    return RequestOutput(request_id, (), True, status, reason, row)
