"""`mooncake` backend: KV pages written with Mooncake's TransferEngine, control over ZMQ.

Both sides register their whole pool once (`register_memory`). The engine runs in
P2PHANDSHAKE mode (no metadata server): a peer's session name is `host:rpc_port`. Control
messages are msgpack over ZMQ PUSH/PULL and carry page indices only:

    decode -> prefill  {"kind": "info", "room", "peer": PeerInfo, "pages": [...], "token"}
    prefill -> decode  {"kind": "status", "room", "aux": TransferAux | None, "reason", "token"}

Every message carries the control-plane token (TransferConfig.token, node.token_file); a message
with another token is dropped and logged, so no one who can reach the PULL socket can point a
prefill's KV writes elsewhere or fail a room.

A prefill manager's bootstrap address is its ZMQ `host:port` (the HTTP bootstrap server of
the serving layer maps instances to it). Each chunk is written with `batch_transfer_sync_write`
calls of at most MAX_BATCH_ENTRIES coalesced runs (2 x layers entries per run) on the worker thread; a non-zero return code
(e.g. -1 at once for a dead peer) fails the room. Sockets are used by one thread each: the
engine thread's PUSH sockets send transfer info, the worker's send status, the control
thread owns the PULL socket.
"""

from __future__ import annotations

import hmac
import logging
import os
import threading
import time
from typing import Any

from pdreal.kv.allocator import PageRun
from pdreal.kv.pool import KVPool, transfer_entries
from pdreal.transfer.base import KVTransferError, TransferAux
from pdreal.transfer.common import PagedKVManager, PeerInfo, TimeSource, TransferConfig
from pdreal.transfer.slices import HeadSlice, slice_entries

log = logging.getLogger(__name__)
POLL_MS = 50
MAX_BATCH_ENTRIES = 2048  # one batch_transfer_sync_write with 4096 entries returns -1 (0.3.13)


def _check_addr(addr: str) -> str:
    host, sep, port = addr.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"bootstrap address {addr!r} is not host:port")
    return f"tcp://{addr}"


