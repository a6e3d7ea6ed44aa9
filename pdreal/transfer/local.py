"""`local` backend: the full protocol between two managers in one process, copying tensors.

A `LocalHub` (owned by the caller, e.g. a test) names managers; the bootstrap address of a
prefill manager is its hub name. Closing a manager removes it from the hub, so later writes to
it fail exactly like writes to a dead mooncake peer.
"""

from __future__ import annotations

import threading
import time

from pdreal.kv.allocator import PageRun
from pdreal.kv.pool import KVPool
from pdreal.transfer.base import KVTransferError, TransferAux
from pdreal.transfer.common import PagedKVManager, PeerInfo, TimeSource, TransferConfig
from pdreal.transfer.slices import HeadSlice


class LocalHub:
    def __init__(self) -> None:
        self._managers: dict[str, LocalKVManager] = {}
        self._lock = threading.Lock()
        self._count = 0

    def register(self, manager: LocalKVManager) -> str:
        with self._lock:
            name = f"local-{self._count}"
            self._count += 1
            self._managers[name] = manager
            return name

    def unregister(self, name: str) -> None:
        with self._lock:
            self._managers.pop(name, None)

    def get(self, name: str) -> LocalKVManager:
        with self._lock:
            manager = self._managers.get(name)
        if manager is None:
            raise KVTransferError(f"no live local manager named {name!r}")
        return manager


class LocalKVManager(PagedKVManager):
    backend = "local"

    def __init__(self, config: TransferConfig, pool: KVPool, hub: LocalHub,
                 now_s: TimeSource = time.monotonic) -> None:
        self.hub = hub
        self.name = hub.register(self)
        super().__init__(config, pool, now_s)

    @property
    def bootstrap_addr(self) -> str:
        return self.name

    def local_peer(self) -> PeerInfo:
        return PeerInfo(self.name, self.name, 0, self.pool.layout, self.config.tp_rank, self.config.tp_size)

    def _connect(self, addr: str) -> None:
        self.hub.get(addr)

    def _send_transfer_info(self, addr: str, room: int, pages: list[int]) -> None:
        self.hub.get(addr).on_transfer_info(room, self.local_peer(), pages)

    def _write(self, peer: PeerInfo, runs: list[PageRun]) -> int:
        self.hub.get(peer.peer_id).pool.copy_pages_from(self.pool, runs)
        return sum(run.num_pages for run in runs) * self.pool.layout.page_bytes * 2 * self.pool.layout.num_layers

    def _write_slice(self, peer: PeerInfo, runs: list[PageRun], heads: HeadSlice) -> int:
        src, dst = self.pool.buffer, self.hub.get(peer.peer_id).pool.buffer
        s0, d0, n = heads.src_head, heads.dst_head, heads.num_heads
        for run in runs:
            s, d, pages = run.src_page, run.dst_page, run.num_pages
            dst[:, :, d:d + pages, :, d0:d0 + n].copy_(src[:, :, s:s + pages, :, s0:s0 + n])
        layout = self.pool.layout
        return sum(r.num_pages for r in runs) * 2 * layout.num_layers * layout.page_size_tokens * n * \
            layout.head_dim * layout.dtype_bytes

    def _notify(self, peer: PeerInfo, room: int, aux: TransferAux | None, reason: str) -> None:
        self.hub.get(peer.peer_id).on_status(room, aux, reason)

    def close(self) -> None:
        self.hub.unregister(self.name)
        super().close()
