"""A tensor-parallel model runner: rank 0 in the engine's process, ranks 1..N-1 in processes it
spawns and owns, one gloo process group (torch.distributed) between them.

`TPModelRunner` is a `ModelRunner` to the engines: `forward`, `pool` (rank 0's pool: its page
allocator decides for every rank, since all ranks' pools have the same pages), `offload_kv` /
`reload_kv`, `steps`, `kv_manager`. Each call is sent to the other ranks over a pipe first
(SGLang broadcasts each batch to its TP workers the same way), then run on rank 0; inside the
forward the ranks meet in the all-reduces of the row-parallel layers (pdreal/model/tp.py) and
every rank computes the same logits. Each rank's pool holds its KV heads; an offload gathers the
slices into one host tensor of the whole pool's layout (the same as TP = 1's), a reload scatters it.

Rank processes, their pipe commands and their replies:

    ("forward", chunks, num_decodes)        run the same forward (no reply)
    ("offload", pages) -> host KV slice     ("reload", pages, slice)
    ("kv_start", TransferConfig) -> this rank's KV bootstrap address (its own manager)
    ("kv", method, args)  ("kv_poll", rooms)  ("kv_reason", room) -> reason  ("kv_close",)
    ("stop",)

A rank process exits when its pipe closes (its engine process is gone) or on `stop`.
"""

from __future__ import annotations

import datetime
import logging
import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any, cast

import torch
import torch.distributed as dist

from pdreal.engine.common import EngineConfig, ModelRunner
from pdreal.model.batch import SeqChunk
from pdreal.model.tp import check_tp, shard_model
from pdreal.model.weights import ModelSource, load_model
from pdreal.transfer import KVManager, LocalHub, TransferConfig, make_kv_manager
from pdreal.transfer.common import PagedKVManager
from pdreal.transfer.tp import RankRooms, TPKVManager

log = logging.getLogger(__name__)
HEAD_DIM_AXIS = 4  # of the pool buffer [layers, 2, pages, page_size, kv_heads, head_dim]


@dataclass(frozen=True)
class RankSetup:
    """What a rank process needs to build its shard and join the group."""

    rank: int
    tp_size: int
    store_port: int
    source: ModelSource
    config: EngineConfig
    threads: int
    timeout_s: float
    host: str = "127.0.0.1"


def _process_group(setup: RankSetup, store: dist.TCPStore | None = None) -> dist.ProcessGroup:
    timeout = datetime.timedelta(seconds=setup.timeout_s)
    if store is None:
        store = dist.TCPStore(setup.host, setup.store_port, setup.tp_size, False, timeout=timeout)
        store.set(f"alive/{setup.rank}", "1")  # rank 0 waits for these, watching the processes
    # torch's collectives take the Gloo backend as a group; its stubs type it as a Backend only
    return dist.ProcessGroupGloo(store, setup.rank, setup.tp_size, timeout)  # type: ignore[return-value]


def _await_ranks(store: dist.TCPStore, processes: list[Any], timeout_s: float) -> None:
    """Until every rank process reached the store; RuntimeError at once if one died first."""
    keys = [f"alive/{rank}" for rank in range(1, len(processes) + 1)]
    deadline = time.monotonic() + timeout_s
    while not store.check(keys):
        for rank, process in enumerate(processes, start=1):
            if not process.is_alive():
                raise RuntimeError(f"TP rank {rank} process exited with code {process.exitcode} before "
                                   "joining its group (its stderr says why)")
        if time.monotonic() > deadline:
            raise TimeoutError(f"TP rank processes did not join within {timeout_s} s")
        time.sleep(0.02)


def _all_reduce(group: dist.ProcessGroup, op: dist.ReduceOp.RedOpType) -> Callable[[torch.Tensor], torch.Tensor]:
    def reduce(values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values, op=op, group=group)
        return values
    return reduce


def _shard(setup: RankSetup, group: dist.ProcessGroup) -> ModelRunner:
    full = load_model(setup.source).model
    return ModelRunner(shard_model(full, setup.rank, setup.tp_size, _all_reduce(group, dist.ReduceOp.SUM)),
                       setup.config)


