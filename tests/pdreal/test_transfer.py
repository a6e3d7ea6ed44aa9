"""KVPoll state machine, transfer entries, the local backend's protocol, trace merging."""

from __future__ import annotations

import threading
import time

import pytest

torch = pytest.importorskip("torch")

from pdreal.engine.common import merge_halves  # noqa: E402
from pdreal.kv.allocator import PageRun  # noqa: E402
from pdreal.kv.pool import KVLayout, KVPool, transfer_entries  # noqa: E402
from pdreal.transfer import KVPoll, LocalHub, TransferAux, TransferConfig, make_kv_manager  # noqa: E402
from pdreal.transfer.base import PollState  # noqa: E402

LAYOUT = KVLayout(num_layers=2, num_pages=8, page_size_tokens=2, num_kv_heads=1, head_dim=4, dtype_bytes=4)


def wait_for(predicate, timeout_s: float = 5.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


def test_kvpoll_is_monotone_and_terminal_states_are_sticky() -> None:
    assert [int(p) for p in KVPoll] == [0, 1, 2, 3, 4]
    state = PollState()
    assert state.advance(KVPoll.Transferring) and not state.advance(KVPoll.WaitingForInput)
    assert state.get() == KVPoll.Transferring
    assert state.advance(KVPoll.Success) and not state.fail("late") and state.get() == KVPoll.Success
    failed = PollState()
    assert failed.fail("first") and not failed.fail("second") and not failed.advance(KVPoll.Success)
    assert failed.get() == KVPoll.Failed and failed.reason == "first"
    with pytest.raises(ValueError, match="fail"):
        failed.advance(KVPoll.Failed)


def test_poll_state_under_concurrent_updates_ends_terminal_once() -> None:
    state, wins = PollState(), []

    def racer(i: int) -> None:
        wins.append(state.fail(f"r{i}") if i % 2 else state.advance(KVPoll.Success))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(wins) == 1 and state.get() in (KVPoll.Success, KVPoll.Failed)


def test_transfer_entries_cover_every_layer_and_plane() -> None:
    dst = KVLayout(2, 16, 2, 1, 4, 4)
    src_ptrs, dst_ptrs, lengths = transfer_entries([PageRun(1, 5, 3)], LAYOUT, 1000, dst, 0)
    assert len(lengths) == 4 and set(lengths) == {3 * LAYOUT.page_bytes}
    assert src_ptrs[1] - src_ptrs[0] == LAYOUT.plane_bytes and dst_ptrs[1] - dst_ptrs[0] == dst.plane_bytes
    assert src_ptrs[0] == 1000 + LAYOUT.page_bytes and dst_ptrs[0] == 5 * dst.page_bytes
    assert "head_dim" in LAYOUT.compatible_with(KVLayout(2, 8, 2, 1, 8, 4))


def test_local_backend_moves_pages_chunk_by_chunk() -> None:
    hub = LocalHub()
    src, dst = KVPool(LAYOUT, torch.float32), KVPool(LAYOUT, torch.float32)
    src.buffer.copy_(torch.randn(src.buffer.shape))
    prefill = make_kv_manager(TransferConfig(backend="local"), src, hub)
    decode = make_kv_manager(TransferConfig(backend="local"), dst, hub)
    try:
        receiver = decode.create_receiver(prefill.bootstrap_addr, room=9)  # decode first: info arrives early
        assert receiver.poll() == KVPoll.WaitingForInput
        receiver.init([5, 6, 7])
        sender = prefill.create_sender(room=9)
        assert sender.poll() == KVPoll.WaitingForInput
        sender.send([0, 1])  # non-last chunk: full pages
        sender.send([4], TransferAux(9, first_token_id=42))
        wait_for(lambda: receiver.poll() == KVPoll.Success)
        assert sender.poll() == KVPoll.Success and receiver.aux().first_token_id == 42
        assert receiver.aux().transfer_bytes == 3 * LAYOUT.page_bytes * 2 * LAYOUT.num_layers
        assert torch.equal(dst.buffer[:, :, 5:7], src.buffer[:, :, 0:2])
        assert torch.equal(dst.buffer[:, :, 7], src.buffer[:, :, 4])
        sender.close()
        receiver.close()
        assert prefill.num_rooms() == decode.num_rooms() == 0
    finally:
        prefill.close()
        decode.close()


def test_timeouts_and_unknown_peer_fail() -> None:
    clock = [0.0]
    pool = KVPool(LAYOUT, torch.float32)
    cfg = TransferConfig(backend="local", bootstrap_timeout_s=1.0, transfer_timeout_s=2.0)
    hub = LocalHub()
    manager = make_kv_manager(cfg, pool, hub, now_s=lambda: clock[0])
    try:
        sender = manager.create_sender(room=1)
        receiver = manager.create_receiver(manager.bootstrap_addr, room=2)
        lost = manager.create_receiver("local-99", room=3)
        assert lost.poll() == KVPoll.Failed and "local-99" in lost.failure_reason
        clock[0] = 1.5
        assert sender.poll() == KVPoll.Failed and "bootstrap timeout" in sender.failure_reason
        assert receiver.poll() == KVPoll.WaitingForInput
        clock[0] = 2.5
        assert receiver.poll() == KVPoll.Failed and "transfer timeout" in receiver.failure_reason
        with pytest.raises(RuntimeError, match="room 2: transfer timeout"):
            receiver.failure_exception()
    finally:
        manager.close()


def test_merge_halves_prefers_the_first_failure() -> None:
    p = {"request_id": 1, "status": "finished", "prefill_end_s": 1.0, "finish_s": 1.2}
    d = {"request_id": 1, "status": "failed", "failure_reason": "transfer timeout", "finish_s": 3.0}
    row = merge_halves(p, d)
    assert row["status"] == "failed" and row["failure_reason"] == "transfer timeout"
    assert row["prefill_end_s"] == 1.0 and row["finish_s"] == 3.0
    assert merge_halves(p, {**d, "status": "finished", "failure_reason": ""})["status"] == "finished"
