"""Shared machinery of the data-moving backends (mooncake, local): rooms, states, the worker.

`PagedKVManager` keeps one table of sender rooms (prefill side) and one of receiver rooms
(decode side), runs chunk sends on one background worker thread, applies the timeouts, and
leaves four hooks to a backend: `_connect` / `_send_transfer_info` (decode -> prefill control
messages, engine thread), `_write` (data plane, worker thread) and `_notify` (prefill -> decode
status with the aux data, worker thread). Chunk k's source pages go to the next pages of the
destination list, so chunked prefill needs no extra bookkeeping on the decode side.

Tensor parallelism (slices.py): a manager serves one TP rank (`TransferConfig.tp_rank`,
`tp_size`) whose pool holds that rank's KV heads. A TP prefill instance's bootstrap address lists
its ranks' addresses, comma-separated, in rank order; each decode rank sends its transfer info to
the prefill ranks holding its heads (`source_ranks`) and waits for a status from each; a prefill
rank waits for the info of every decode rank it owes heads (`dest_count`), writes each its
overlap (whole pages when the head ranges are equal, head slices otherwise: `_write_slice`) and
notifies each. The instance-level state is the MIN of its ranks' polls (pdreal/transfer/tp.py).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from pdreal.kv.allocator import PageRun, coalesce_runs
from pdreal.kv.pool import KVLayout, KVPool
from pdreal.transfer.base import (
    KVManager,
    KVPoll,
    KVReceiver,
    KVSender,
    KVTransferError,
    PollState,
    TransferAux,
)
from pdreal.transfer.slices import HeadSlice, dest_count, overlap, slice_compatible, source_ranks
from pdsim.policy.kvpoll import TERMINAL

log = logging.getLogger(__name__)
TimeSource = Callable[[], float]  # the time now in seconds: time.monotonic, or a test's virtual time


@dataclass(frozen=True)
class TransferConfig:
    backend: str = "local"  # mooncake | local | fake
    host: str = "127.0.0.1"
    protocol: str = "tcp"  # mooncake: tcp | rdma
    device_name: str = ""  # mooncake RDMA device (empty: auto)
    # prefill: max wait for the decode side's pre-allocation (decode memory pressure waits here)
    bootstrap_timeout_s: float = 300.0
    transfer_timeout_s: float = 600.0  # decode: max wait from receiver creation to Success
    coalesce: bool = True  # False: one entry per page (for measuring the benefit)
    token: str = ""  # control-plane secret carried by every control message (mooncake); '' = none
    tp_rank: int = 0  # the tensor-parallel rank whose pool (KV-head slice) this manager moves
    tp_size: int = 1


@dataclass(frozen=True)
class PeerInfo:
    """What a decode manager tells the prefill side: where to write and whom to notify."""

    peer_id: str  # control address of the decode manager (status messages go there)
    session: str  # data-plane target (mooncake "host:rpc_port"; local: the hub name)
    base_ptr: int
    layout: KVLayout
    tp_rank: int = 0  # which KV heads the pool holds: slices.rank_heads(total, tp_rank, tp_size)
    tp_size: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "layout": asdict(self.layout)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PeerInfo:
        return cls(**{**data, "layout": KVLayout(**data["layout"])})


@dataclass
class _SenderRoom:
    state: PollState
    created_s: float
    peers: list[PeerInfo] = field(default_factory=list)  # the decode ranks owed heads, as they asked
    dst_pages: list[int] = field(default_factory=list)
    dst_offset: int = 0
    first_send_s: float = math.nan
    bytes_sent: dict[str, int] = field(default_factory=dict)  # by peer_id (each decode rank its own)


@dataclass
class _ReceiverRoom:
    state: PollState
    created_s: float
    addr: str
    aux: TransferAux | None = None
    targets: list[str] = field(default_factory=list)  # the prefill ranks holding this rank's heads
    pending: int = 0  # statuses still expected (one per target)


_Job = tuple[int, _SenderRoom, list[int], TransferAux | None, str]


class PagedKVManager(KVManager):
    def __init__(self, config: TransferConfig, pool: KVPool, now_s: TimeSource = time.monotonic) -> None:
        self.config, self.pool, self.now_s = config, pool, now_s
        self._senders: dict[int, _SenderRoom] = {}
        self._receivers: dict[int, _ReceiverRoom] = {}
        self._early_info: dict[int, list[tuple[PeerInfo, list[int]]]] = {}
        self._status_lock = threading.Lock()  # infos / statuses of several ranks may race
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self.wakeup: Callable[[], None] | None = None  # called after any room's state changes
        self._worker = threading.Thread(target=self._work, name=f"kv-{self.backend}-worker", daemon=True)
        self._worker.start()

    # ---- hooks -------------------------------------------------------------------------
    @abstractmethod
    def local_peer(self) -> PeerInfo: ...

    @abstractmethod
    def _connect(self, addr: str) -> None: ...

    @abstractmethod
    def _send_transfer_info(self, addr: str, room: int, pages: list[int]) -> None: ...

    @abstractmethod
    def _write(self, peer: PeerInfo, runs: list[PageRun]) -> int: ...

    @abstractmethod
    def _notify(self, peer: PeerInfo, room: int, aux: TransferAux | None, reason: str) -> None: ...

    def _write_slice(self, peer: PeerInfo, runs: list[PageRun], heads: HeadSlice) -> int:
        """Write `heads` of `runs` into a peer of another TP size (data plane, worker thread)."""
        raise KVTransferError(f"the {self.backend} backend cannot move KV head slices "
                              f"(TP {self.config.tp_size} -> TP {peer.tp_size})")

    @property
    def total_kv_heads(self) -> int:
        """The model's KV heads (this rank's pool holds 1 / tp_size of them)."""
        return self.pool.layout.num_kv_heads * self.config.tp_size

    def _changed(self) -> None:
        wakeup = self.wakeup
        if wakeup is not None:
            wakeup()

    # ---- prefill side --------------------------------------------------------------------
    def create_sender(self, room: int) -> KVSender:
        if room in self._senders:
            raise ValueError(f"bootstrap_room {room} already has a sender")
        self._senders[room] = _SenderRoom(PollState(on_change=self._changed), self.now_s())
        for early in self._early_info.pop(room, []):
            self.on_transfer_info(room, *early)
        return _Sender(self, room)

    def on_transfer_info(self, room: int, peer: PeerInfo, pages: list[int]) -> None:
        """The decode side pre-allocated `pages` for `room` (any thread)."""
        r = self._senders.get(room)
        if r is None:
            self._early_info.setdefault(room, []).append((peer, pages))
            return
        problem = slice_compatible(self.pool.layout, self.config.tp_size, peer.layout, peer.tp_size)
        if not problem and r.peers and list(pages) != r.dst_pages:
            problem = f"room {room}: decode rank {peer.tp_rank} sent other pages than rank {r.peers[0].tp_rank}"
        if problem:
            r.state.fail(problem)
            return
        with self._status_lock:
            r.peers.append(peer)
            r.dst_pages = list(pages)
            ready = len(r.peers) >= dest_count(self.total_kv_heads, self.config.tp_rank, self.config.tp_size,
                                               peer.tp_size)
        if ready:
            r.state.advance(KVPoll.WaitingForInput)

    def _sender_poll(self, room: int) -> KVPoll:
        r = self._senders[room]
        if r.state.get() == KVPoll.Bootstrapping and self.now_s() - r.created_s > self.config.bootstrap_timeout_s:
            r.state.fail(f"bootstrap timeout after {self.config.bootstrap_timeout_s} s")
        return r.state.get()

    def _enqueue(self, room: int, pages: list[int], aux: TransferAux | None, abort: str = "") -> None:
        r = self._senders[room]
        if not abort:
            if r.state.get() < KVPoll.WaitingForInput:
                raise KVTransferError(f"room {room}: send() in state {r.state.get().name}")
            r.state.advance(KVPoll.Transferring)
        self._jobs.put((room, r, list(pages), aux, abort))

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            room, r, pages, aux, abort = job
            try:
                if abort:
                    raise KVTransferError(abort)
                self._run_chunk(room, r, pages, aux)
            except Exception as exc:  # noqa: BLE001 - any failure fails the room, never the thread
                reason = str(exc) or type(exc).__name__
                log.warning("room %d: transfer failed: %s", room, reason)
                r.state.fail(reason)
                for peer in r.peers:
                    self._try_notify(peer, room, reason)
            finally:
                self._jobs.task_done()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until every queued transfer job has run (True) or timeout_s passed (False):
        a deterministic test or a graceful shutdown drains the worker this way."""
        with self._jobs.all_tasks_done:
            return self._jobs.all_tasks_done.wait_for(lambda: self._jobs.unfinished_tasks == 0, timeout_s)

    def _run_chunk(self, room: int, r: _SenderRoom, pages: list[int], aux: TransferAux | None) -> None:
        if r.state.get() in TERMINAL or not r.peers:
            raise KVTransferError(r.state.reason or f"room {room}: no destination")
        dst = r.dst_pages[r.dst_offset:r.dst_offset + len(pages)]
        if len(dst) != len(pages):
            raise KVTransferError(f"room {room}: {len(pages)} pages at offset {r.dst_offset} overflow "
                                  f"{len(r.dst_pages)} destination pages")
        r.dst_offset += len(pages)
        if math.isnan(r.first_send_s):
            r.first_send_s = self.now_s()
        if pages:
            runs = coalesce_runs(pages, dst) if self.config.coalesce else [
                PageRun(s, d, 1) for s, d in zip(pages, dst, strict=True)]
            for peer in r.peers:
                r.bytes_sent[peer.peer_id] = r.bytes_sent.get(peer.peer_id, 0) + self._write_peer(peer, runs)
        if aux is not None:
            end_s = self.now_s()
            for peer in r.peers:
                final = replace(aux, transfer_start_s=r.first_send_s, transfer_end_s=end_s,
                                transfer_bytes=r.bytes_sent.get(peer.peer_id, 0))
                self._notify(peer, room, final, "")
            r.state.advance(KVPoll.Success)

    def _write_peer(self, peer: PeerInfo, runs: list[PageRun]) -> int:
        """This rank's heads that `peer` holds: whole pages when both hold the same heads."""
        c, local = self.config, self.pool.layout.num_kv_heads
        heads = overlap(self.total_kv_heads, c.tp_rank, c.tp_size, peer.tp_rank, peer.tp_size)
        if heads is None:
            raise KVTransferError(f"TP rank {c.tp_rank}/{c.tp_size} holds no heads of peer rank "
                                  f"{peer.tp_rank}/{peer.tp_size}")
        if heads.num_heads == local == peer.layout.num_kv_heads:
            return self._write(peer, runs)
        return self._write_slice(peer, runs, heads)

    def _try_notify(self, peer: PeerInfo, room: int, reason: str) -> None:
        try:
            self._notify(peer, room, None, reason)
        except Exception as exc:  # noqa: BLE001 - the peer may be gone; the room is failed anyway
            log.debug("room %d: failure notice not delivered: %s", room, exc)

    # ---- decode side ---------------------------------------------------------------------
    def create_receiver(self, bootstrap_addr: str, room: int) -> KVReceiver:
        if room in self._receivers:
            raise ValueError(f"bootstrap_room {room} already has a receiver")
        r = _ReceiverRoom(PollState(on_change=self._changed), self.now_s(), bootstrap_addr)
        self._receivers[room] = r
        try:
            r.targets = self._targets(bootstrap_addr)
            r.pending = len(r.targets)
            for target in r.targets:
                self._connect(target)
            r.state.advance(KVPoll.WaitingForInput)
        except Exception as exc:  # noqa: BLE001 - unreachable peer fails the request only
            r.state.fail(f"cannot reach prefill at {bootstrap_addr!r}: {exc}")
        return _Receiver(self, room)

    def _targets(self, bootstrap_addr: str) -> list[str]:
        """The prefill ranks' addresses (of a comma-separated list, one per rank) this rank reads."""
        ranks = bootstrap_addr.split(",")
        c = self.config
        return [ranks[i] for i in source_ranks(self.total_kv_heads, c.tp_rank, c.tp_size, len(ranks))]

    def _receiver_init(self, room: int, pages: list[int]) -> None:
        r = self._receivers[room]
        if r.state.get() != KVPoll.WaitingForInput:
            raise KVTransferError(f"room {room}: init() in state {r.state.get().name}")
        try:
            for target in r.targets:
                self._send_transfer_info(target, room, list(pages))
            r.state.advance(KVPoll.Transferring)
        except Exception as exc:  # noqa: BLE001
            r.state.fail(f"transfer info to {r.addr!r} not sent: {exc}")

    def on_status(self, room: int, aux: TransferAux | None, reason: str) -> None:
        """The prefill side finished `room` (aux) or failed it (reason); any thread."""
        r = self._receivers.get(room)
        if r is None:
            return
        if aux is not None:
            with self._status_lock:
                r.aux = aux if r.aux is None else replace(
                    r.aux, transfer_start_s=min(r.aux.transfer_start_s, aux.transfer_start_s),
                    transfer_end_s=max(r.aux.transfer_end_s, aux.transfer_end_s),
                    transfer_bytes=r.aux.transfer_bytes + aux.transfer_bytes)
                r.pending -= 1
                done = r.pending <= 0
            if done:
                r.state.advance(KVPoll.Success)
        else:
            r.state.fail(f"prefill side failed: {reason}")

    def _receiver_poll(self, room: int) -> KVPoll:
        r = self._receivers[room]
        if r.state.get() not in TERMINAL and self.now_s() - r.created_s > self.config.transfer_timeout_s:
            r.state.fail(f"transfer timeout after {self.config.transfer_timeout_s} s")
        return r.state.get()

    # ---- both ----------------------------------------------------------------------------
    def fail_peer(self, peer: str, reason: str) -> int:
        count = 0
        for s in list(self._senders.values()):
            if any(peer in (p.peer_id, p.session) for p in s.peers):
                count += s.state.fail(reason)
        for r in list(self._receivers.values()):
            if r.addr == peer or peer in r.targets:
                count += r.state.fail(reason)
        return count

    def num_rooms(self) -> int:
        return len(self._senders) + len(self._receivers)

    def close(self) -> None:
        self._jobs.put(None)
        self._worker.join(timeout=5.0)