class RankWorker:
    """Ranks 1..N-1: apply rank 0's commands, in order, to this rank's shard, pool and manager."""

    def __init__(self, setup: RankSetup, runner: ModelRunner, group: dist.ProcessGroup, conn: Connection,
                 wake: Connection) -> None:
        self.setup, self.runner, self.group, self.conn, self.wake = setup, runner, group, conn, wake
        self.rooms: RankRooms | None = None
        self._wake_lock = threading.Lock()

    def serve(self) -> None:
        while True:
            try:
                command = self.conn.recv()
            except EOFError:  # rank 0 is gone
                break
            if command[0] == "stop":
                break
            try:
                self.handle(command)
            except Exception:  # noqa: BLE001 - rank 0 ran the same call and raised the same error
                log.exception("TP rank %d: command %r failed", self.setup.rank, command[0])
        self._close_kv()

    def handle(self, command: tuple[Any, ...]) -> None:
        kind = command[0]
        if kind == "forward":
            self.runner.forward(command[1], command[2])
        elif kind == "offload":
            self.conn.send(self.runner.offload_kv(command[1], 0))
        elif kind == "reload":
            self.runner.reload_kv(command[1], command[2])
        elif kind == "kv_start":
            self.conn.send(self._start_kv(command[1]))
        elif kind == "kv":
            self._rooms().apply(command[1], command[2])
        elif kind == "kv_poll":
            local = torch.tensor(self._rooms().polls(command[1]), dtype=torch.uint8)
            dist.all_reduce(local, op=dist.ReduceOp.MIN, group=self.group)
        elif kind == "kv_reason":
            self.conn.send(self._rooms().reason(command[1]))
        elif kind == "kv_close":
            self._close_kv()
        else:
            raise ValueError(f"TP rank {self.setup.rank}: command {kind!r} unknown")

    def _rooms(self) -> RankRooms:
        if self.rooms is None:
            raise RuntimeError(f"TP rank {self.setup.rank}: KV command before kv_start")
        return self.rooms

    def _start_kv(self, transfer: TransferConfig) -> str:
        config = replace(transfer, tp_rank=self.setup.rank, tp_size=self.setup.tp_size)
        manager = make_kv_manager(config, self.runner.pool)
        if not isinstance(manager, PagedKVManager):
            raise TypeError(f"TP rank {self.setup.rank}: backend {transfer.backend!r} has no paged KV manager")
        manager.wakeup = self._wake_rank0
        self.rooms = RankRooms(manager)
        return manager.bootstrap_addr

    def _wake_rank0(self) -> None:
        with self._wake_lock:  # the manager's worker and control threads both change states
            try:
                self.wake.send_bytes(b"w")
            except OSError:
                pass

    def _close_kv(self) -> None:
        if self.rooms is not None:
            self.rooms.manager.close()
            self.rooms = None


def rank_main(setup: RankSetup, conn: Connection, wake: Connection) -> None:
    """Entry point of rank processes 1..N-1."""
    torch.set_num_threads(setup.threads)
    group = _process_group(setup)
    RankWorker(setup, _shard(setup, group), group, conn, wake).serve()


