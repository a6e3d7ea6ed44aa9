"""The colocated engine (pdreal/engine/colocated.py): greedy tokens equal single-process
generation under both schedules, a hand-checked timeline per schedule, retraction under a tiny KV
pool, rejection and abort; pages and request accounting are checked at the end of every test."""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from pdreal.engine.colocated import ColocatedEngine  # noqa: E402
from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner  # noqa: E402
from pdreal.engine.driver import run_colocated  # noqa: E402
from pdreal.engine.generate import generate  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdsim.policy import SCHEDULES  # noqa: E402
from pdsim.trace import TraceRecorder  # noqa: E402

CONFIG = EngineConfig(num_pages=64, page_size_tokens=4, chunk_size_tokens=8, max_prefill_tokens=8)


def requests(lengths: list[int], max_new: int | list[int] = 6, seed: int = 0) -> list[EngineRequest]:
    gen = torch.Generator().manual_seed(seed)
    news = max_new if isinstance(max_new, list) else [max_new] * len(lengths)
    return [EngineRequest(i, tuple(torch.randint(0, 100, (n,), generator=gen).tolist()),
                          SamplingParams(max_new_tokens=m, ignore_eos=True), bootstrap_room=1000 + i)
            for i, (n, m) in enumerate(zip(lengths, news, strict=True))]


def reference(model, reqs: list[EngineRequest]) -> list[list[int]]:  # noqa: ANN001
    runner = ModelRunner(model, EngineConfig(num_pages=128, page_size_tokens=4))
    return generate(runner, [list(r.input_ids) for r in reqs], [r.sampling for r in reqs])


def engine(model, schedule: str, clock=None, **config) -> ColocatedEngine:  # noqa: ANN001
    cfg = replace(CONFIG, colocated_schedule=schedule, **config)
    return ColocatedEngine(ModelRunner(model, cfg), cfg, **({"now_s": clock} if clock else {}))


@pytest.mark.parametrize("add_every_steps", [0, 2], ids=["together", "staggered"])
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_greedy_tokens_equal_single_process(tiny_model, schedule: str, add_every_steps: int) -> None:  # noqa: ANN001
    reqs = requests([3, 9, 17, 30, 4])
    eng = engine(tiny_model, schedule)
    results = run_colocated(eng, reqs, add_every_steps)
    assert [results[r.request_id].token_ids for r in reqs] == reference(tiny_model, reqs)
    recorder = TraceRecorder()
    for r in reqs:
        recorder.add(results[r.request_id].row)
    df = recorder.to_frame()
    assert (df.status == "finished").all() and (df.output_tokens == 6).all() and (df["mode"] == "colocated").all()
    assert (df.prefill_instance == 0).all() and (df.decode_instance == 0).all() and (df.transfer_bytes == 0).all()
    assert (df.prefill_waiting_enter_s <= df.prefill_start_s).all() and (df.prefill_start_s < df.prefill_end_s).all()
    assert (df.first_token_s == df.prefill_end_s).all() and (df.running_enter_s == df.prefill_end_s).all()
    assert (df.first_token_s < df.last_token_s).all() and (df.token_times_s.map(len) == 6).all()
    kinds = {s.kind for s in eng.runner.steps}
    assert kinds == ({"prefill", "mixed", "decode"} if schedule == "mixed" else {"prefill", "decode"})
    eng.check_invariants()
    assert eng.stats().kv_used_tokens == 0  # nothing held (prompt pages may stay cached)


class StepClock:
    """Time = number of forwards so far: trace times read as step indices."""

    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> float:
        return float(self.t)


def _timeline(schedule: str, tiny_model) -> tuple[list[tuple], list[tuple]]:  # noqa: ANN001
    """A (6 tokens, 3 out) and B (10 tokens, 2 out), page 4, budget and chunk 8, no reserve."""
    clock = StepClock()
    eng = engine(tiny_model, schedule, clock=clock)
    forward = eng.runner.forward_logits  # what forward() calls too

    def counted(chunks, **kwargs):  # noqa: ANN001, ANN003, ANN202
        out = forward(chunks, **kwargs)
        clock.t += 1
        return out

    eng.runner.forward_logits = counted
    a, b = requests([6, 10], max_new=[3, 2])
    results = run_colocated(eng, [a, b])
    eng.check_invariants()
    events = []
    for name, rid in (("A", 0), ("B", 1)):
        row = results[rid].row
        events += [("prefill_start", name, row["prefill_start_s"]), ("first_token", name, row["first_token_s"]),
                   ("finish", name, row["finish_s"])]
    steps = [(s.kind, s.num_seqs, s.new_tokens, s.context_tokens, s.decode_seqs, s.decode_context_tokens)
             for s in eng.runner.steps]
    return sorted(events, key=lambda e: (e[2], e[1])), steps


