"""Prefill + decode engines in one process over the `local` and `fake` transfer backends."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner  # noqa: E402
from pdreal.engine.driver import run_disaggregated  # noqa: E402
from pdreal.engine.generate import generate  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdsim.trace import TraceRecorder  # noqa: E402


def requests(lengths: list[int], max_new: int = 6, seed: int = 0, **sampling) -> list[EngineRequest]:  # noqa: ANN003
    gen = torch.Generator().manual_seed(seed)
    return [EngineRequest(i, tuple(torch.randint(0, 100, (n,), generator=gen).tolist()),
                          SamplingParams(max_new_tokens=max_new, ignore_eos=True, **sampling), bootstrap_room=1000 + i)
            for i, n in enumerate(lengths)]


def reference(model, reqs: list[EngineRequest]) -> list[list[int]]:  # noqa: ANN001
    runner = ModelRunner(model, EngineConfig(num_pages=128, page_size_tokens=4))
    return generate(runner, [list(r.input_ids) for r in reqs], [r.sampling for r in reqs])


@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.9, "top_p": 0.8, "seed": 3}], ids=["greedy", "top_p"])
def test_pd_local_equals_single_process(pd_factory, tiny_model, sampling) -> None:  # noqa: ANN001
    reqs = requests([3, 9, 17, 30, 4], **sampling)
    pd = pd_factory()
    results = run_disaggregated(pd.prefill, pd.decode, reqs)
    assert [results[r.request_id].token_ids for r in reqs] == reference(tiny_model, reqs)
    recorder = TraceRecorder()
    for r in reqs:
        recorder.add(results[r.request_id].row)
    df = recorder.to_frame()
    assert (df.status == "finished").all() and (df.output_tokens == 6).all()
    assert (df.prefill_start_s <= df.prefill_end_s).all() and (df.first_token_s <= df.last_token_s).all()
    assert (df.transfer_bytes > 0).all()
    pd.check_invariants()


def test_decode_retraction_keeps_output(pd_factory, tiny_model) -> None:  # noqa: ANN001
    reqs = requests([10, 12, 14], max_new=20)
    pd = pd_factory(decode_cfg=EngineConfig(instance_id=1, num_pages=16, page_size_tokens=4,
                                             decode_reserved_tokens=1))
    results = run_disaggregated(pd.prefill, pd.decode, reqs)
    assert [results[r.request_id].token_ids for r in reqs] == reference(tiny_model, reqs)
    assert sum(results[r.request_id].row["num_retractions"] for r in reqs) > 0
    pd.check_invariants()


def test_fake_backend_completes_without_data(pd_factory) -> None:  # noqa: ANN001
    reqs = requests([5, 6], max_new=3)
    pd = pd_factory(backend="fake")
    results = run_disaggregated(pd.prefill, pd.decode, reqs)
    assert all(len(results[r.request_id].token_ids) == 3 for r in reqs)
    pd.check_invariants()


def test_too_long_prompt_is_rejected(pd_factory) -> None:  # noqa: ANN001
    reqs = requests([300], max_new=2)
    pd = pd_factory()
    results = run_disaggregated(pd.prefill, pd.decode, reqs)
    row = results[0].row
    assert row["status"] == "rejected" and "exceeds the KV pool" in row["failure_reason"]
    pd.check_invariants()


def test_dead_decode_fails_prefill_and_frees_pages(pd_factory) -> None:  # noqa: ANN001
    reqs = requests([20, 8], max_new=4)
    pd = pd_factory()
    for r in reqs:
        pd.prefill.add_request(r)
        pd.decode.add_request(EngineRequest(r.request_id, r.input_ids, r.sampling, r.bootstrap_room,
                                            pd.prefill.kv.bootstrap_addr))
    pd.decode.step()  # pre-allocates and sends the transfer info
    pd.decode.kv.close()  # the decode instance dies
    outputs, deadline = [], time.monotonic() + 10
    while pd.prefill.has_work() and time.monotonic() < deadline:
        outputs += pd.prefill.step()
    assert sorted(o.status for o in outputs if o.finished) == ["failed", "failed"]
    assert pd.prefill.stats().kv_used_tokens == 0  # nothing held (prompt pages may stay cached)
    pd.prefill.check_invariants()


def test_abort_and_duplicate_ids(pd_factory) -> None:  # noqa: ANN001
    reqs = requests([12, 5], max_new=30)
    pd = pd_factory()
    for r in reqs:
        pd.prefill.add_request(r)
        pd.decode.add_request(EngineRequest(r.request_id, r.input_ids, r.sampling, r.bootstrap_room,
                                            pd.prefill.kv.bootstrap_addr))
    with pytest.raises(ValueError, match="request_id 0 is already"):
        pd.decode.add_request(reqs[0])
    rows, deadline = {}, time.monotonic() + 10
    while len(rows) < 4 and time.monotonic() < deadline:
        for side, engine in (("p", pd.prefill), ("d", pd.decode)):
            for out in engine.step():
                if side == "d" and out.token_ids and out.request_id == 1 and ("d", 1) not in rows:
                    pd.decode.abort(1, "client disconnected")
                if out.finished:
                    rows[(side, out.request_id)] = out.row
    assert rows[("d", 1)]["status"] == "failed" and rows[("d", 1)]["failure_reason"] == "client disconnected"
    assert rows[("d", 0)]["status"] == "finished" and rows[("d", 0)]["output_tokens"] == 30
    pd.check_invariants()