class TPGroup:
    """Rank 0's end: the rank processes, their pipes, the process group (a `RankChannel`)."""

    def __init__(self, group: dist.ProcessGroup, conns: list[Connection], wakes: list[Connection],
                 processes: list[Any]) -> None:
        self.group, self.conns, self.wakes, self.processes = group, conns, wakes, processes
        self._wake: Callable[[], None] | None = None
        self._waker = threading.Thread(target=self._relay_wakes, name="tp-wake", daemon=True)
        self._waker.start()

    @classmethod
    def start(cls, source: ModelSource, config: EngineConfig, timeout_s: float = 300.0) -> TPGroup:
        """Spawn ranks 1..tp_size-1 and join the group as rank 0."""
        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore("127.0.0.1", 0, config.tp_size, True, timeout=timeout, wait_for_workers=False)
        setup = RankSetup(0, config.tp_size, store.port, source, config, torch.get_num_threads(), timeout_s)
        ctx = mp.get_context("spawn")
        conns, wakes, processes = [], [], []
        for rank in range(1, config.tp_size):
            ours, theirs = ctx.Pipe()
            wake_read, wake_write = ctx.Pipe(duplex=False)
            process = ctx.Process(target=rank_main, args=(replace(setup, rank=rank), theirs, wake_write),
                                  name=f"pdreal-tp-rank{rank}", daemon=True)
            process.start()
            theirs.close()
            wake_write.close()
            conns.append(ours)
            wakes.append(wake_read)
            processes.append(process)
        try:
            _await_ranks(store, processes, timeout_s)
        except Exception:
            for process in processes:
                process.terminate()
            raise
        return cls(_process_group(setup, store), conns, wakes, processes)

    def post(self, command: tuple[Any, ...]) -> None:
        for conn in self.conns:
            conn.send(command)

    def replies(self) -> list[Any]:
        return [conn.recv() for conn in self.conns]

    def call(self, command: tuple[Any, ...]) -> list[Any]:
        self.post(command)
        return self.replies()

    def all_reduce_min(self, values: torch.Tensor) -> torch.Tensor:
        return _all_reduce(self.group, dist.ReduceOp.MIN)(values)

    def set_wake(self, wake: Callable[[], None] | None) -> None:
        self._wake = wake

    def _relay_wakes(self) -> None:
        live = list(self.wakes)
        while live:
            for conn in cast(list[Connection], wait(live)):  # (some of the connections given)
                try:
                    conn.recv_bytes()
                except (EOFError, OSError):
                    live.remove(conn)
                    continue
                wake = self._wake
                if wake is not None:
                    wake()

    def stop(self, timeout_s: float = 10.0) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop",))
            except OSError:
                pass
        for process in self.processes:
            process.join(timeout_s)
            if process.is_alive():
                process.terminate()
                process.join(timeout_s)


class TPModelRunner(ModelRunner):
    """The ModelRunner of a TP instance (rank 0's shard; the other ranks follow each call)."""

    def __init__(self, source: ModelSource, config: EngineConfig) -> None:
        full = load_model(source).model
        check_tp(full.spec, config.tp_size)
        self.tp = TPGroup.start(source, config)
        super().__init__(shard_model(full, 0, config.tp_size, _all_reduce(self.tp.group, dist.ReduceOp.SUM)),
                         config)

    def forward_logits(self, chunks: list[SeqChunk], num_decodes: int | None = None
                       ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        self.tp.post(("forward", chunks, num_decodes))
        return super().forward_logits(chunks, num_decodes)

    def offload_kv(self, pages: list[int], num_tokens: int) -> torch.Tensor:
        """Every rank's head slice of the pages, joined into one host tensor of the whole pool's
        layout (heads in rank order)."""
        self.tp.post(("offload", pages))
        local = super().offload_kv(pages, num_tokens)
        return torch.cat([local, *self.tp.replies()], dim=HEAD_DIM_AXIS)

    def reload_kv(self, pages: list[int], host_kv: torch.Tensor) -> None:
        slices = torch.chunk(host_kv, self.config.tp_size, dim=HEAD_DIM_AXIS)
        for conn, part in zip(self.tp.conns, slices[1:], strict=True):
            conn.send(("reload", pages, part.contiguous()))
        super().reload_kv(pages, slices[0].contiguous())

    def kv_manager(self, transfer: TransferConfig, hub: LocalHub | None = None) -> KVManager:
        """One manager per rank over its pool; the engine gets their TP view (transfer/tp.py)."""
        if transfer.backend == "fake":
            return make_kv_manager(transfer, self.pool)
        if transfer.backend != "mooncake":
            raise ValueError(f"transfer backend {transfer.backend!r} cannot reach TP rank processes; "
                             "use mooncake (or fake)")
        config = replace(transfer, tp_rank=0, tp_size=self.config.tp_size)
        local = make_kv_manager(config, self.pool, hub)
        assert isinstance(local, PagedKVManager)
        return TPKVManager(local, self.tp, [local.bootstrap_addr, *self.tp.call(("kv_start", transfer))])

    def close(self) -> None:
        self.tp.stop()


def make_runner(source: ModelSource, config: EngineConfig) -> ModelRunner:
    """The runner of `config.tp_size` ranks: a plain ModelRunner for 1, else a TPModelRunner."""
    if config.tp_size == 1:
        return ModelRunner(load_model(source).model, config)
    return TPModelRunner(source, config)
