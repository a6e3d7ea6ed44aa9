"""Prefill and decode engines in their own processes, driven over a multiprocessing pipe.

The minimal multi-process harness used by `pdreal generate` and the Mooncake tests (the
serving layer replaces the pipe with HTTP). Messages to a worker: ("add", EngineRequest),
("abort", request_id, reason), ("stop",). From a worker: ("ready", bootstrap_addr),
("outputs", [RequestOutput]), ("stopped", EngineStats, invariant_error or "").
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import time
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

from pdreal.engine.common import EngineConfig, EngineRequest, EngineStats
from pdreal.engine.driver import RequestResult, collect
from pdreal.model.weights import ModelSource
from pdreal.transfer.common import TransferConfig

log = logging.getLogger(__name__)
IDLE_POLL_S = 0.001  # pipe wait when the engine has nothing to forward


def engine_worker(role: str, conn: Connection, source: ModelSource, config: EngineConfig,
                  transfer: TransferConfig, num_threads: int = 1) -> None:
    """Process entry point: build the engine, announce the bootstrap address, serve the pipe."""
    import torch

    from pdreal.engine.common import ModelRunner
    from pdreal.engine.decode import DecodeEngine
    from pdreal.engine.prefill import PrefillEngine
    from pdreal.model.weights import load_model
    from pdreal.transfer import make_kv_manager

    torch.set_num_threads(num_threads)
    runner = ModelRunner(load_model(source).model, config)
    kv = make_kv_manager(transfer, runner.pool)
    engine = (PrefillEngine if role == "prefill" else DecodeEngine)(runner, kv, config)
    conn.send(("ready", kv.bootstrap_addr))
    running = True
    while running:
        while conn.poll(0 if engine.ready_to_run() else IDLE_POLL_S):
            message = conn.recv()
            if message[0] == "add":
                engine.add_request(message[1])
            elif message[0] == "abort":
                engine.abort(message[1], message[2])
            else:
                running = False
                break
        outputs = engine.step()
        if outputs:
            conn.send(("outputs", outputs))
    error = ""
    try:
        engine.check_invariants()
    except AssertionError as exc:
        error = str(exc)
    kv.close()
    conn.send(("stopped", engine.stats(), error))


@dataclass
class Worker:
    role: str
    process: Any
    conn: Connection
    bootstrap_addr: str = ""

    def stop(self, timeout_s: float = 30.0) -> tuple[EngineStats | None, str]:
        """Stop the loop; returns (final stats, invariant error or '') or (None, why)."""
        try:
            self.conn.send(("stop",))
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and self.conn.poll(deadline - time.monotonic()):
                message = self.conn.recv()
                if message[0] == "stopped":
                    return message[1], message[2]
        except (EOFError, BrokenPipeError, OSError) as exc:
            return None, f"{self.role} worker gone: {exc}"
        finally:
            self.process.join(timeout=5.0)
            if self.process.is_alive():
                self.process.kill()
        return None, f"{self.role} worker did not stop within {timeout_s} s"


def spawn_worker(role: str, source: ModelSource, config: EngineConfig, transfer: TransferConfig) -> Worker:
    """Start the process; call `wait_ready` before dispatching (spawn both, then wait: they load in parallel)."""
    if role not in ("prefill", "decode"):
        raise ValueError(f"worker role {role!r} unknown; use 'prefill' or 'decode'")
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    process = ctx.Process(target=engine_worker, args=(role, child, source, config, transfer),
                          name=f"pdreal-{role}", daemon=True)
    process.start()
    return Worker(role, process, parent)


def wait_ready(worker: Worker, timeout_s: float = 120.0) -> Worker:
    if not worker.conn.poll(timeout_s):
        worker.process.kill()
        raise TimeoutError(f"{worker.role} worker not ready after {timeout_s} s")
    _, worker.bootstrap_addr = worker.conn.recv()
    return worker


def start_pair(source: ModelSource, prefill_config: EngineConfig, decode_config: EngineConfig,
               transfer: TransferConfig) -> tuple[Worker, Worker]:
    """A prefill and a decode worker, loading their models in parallel."""
    prefill = spawn_worker("prefill", source, prefill_config, transfer)
    decode = spawn_worker("decode", source, decode_config, transfer)
    return wait_ready(prefill), wait_ready(decode)


def dispatch(prefill: Worker, decode: Worker, requests: list[EngineRequest]) -> None:
    """Dual dispatch: each request to both workers, the decode copy with the bootstrap address."""
    for req in requests:
        prefill.conn.send(("add", req))
        decode.conn.send(("add", replace(req, bootstrap_addr=prefill.bootstrap_addr)))


def gather(prefill: Worker, decode: Worker, request_ids: list[int],
           timeout_s: float = 120.0) -> dict[int, RequestResult]:
    """Collect outputs until every request has both half-rows."""
    results = {i: RequestResult(i) for i in request_ids}
    deadline = time.monotonic() + timeout_s
    while not all(r.done for r in results.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(not r.done for r in results.values())} requests unfinished after {timeout_s} s")
        for worker in (prefill, decode):
            while worker.conn.poll(0.001):
                kind, *payload = worker.conn.recv()
                if kind == "outputs":
                    collect(results, payload[0], worker.role)
    return results