def test_mixed_timeline(tiny_model) -> None:  # noqa: ANN001
    events, steps = _timeline("mixed", tiny_model)
    # step 1: A's 6 tokens (B does not fit in the 2 left: chunks are page multiples)
    # step 2: B's first 4-token chunk (budget 8 - 1 decode = 7) with A's decode
    # step 3: B's last 6 tokens with A's last decode; step 4: B's decode
    assert steps == [("prefill", 1, 6, 0, 0, 0), ("mixed", 2, 5, 6, 1, 6), ("mixed", 2, 7, 11, 1, 7),
                     ("decode", 1, 1, 10, 1, 10)]
    assert events == [("prefill_start", "A", 0.0), ("first_token", "A", 1.0), ("prefill_start", "B", 1.0),
                      ("finish", "A", 3.0), ("first_token", "B", 3.0), ("finish", "B", 4.0)]


def test_prefill_priority_timeline(tiny_model) -> None:  # noqa: ANN001
    events, steps = _timeline("prefill_priority", tiny_model)
    # prefills run alone while any can be formed: A, B's first 8 tokens, B's last 2; then decodes
    assert steps == [("prefill", 1, 6, 0, 0, 0), ("prefill", 1, 8, 0, 0, 0), ("prefill", 1, 2, 8, 0, 0),
                     ("decode", 2, 2, 16, 2, 16), ("decode", 1, 1, 7, 1, 7)]
    assert events == [("prefill_start", "A", 0.0), ("first_token", "A", 1.0), ("prefill_start", "B", 1.0),
                      ("first_token", "B", 3.0), ("finish", "B", 4.0), ("finish", "A", 5.0)]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_retraction_under_a_tiny_pool_keeps_the_tokens(tiny_model, schedule: str) -> None:  # noqa: ANN001
    reqs = requests([10, 12, 14], max_new=20)  # 30-34 tokens each, 26 pages in all; the pool has 16
    eng = engine(tiny_model, schedule, num_pages=16)
    results = run_colocated(eng, reqs)
    assert [results[r.request_id].token_ids for r in reqs] == reference(tiny_model, reqs)
    assert eng.num_retractions > 0
    assert sum(results[r.request_id].row["num_retractions"] for r in reqs) == eng.num_retractions
    assert all(results[r.request_id].row["status"] == "finished" for r in reqs)
    eng.check_invariants()
    assert eng.stats().kv_used_tokens == 0  # nothing held (prompt pages may stay cached)


def test_reservation_holds_back_kv_for_running_decodes(tiny_model) -> None:  # noqa: ANN001
    eng = engine(tiny_model, "mixed", num_pages=8, new_token_ratio=1.0)
    a, b = requests([8, 4], max_new=[20, 4])
    eng.add_request(a)
    eng.step()  # A prefilled: 2 pages, and 20 KV tokens reserved for its outputs
    eng.add_request(b)
    eng.step()  # A grows to 3 pages: 20 tokens free, 19 reserved; B needs 4 + 4 reserved: waits
    assert [s.req.request_id for s in eng.waiting] == [1] and len(eng.running) == 1
    finished = []
    while eng.has_work():
        finished += [o.request_id for o in eng.step() if o.finished]
    assert finished == [0, 1]  # B ran once A was done
    eng.check_invariants()


def test_rejection_and_abort_free_everything(tiny_model) -> None:  # noqa: ANN001
    eng = engine(tiny_model, "mixed", num_pages=8)
    long, short = requests([40, 5], max_new=[2, 8])
    eng.add_request(long)
    eng.add_request(short)
    emitted = []
    eng.set_emitter(emitted.extend)
    eng.step()
    assert emitted[0].finished and emitted[0].status == "rejected" and "exceed the KV pool" in emitted[0].failure_reason
    eng.abort(short.request_id, "client gone")
    outputs = eng.step()
    assert [(o.request_id, o.status, o.failure_reason) for o in emitted[1:] + outputs] == [(1, "failed", "client gone")]
    with pytest.raises(ValueError, match="colocated_schedule"):
        engine(tiny_model, "fifo")
    eng.check_invariants()
    assert eng.stats().kv_used_tokens == 0 and not eng.has_work()