class MooncakeKVManager(PagedKVManager):
    backend = "mooncake"

    def __init__(self, config: TransferConfig, pool: KVPool, now_s: TimeSource = time.monotonic) -> None:
        os.environ.setdefault("MC_LOG_LEVEL", "ERROR")
        # Mooncake's documented bind knob; 0.3.13 still listens on every interface whatever it
        # says (docs/PDREAL.md, "Network exposure", gives the firewall rule)
        os.environ.setdefault("MC_TCP_BIND_ADDRESS", config.host)
        import msgpack
        import zmq
        from mooncake.engine import TransferEngine

        self._zmq, self._msgpack = zmq, msgpack
        self._engine = TransferEngine()
        rc = self._engine.initialize(config.host, "P2PHANDSHAKE", config.protocol, config.device_name)
        if rc != 0:
            raise RuntimeError(f"mooncake initialize({config.host!r}, {config.protocol!r}) returned {rc}")
        self._session = f"{config.host}:{self._engine.get_rpc_port()}"
        rc = self._engine.register_memory(pool.data_ptr, pool.nbytes)
        if rc != 0:
            raise RuntimeError(f"mooncake register_memory of {pool.nbytes} bytes returned {rc}")
        self._ctx = zmq.Context()
        self._pull = self._ctx.socket(zmq.PULL)
        port = self._pull.bind_to_random_port(f"tcp://{config.host}")
        self._endpoint = f"{config.host}:{port}"
        self._engine_push: dict[str, Any] = {}  # used by the engine thread only
        self._worker_push: dict[str, Any] = {}  # used by the worker thread only
        self._stop = threading.Event()
        self._control = threading.Thread(target=self._listen, name="kv-mooncake-control", daemon=True)
        super().__init__(config, pool, now_s)
        self._control.start()
        log.info("mooncake KV manager: session %s, control %s, %d bytes registered",
                 self._session, self._endpoint, pool.nbytes)

    @property
    def bootstrap_addr(self) -> str:
        return self._endpoint

    def local_peer(self) -> PeerInfo:
        return PeerInfo(self._endpoint, self._session, self.pool.data_ptr, self.pool.layout,
                        self.config.tp_rank, self.config.tp_size)

    def _socket(self, cache: dict[str, Any], addr: str) -> Any:
        sock = cache.get(addr)
        if sock is None:
            sock = self._ctx.socket(self._zmq.PUSH)
            sock.setsockopt(self._zmq.LINGER, 0)
            sock.connect(_check_addr(addr))
            cache[addr] = sock
        return sock

    def _send(self, cache: dict[str, Any], addr: str, message: dict[str, Any]) -> None:
        try:
            signed = {**message, "token": self.config.token}
            self._socket(cache, addr).send(self._msgpack.packb(signed), flags=self._zmq.NOBLOCK)
        except self._zmq.Again:
            raise KVTransferError(f"control queue to {addr} is full (peer unreachable?)") from None

    def _connect(self, addr: str) -> None:
        self._socket(self._engine_push, addr)

    def _send_transfer_info(self, addr: str, room: int, pages: list[int]) -> None:
        message = {"kind": "info", "room": room, "peer": self.local_peer().to_dict(), "pages": pages}
        self._send(self._engine_push, addr, message)

    def _write(self, peer: PeerInfo, runs: list[PageRun]) -> int:
        entries = transfer_entries(runs, self.pool.layout, self.pool.data_ptr, peer.layout, peer.base_ptr)
        return self._batch_write(peer, *entries, what="write")

    def _write_slice(self, peer: PeerInfo, runs: list[PageRun], heads: HeadSlice) -> int:
        """A TP rank's head slice into a peer of another TP size: one entry per token and plane."""
        entries = slice_entries(runs, self.pool.layout, self.pool.data_ptr, peer.layout, peer.base_ptr, heads)
        return self._batch_write(peer, *entries, what="slice write")

    def _batch_write(self, peer: PeerInfo, src: list[int], dst: list[int], lengths: list[int], what: str) -> int:
        """Write (src, dst, length) entries to `peer` in batches of MAX_BATCH_ENTRIES; bytes written."""
        for lo in range(0, len(lengths), MAX_BATCH_ENTRIES):
            hi = lo + MAX_BATCH_ENTRIES
            rc = self._engine.batch_transfer_sync_write(peer.session, src[lo:hi], dst[lo:hi], lengths[lo:hi])
            if rc != 0:
                raise KVTransferError(f"mooncake {what} of {len(lengths[lo:hi])} entries to {peer.session} returned {rc}")
        return sum(lengths)

    def _notify(self, peer: PeerInfo, room: int, aux: TransferAux | None, reason: str) -> None:
        message = {"kind": "status", "room": room, "aux": aux.to_dict() if aux else None, "reason": reason}
        self._send(self._worker_push, peer.peer_id, message)

    def _listen(self) -> None:
        poller = self._zmq.Poller()
        poller.register(self._pull, self._zmq.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(POLL_MS):
                continue
            try:
                self._handle(self._msgpack.unpackb(self._pull.recv()))
            except Exception:  # noqa: BLE001 - a bad message must not stop the control thread
                log.exception("bad control message")

    def _handle(self, message: dict[str, Any]) -> None:
        if not hmac.compare_digest(str(message.get("token", "")).encode(), self.config.token.encode()):
            log.warning("control message of kind %r dropped: wrong token", message.get("kind"))
            return
        kind, room = message["kind"], int(message["room"])
        if kind == "info":
            self.on_transfer_info(room, PeerInfo.from_dict(message["peer"]), list(message["pages"]))
        elif kind == "status":
            aux = TransferAux.from_dict(message["aux"]) if message["aux"] else None
            self.on_status(room, aux, message["reason"])
        else:
            raise ValueError(f"control message kind {kind!r} unknown")

    def close(self) -> None:
        super().close()
        self._stop.set()
        self._control.join(timeout=2.0)
        for sock in [*self._engine_push.values(), *self._worker_push.values(), self._pull]:
            sock.close(linger=0)
        self._ctx.term()
        self._engine.unregister_memory(self.pool.data_ptr)
