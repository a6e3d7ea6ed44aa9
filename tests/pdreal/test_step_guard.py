"""Guarded engine steps (pdreal/engine/*): an exception inside one step fails only the requests of
that step's forward, frees their pages and transfer rooms, and the same engine serves the next
requests; the invariants (no page leaked, every request accounted for) hold throughout."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from pdreal.engine.colocated import ColocatedEngine  # noqa: E402
from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner  # noqa: E402
from pdreal.engine.driver import run_colocated, run_disaggregated  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdsim.trace import STATUS_FAILED, STATUS_FINISHED  # noqa: E402


def _req(rid: int, length: int = 9, max_new: int = 4) -> EngineRequest:
    return EngineRequest(rid, tuple(range(1, length + 1)), SamplingParams(max_new_tokens=max_new, ignore_eos=True),
                         bootstrap_room=500 + rid)


class Boom:
    """Makes the runner's forward raise on its `fail_on`-th call (counted from 1), then work again
    (`forward_logits`, which `forward` calls too)."""

    def __init__(self, runner: ModelRunner, fail_on: int) -> None:
        self.forward, self.calls, self.fail_on = runner.forward_logits, 0, fail_on
        self.failed_chunks = 0  # sequences in the forward that raised
        runner.forward_logits = self  # type: ignore[method-assign]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.fail_on:
            self.failed_chunks = len(args[0])
            raise RuntimeError("injected forward failure")
        return self.forward(*args, **kwargs)


def _drain(engine: Any, steps: int = 200) -> list[Any]:
    finished = []
    for _ in range(steps):
        finished += [o for o in engine.step() if o.finished]
        if not engine.has_work():
            break
    return finished


def test_colocated_step_failure_fails_only_that_forward(tiny_model: Any) -> None:
    cfg = EngineConfig(num_pages=32, page_size_tokens=4, chunk_size_tokens=8, max_prefill_tokens=8)
    engine = ColocatedEngine(ModelRunner(tiny_model, cfg), cfg)
    Boom(engine.runner, fail_on=2)
    engine.add_request(_req(0, length=8))  # the first forward prefills request 0 alone (8-token budget)
    engine.step()
    engine.add_request(_req(1, length=8))
    outputs = engine.step()  # forward 2: request 0's decode + request 1's prefill chunk -> raises
    failed = {o.request_id: o for o in outputs if o.finished}
    assert set(failed) == {0, 1}
    assert all(o.status == STATUS_FAILED for o in failed.values())
    assert failed[0].failure_reason == "engine step failed: RuntimeError: injected forward failure"
    assert engine.stats().kv_used_tokens == 0  # nothing held; request 0's computed prompt stays cached
    assert engine.cache.cached_pages == 2  # its 8 prompt tokens; request 1's failed chunk is not cached
    engine.check_invariants()
    results = run_colocated(engine, [_req(2), _req(3)])  # the same engine still serves
    assert [results[i].row["status"] for i in (2, 3)] == [STATUS_FINISHED, STATUS_FINISHED]
    assert [len(results[i].token_ids) for i in (2, 3)] == [4, 4]
    assert engine.num_failed == 2 and engine.num_finished == 2
    engine.check_invariants()


def test_prefill_step_failure_frees_pages_and_rooms_decode_side_follows(pd_factory: Any) -> None:
    pd = pd_factory()
    Boom(pd.prefill.runner, fail_on=1)
    results = run_disaggregated(pd.prefill, pd.decode, [_req(0), _req(1)], timeout_s=30)
    # the first forward holds request 0's first chunk only (8-token chunks): request 1 is untouched
    assert results[0].row["status"] == STATUS_FAILED
    assert results[0].prefill_row["failure_reason"] == "engine step failed: RuntimeError: injected forward failure"
    assert results[1].row["status"] == STATUS_FINISHED and len(results[1].token_ids) == 4
    assert pd.prefill.stats().kv_used_tokens == 0 and pd.decode.allocator.num_used == 0  # prompts may stay cached
    assert pd.prefill.kv.num_rooms() == 0 and pd.decode.kv.num_rooms() == 0
    pd.check_invariants()
    again = run_disaggregated(pd.prefill, pd.decode, [_req(2), _req(3)], timeout_s=30)
    assert [again[i].row["status"] for i in (2, 3)] == [STATUS_FINISHED, STATUS_FINISHED]
    assert [len(again[i].token_ids) for i in (2, 3)] == [4, 4]
    pd.check_invariants()


def test_decode_step_failure_fails_the_running_batch_only(pd_factory: Any) -> None:
    pd = pd_factory()
    boom = Boom(pd.decode.runner, fail_on=1)  # the first decode forward
    results = run_disaggregated(pd.prefill, pd.decode, [_req(i) for i in range(3)], timeout_s=30)
    failed = [r for r in results.values() if r.row["status"] == STATUS_FAILED]
    assert boom.failed_chunks >= 1 and len(failed) == boom.failed_chunks  # that batch, no other request
    for result in failed:
        assert result.row["failure_reason"] == "engine step failed: RuntimeError: injected forward failure"
        assert len(result.token_ids) == 1  # the first token (made by prefill) got out, nothing else
    assert all(len(r.token_ids) == 4 for r in results.values() if r.row["status"] == STATUS_FINISHED)
    assert pd.decode.allocator.num_used == 0 and pd.decode.kv.num_rooms() == 0
    pd.check_invariants()
    again = run_disaggregated(pd.prefill, pd.decode, [_req(2)], timeout_s=30)
    assert again[2].row["status"] == STATUS_FINISHED and len(again[2].token_ids) == 4
    pd.check_invariants()
