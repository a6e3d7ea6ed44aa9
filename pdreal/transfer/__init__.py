"""KV transfer between prefill and decode instances (see base.py for the contract).

Backends: `mooncake` (TransferEngine over TCP or RDMA, ZMQ control), `local` (same protocol in
one process, tensor copies), `fake` (no data, instant success). Heavy imports (zmq, mooncake)
happen only when a mooncake manager is built.
"""

from __future__ import annotations

import time

from pdreal.kv.pool import KVPool
from pdreal.transfer.base import (
    KVManager,
    KVPoll,
    KVReceiver,
    KVSender,
    KVTransferError,
    TransferAux,
)
from pdreal.transfer.common import PeerInfo, TimeSource, TransferConfig
from pdreal.transfer.local import LocalHub

BACKENDS = ("mooncake", "local", "fake")


def make_kv_manager(config: TransferConfig, pool: KVPool, hub: LocalHub | None = None,
                    now_s: TimeSource = time.monotonic) -> KVManager:
    if config.backend == "mooncake":
        from pdreal.transfer.mooncake import MooncakeKVManager

        return MooncakeKVManager(config, pool, now_s)
    if config.backend == "local":
        from pdreal.transfer.local import LocalKVManager

        if hub is None:
            raise ValueError("the local transfer backend needs a LocalHub shared by both managers")
        return LocalKVManager(config, pool, hub, now_s)
    if config.backend == "fake":
        from pdreal.transfer.fake import FakeKVManager

        return FakeKVManager()
    raise ValueError(f"transfer backend {config.backend!r} unknown; use one of {BACKENDS}")


__all__ = [
    "BACKENDS", "KVManager", "KVPoll", "KVReceiver", "KVSender", "KVTransferError", "LocalHub",
    "PeerInfo", "TransferAux", "TransferConfig", "make_kv_manager",
]