class _Sender(KVSender):
    def __init__(self, manager: PagedKVManager, room: int) -> None:
        self.manager, self.room = manager, room

    def poll(self) -> KVPoll:
        return self.manager._sender_poll(self.room)

    def send(self, pages: list[int], aux: TransferAux | None = None) -> None:
        self.manager._enqueue(self.room, pages, aux)

    def abort(self, reason: str) -> None:
        r = self.manager._senders[self.room]
        if r.state.get() not in TERMINAL:
            self.manager._enqueue(self.room, [], None, abort=reason)
            r.state.fail(reason)

    @property
    def failure_reason(self) -> str:
        return self.manager._senders[self.room].state.reason

    def close(self) -> None:
        self.manager._senders.pop(self.room, None)


class _Receiver(KVReceiver):
    def __init__(self, manager: PagedKVManager, room: int) -> None:
        self.manager, self.room = manager, room

    def poll(self) -> KVPoll:
        return self.manager._receiver_poll(self.room)

    def init(self, pages: list[int]) -> None:
        self.manager._receiver_init(self.room, pages)

    def aux(self) -> TransferAux | None:
        return self.manager._receivers[self.room].aux

    def abort(self, reason: str) -> None:
        self.manager._receivers[self.room].state.fail(reason)

    @property
    def failure_reason(self) -> str:
        return self.manager._receivers[self.room].state.reason

    def close(self) -> None:
        self.manager._receivers.pop(self.room, None)
