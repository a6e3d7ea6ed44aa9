"""An instance's scheduler process: the engine loop (batch formation on pdsim.policy, forwards,
KV-transfer polling) alone in its process, as SGLang's Scheduler is (seed 002).

    python -m pdreal.serving.scheduler --config <serve YAML> --role prefill|decode|colocated --ipc <folder>

It connects to the two ipc:// pipes its instance's HTTP process bound (ipc.py), reports progress
while it loads the model and starts the transfer engine, sends `ready` with the engine's facts,
then loops: wait for a command or a KV state change (never spinning), apply commands, run one
engine step, send one `batch` event (outputs, stats when they changed, new step records). It
never touches HTTP; the HTTP process never touches the engine. On `stop` (or when its parent is
gone) it checks the engine's invariants, closes the transfer engine and says `stopped`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from typing import Any

import zmq

from pdreal.serving.ipc import (
    decode_request,
    encode_output,
    encode_stats,
    encode_steps,
    pack,
    unpack,
)
from pdreal.serving.node import build_engine

log = logging.getLogger("pdreal.scheduler")
IDLE_WAIT_S = 1.0  # nothing to do at all: wait this long for a command (parent checks in between)
SEND_SLICE_MS = 500  # an event send blocked this long checks that the HTTP process still lives


class Waker:
    """A socketpair the transfer threads write a byte to when a room's state changes; the loop
    polls its read end next to the command socket."""

    def __init__(self) -> None:
        self._read, self._write = socket.socketpair()
        self._read.setblocking(False)
        self._write.setblocking(False)

    def fileno(self) -> int:
        return self._read.fileno()

    def wake(self) -> None:
        try:
            self._write.send(b"\0")
        except (BlockingIOError, OSError):  # already full of wake-ups (or closing): enough
            pass

    def drain(self) -> None:
        try:
            while self._read.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        self._read.close()
        self._write.close()


class ParentGone(Exception):
    """The HTTP process that started this scheduler is gone: stop."""


def send(events: zmq.Socket, data: bytes, parent_pid: int) -> None:
    """Send on the event pipe (its SNDTIMEO set to SEND_SLICE_MS): a PUSH socket with no peer
    blocks for good, so between slices check that the HTTP process (the only peer) still lives."""
    while True:
        try:
            events.send(data)
            return
        except zmq.Again:
            if os.getppid() != parent_pid:
                raise ParentGone(f"HTTP process {parent_pid} gone") from None


class EventPublisher:
    """Sends one `batch` event per call: outputs, the stats if they changed, forwards not yet
    reported, counters. Also what `pdreal profile` times as the IPC cost of a served step."""

    def __init__(self, engine: Any, events: zmq.Socket, parent_pid: int | None = None) -> None:
        self.engine, self.events = engine, events
        self.parent_pid = os.getppid() if parent_pid is None else parent_pid
        self.steps = self.peers_failed = self.rooms_failed = 0
        self._last_stats: Any = None
        self._last_step_end_s = -1.0

    def publish(self, outputs: list[Any]) -> None:
        stats = self.engine.stats()
        stats_changed = stats != self._last_stats
        records = self._new_steps()
        if not outputs and not stats_changed and not records:
            return
        self._last_stats = stats
        kv = getattr(self.engine, "kv", None)
        counters = [self.steps, self.peers_failed, self.rooms_failed, kv.num_rooms() if kv is not None else 0]
        send(self.events, pack(["batch", [encode_output(o) for o in outputs],
                                    encode_stats(stats) if stats_changed else None, encode_steps(records), counters]),
             self.parent_pid)

    def _new_steps(self) -> list[Any]:
        runner = getattr(self.engine, "runner", None)
        if runner is None or not runner.steps or runner.steps[-1].end_s <= self._last_step_end_s:
            return []
        new = []
        for record in reversed(runner.steps):
            if record.end_s <= self._last_step_end_s:
                break
            new.append(record)
        self._last_step_end_s = runner.steps[-1].end_s
        return new[::-1]


class SchedulerLoop:
    """One engine, its command pipe and its event pipe; `run` until stopped."""

    def __init__(self, engine: Any, events: zmq.Socket, poll_interval_s: float, parent_pid: int | None = None) -> None:
        self.engine, self.poll_interval_s = engine, poll_interval_s
        self.out = EventPublisher(engine, events, parent_pid)
        self._stop = False
        set_emitter = getattr(engine, "set_emitter", None)
        if set_emitter is not None:  # decode: first tokens leave before the step's forward
            set_emitter(self.out.publish)

    def wait_s(self) -> float:
        if self.engine.ready_to_run():
            return 0.0
        return self.poll_interval_s if self.engine.has_work() else IDLE_WAIT_S

    def apply(self, message: list[Any]) -> None:
        kind = message[0]
        if kind == "add":
            req = decode_request(message[1])
            try:
                self.engine.add_request(req)
            except ValueError as exc:
                self.out.publish([_failed(req.request_id, str(exc), "rejected")])
        elif kind == "abort":
            self.engine.abort(int(message[1]), str(message[2]))
        elif kind == "fail_peer":
            count = self.engine.kv.fail_peer(message[1], message[2])
            log.warning("peer %s failed (%s): %d transfer rooms failed", message[1], message[2], count)
            self.out.peers_failed, self.out.rooms_failed = self.out.peers_failed + 1, self.out.rooms_failed + count
        elif kind == "stop":
            self._stop = True
        else:
            raise ValueError(f"scheduler command {kind!r} unknown")

    def step(self) -> None:
        outputs = self.engine.step()
        self.out.steps += 1
        self.out.publish(outputs)

    def run(self, commands: zmq.Socket, waker: Waker) -> None:
        poller = zmq.Poller()
        poller.register(commands, zmq.POLLIN)
        poller.register(waker.fileno(), zmq.POLLIN)
        while not self._stop:
            ready = dict(poller.poll(int(1000 * self.wait_s())))
            if waker.fileno() in ready:
                waker.drain()
            while not self._stop and commands.poll(0):
                self.apply(unpack(commands.recv()))
            if self._stop or os.getppid() != self.out.parent_pid:
                break
            self.step()


def _failed(request_id: int, reason: str, status: str) -> Any:
    import math

    from pdreal.engine.types import RequestOutput, trace_row

    row = trace_row(request_id=request_id, status=status, failure_reason=reason, finish_s=math.nan)
    return RequestOutput(request_id, (), True, status, reason, row)


def serve(cfg: Any, role: str, commands_addr: str, events_addr: str) -> int:
    """Connect, build, announce, loop, check, close. Returns the exit code."""
    ctx = zmq.Context()
    events = ctx.socket(zmq.PUSH)
    events.setsockopt(zmq.SNDTIMEO, SEND_SLICE_MS)
    events.connect(events_addr)
    commands = ctx.socket(zmq.PULL)
    commands.connect(commands_addr)
    parent_pid, started = os.getppid(), time.perf_counter()

    def progress(text: str) -> None:
        log.info("%s scheduler: %s", role, text)
        send(events, pack(["progress", text]), parent_pid)

    engine = closer = None
    error, code = "", 0
    try:
        engine, facts, closer = build_engine(cfg, role, progress)
        waker = Waker()
        if engine.kv is not None:
            engine.kv.wakeup = waker.wake
        facts["scheduler_start_s"] = time.perf_counter() - started
        loop = SchedulerLoop(engine, events, cfg.node.poll_interval_s, parent_pid)
        send(events, pack(["ready", facts, encode_stats(engine.stats())]), parent_pid)  # stats before any step
        loop.run(commands, waker)
        error = _invariant_error(engine)
    except ParentGone as exc:
        log.warning("%s scheduler: %s; stopping", role, exc)
    except Exception as exc:  # noqa: BLE001 - the HTTP process fails live requests with this reason
        log.exception("%s scheduler died", role)
        error, code = f"{type(exc).__name__}: {exc}", 1
    finally:
        if closer is not None:
            closer.close()
        if engine is not None and engine.kv is not None:
            engine.kv.close()
    with contextlib.suppress(zmq.Again):  # the last word; nobody may be listening any more
        events.send(pack(["died" if code else "stopped", error]))
    events.close(linger=SEND_SLICE_MS)
    commands.close(linger=0)
    ctx.term()
    return code


def _invariant_error(engine: Any) -> str:
    try:
        engine.check_invariants()
    except AssertionError as exc:
        return str(exc)
    return ""


def main(argv: list[str] | None = None) -> int:
    from pdreal.serving.config import load_serve_config

    parser = argparse.ArgumentParser(prog="pdreal.serving.scheduler", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="serve YAML (as `pdreal serve --config`)")
    parser.add_argument("--role", required=True, choices=("prefill", "decode", "colocated"))
    parser.add_argument("--commands", required=True, help="ipc:// address of the command pipe")
    parser.add_argument("--events", required=True, help="ipc:// address of the event pipe")
    args = parser.parse_args(argv)
    # Ctrl-C, or a SIGTERM sent to the whole process group, reaches the HTTP process too, which
    # stops us cleanly (the `stop` command); dying of the signal would look like a crash to it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return serve(load_serve_config(args.config), args.role, args.commands, args.events)


if __name__ == "__main__":
    exit_code = main()
    logging.shutdown()
    sys.stderr.flush()
    # everything is closed and the last word sent: skip the interpreter's teardown of torch and the
    # transfer engine (about a second), so an instance stops within its shutdown budget
    os._exit(exit_code)
