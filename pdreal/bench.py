"""Micro-benchmarks of the engine on the local device: prefill, decode step, KV transfer.

    prefill_ms(runner, tokens)         one prefill forward of `tokens` new tokens (median of runs)
    decode_ms(runner, batch, context)  one decode step of `batch` sequences at `context` tokens
    transfer_gbps(pages, coalesce)     mooncake (or local) KV copy between two pools in one process

Numbers come back as data; `pdreal bench` prints them.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from pdreal.engine.common import ModelRunner
from pdreal.kv.pool import KVLayout, KVPool
from pdreal.model.batch import SeqChunk
from pdreal.transfer import KVPoll, TransferAux, TransferConfig, make_kv_manager
from pdreal.transfer.local import LocalHub
from pdsim.policy.views import pages_for


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn, repeats: int, device: torch.device) -> float:  # noqa: ANN001
    fn()  # warm-up (kernel JIT, allocator)
    samples = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def prefill_ms(runner: ModelRunner, tokens: int, repeats: int = 3) -> float:
    pages = runner.pool.allocator.allocate(pages_for(tokens, runner.page_size_tokens))
    ids = [(7 * i) % runner.model.spec.vocab_size for i in range(tokens)]
    try:
        return _median_ms(lambda: runner.forward([SeqChunk(ids, 0, pages)]), repeats, runner.model.device)
    finally:
        runner.pool.allocator.free(pages)


def decode_ms(runner: ModelRunner, batch: int, context_tokens: int, repeats: int = 5) -> float:
    per_seq = pages_for(context_tokens + 1, runner.page_size_tokens)
    tables = [runner.pool.allocator.allocate(per_seq) for _ in range(batch)]
    chunks = [SeqChunk([i + 1], context_tokens, t) for i, t in enumerate(tables)]
    try:
        return _median_ms(lambda: runner.forward(chunks), repeats, runner.model.device)
    finally:
        for table in tables:
            runner.pool.allocator.free(table)


@dataclass(frozen=True)
class TransferResult:
    backend: str
    coalesce: bool
    pages: int
    bytes: int
    seconds: float

    @property
    def gbps(self) -> float:
        return self.bytes / self.seconds / 1e9


def transfer_gbps(layout: KVLayout, pages: int, coalesce: bool, backend: str = "mooncake",
                  repeats: int = 3) -> TransferResult:
    """Move `pages` pages (all layers, K and V) between two pools in this process; best of runs."""
    config = TransferConfig(backend=backend, coalesce=coalesce)
    src, dst = KVPool(layout, torch.float16), KVPool(layout, torch.float16)
    hub = LocalHub()
    prefill, decode = make_kv_manager(config, src, hub), make_kv_manager(config, dst, hub)
    best, nbytes = float("inf"), 0
    try:
        for room in range(repeats):
            receiver = decode.create_receiver(prefill.bootstrap_addr, room)
            receiver.init(list(range(pages)))
            sender = prefill.create_sender(room)
            while sender.poll() < KVPoll.WaitingForInput:
                time.sleep(0.0005)
            sender.send(list(range(pages)), TransferAux(room, 0))
            while receiver.poll() not in (KVPoll.Success, KVPoll.Failed):
                time.sleep(0.0002)
            if receiver.poll() == KVPoll.Failed:
                raise RuntimeError(f"benchmark transfer failed: {receiver.failure_reason}")
            aux = receiver.aux()
            if aux is None:
                raise RuntimeError("benchmark transfer: the backend reports no transfer times")
            best, nbytes = min(best, aux.transfer_end_s - aux.transfer_start_s), aux.transfer_bytes
            sender.close()
            receiver.close()
    finally:
        prefill.close()
        decode.close()
    return TransferResult(backend, coalesce, pages, nbytes, best)
