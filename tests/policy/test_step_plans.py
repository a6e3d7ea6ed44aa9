"""The step planners on hand-built states: every field of the plan computed by hand."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pdsim.policy import (
    DecodeMemoryView,
    GrowthPlan,
    RequestView,
    StepLimits,
    first_admission_boundary,
    plan_colocated_step,
    plan_decode_step,
)
from pdsim.policy.limits import steps_as_iterations
from pdsim.policy.receive import counter_after_decodes, receive_point, recv_weight

PAGE = 4


@dataclass
class Req:
    rid: int
    inputs: int
    outputs: int
    generated: int = 0
    kv: int = 0

    def view(self) -> RequestView:
        return RequestView(self.rid, self.inputs, self.outputs, generated_tokens=self.generated, kv_tokens=self.kv)


def memory(free_pages: int, active: list[Req], running: list[Req]) -> DecodeMemoryView:
    return DecodeMemoryView(
        available_tokens=free_pages * PAGE, num_active=len(active), reserved_decode_tokens=2,
        remaining_output_tokens=0, largest_need_tokens=max((r.inputs + r.outputs for r in running), default=0),
        retractable_tokens=sum(r.kv for r in running), page_size_tokens=PAGE,
    )


class RunningLists:
    """The RunningBatch half both fakes share: running requests and free pages as plain fields."""

    running: list[Req]
    free: int

    def running_requests(self) -> list[Req]:
        return self.running

    def free_pages(self) -> int:
        return self.free

    def kv_tokens(self, r: Req) -> int:
        return r.kv

    def request_view(self, r: Req) -> RequestView:
        return r.view()


@dataclass
class Decode(RunningLists):
    """A minimal DecodeExecutor: its queues as lists, free pages, and the memory view it reports."""

    running: list[Req]
    free: int
    memory: DecodeMemoryView
    retracted: list[Req] = field(default_factory=list)
    handshaken: list[Req] = field(default_factory=list)
    waiting: list[Req] = field(default_factory=list)
    num_transfer: int = 0
    arrived: list[Req] = field(default_factory=list)
    taken: list[tuple[Req, ...]] = field(default_factory=list)

    def retracted_requests(self) -> list[Req]:
        return self.retracted

    def arrived_requests(self) -> list[Req]:
        return self.arrived

    def take_arrived(self, reqs: tuple[Req, ...]) -> None:
        self.taken.append(reqs)
        for r in reqs:
            self.arrived.remove(r)
            self.waiting.append(r)

    def handshaken_requests(self) -> list[Req]:
        return self.handshaken

    def num_preallocated(self) -> int:
        return self.num_transfer + len(self.waiting)

    def waiting_requests(self) -> list[Req]:
        return self.waiting

    def memory_view(self) -> DecodeMemoryView:
        return self.memory

    def done_at_join(self, r: Req) -> bool:
        return r.generated >= r.outputs


def test_decode_plan_resumes_first_admits_joins_and_grows() -> None:
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=3, prealloc_slots=4, decode_reserved_tokens=2)
    running = [Req(0, 8, 20, generated=5, kv=12)]  # 12 tokens = 3 full pages: needs a page
    retracted = [Req(1, 6, 10, generated=3, kv=8)]  # resumes: 2 pages + reserve 2 tokens
    waiting = [Req(2, 5, 1, generated=1, kv=5), Req(3, 7, 9, generated=1, kv=7)]  # 2 is complete
    handshaken = [Req(4, 10, 5)]  # 3 pages now, worst case 15 - 12 retractable
    ex = Decode(running, 20, memory(20, running + waiting, running), retracted, handshaken, waiting)
    plan = plan_decode_step(limits, ex)
    assert [r.rid for r in plan.resume] == [1]
    assert [r.rid for r in plan.admit] == [4]
    # waiting in order, then the resumed one; request 2 finishes instead of joining (it needs no slot)
    assert [r.rid for r in plan.finish_at_join] == [2]
    assert [r.rid for r in plan.join] == [3, 1]
    # 20 free - 2 (resume) - 3 (admit) + 2 (request 2's pages) = 17: every page-full request grows
    assert plan.growth == GrowthPlan((), (), (running[0], retracted[0]))
    assert [r.rid for r in plan.batch] == [0, 3, 1] and plan.changes and not plan.replan


def test_decode_plan_retracts_when_pages_run_short() -> None:
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=4)
    running = [Req(0, 8, 20, generated=9, kv=16), Req(1, 4, 20, generated=1, kv=4), Req(2, 12, 20, generated=1, kv=12)]
    plan = plan_decode_step(limits, Decode(running, 1, memory(1, running, running)))
    # three need a page, one is free: victims by fewest generated, then longest prompt: 2 (3 pages) frees enough
    assert [r.rid for r in plan.growth.victims] == [2]
    assert [r.rid for r in plan.growth.grow] == [0, 1] and not plan.growth.failed
    assert [r.rid for r in plan.batch] == [0, 1]


def test_decode_plan_fails_the_last_request_and_asks_for_a_replan() -> None:
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=4)
    running = [Req(0, 8, 20, generated=1, kv=8)]
    plan = plan_decode_step(limits, Decode(running, 0, memory(0, running, running)))
    assert plan.growth.failed == (running[0],) and plan.batch == () and plan.replan


def test_decode_plan_takes_arrived_requests_first() -> None:
    """prefill_end hand-off: the arrived requests that fit take their pages and join this step."""
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=1)
    arrived = [Req(0, 8, 4, generated=1), Req(1, 8, 4, generated=1)]  # one slot: only 0 is taken
    ex = Decode([], 10, memory(10, [], []), arrived=list(arrived))
    plan = plan_decode_step(limits, ex)
    assert ex.taken == [(arrived[0],)] and ex.arrived == [arrived[1]]
    assert [r.rid for r in plan.join] == [0] and plan.admit == ()


def test_first_admission_boundary_waits_for_the_batch_to_free_memory() -> None:
    """The look-ahead admits where the batch's growth leaves room: none here, so k."""
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=4)
    running = [Req(0, 8, 20, generated=1, kv=8)]
    ex = Decode(running, 0, memory(0, running, running), handshaken=[Req(1, 40, 4)])
    assert first_admission_boundary(limits, ex, 5, 1, lambda j: j) == 5


@dataclass
class Colocated(RunningLists):
    """A minimal ColocatedExecutor: running requests, a waiting queue, free pages."""

    running: list[Req]
    waiting: list[Req]
    free: int
    applied: list[GrowthPlan] = field(default_factory=list)

    def apply_growth(self, plan: GrowthPlan) -> None:
        self.applied.append(plan)
        self.free -= len(plan.grow)

    def prefill_candidates(self):  # noqa: ANN201
        return (RequestView(r.rid, r.inputs, r.outputs) for r in self.waiting)

    def free_kv_tokens(self) -> int:
        return self.free * PAGE

    def remaining_outputs(self):  # noqa: ANN201
        return (r.outputs - r.generated for r in self.running)


def test_colocated_mixed_grows_then_fills_the_budget_left_by_decodes() -> None:
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=4, max_prefill_tokens=20,
                        chunk_size_tokens=16, new_token_ratio=0.5, schedule="mixed")
    ex = Colocated([Req(0, 8, 10, generated=2, kv=8), Req(1, 5, 10, generated=2, kv=6)], [Req(2, 30, 4)], free=10)
    plan = plan_colocated_step(limits, ex)
    assert [r.rid for r in plan.decodes] == [0, 1] and ex.applied[0].grow == (ex.running[0],)
    # budget min(20, 16) - 2 decodes = 14 tokens -> a 12-token chunk (page multiple) of request 2
    (chunk,) = plan.prefill.chunks
    assert (chunk.request_id, chunk.new_tokens, chunk.is_last) == (2, 12, False)


def test_colocated_prefill_priority_runs_prefill_alone() -> None:
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=4, max_prefill_tokens=64,
                        chunk_size_tokens=0, schedule="prefill_priority")
    ex = Colocated([Req(0, 8, 10, generated=2, kv=8)], [Req(2, 30, 4)], free=20)
    plan = plan_colocated_step(limits, ex)
    assert plan.decodes == () and [c.request_id for c in plan.prefill.chunks] == [2] and not ex.applied
    ex.waiting.clear()
    plan = plan_colocated_step(limits, ex)
    assert plan.prefill.chunks == () and [r.rid for r in plan.decodes] == [0] and len(ex.applied) == 1


def test_batch_waiting_holds_prompts_beside_decodes_until_iterations_or_tokens() -> None:
    # TensorRT-LLM's batch waiting: 2 decodes + a 30-token prompt = 32 tokens < 0.5 x 100 -> held
    # while waited < 3 iterations; the count goes 0 -> 1 -> 2 -> 3, then the prompt runs and it is 0
    limits = StepLimits(page_size_tokens=PAGE, max_running_requests=4, prealloc_slots=4, max_prefill_tokens=100,
                        chunk_size_tokens=0, batch_wait_iters=3, batch_wait_tokens_ratio=0.5)
    ex = Colocated([Req(0, 8, 10, generated=2, kv=8), Req(1, 5, 10, generated=2, kv=6)], [Req(2, 30, 4)], free=40)
    waited, held = 0, []
    for _ in range(4):
        plan = plan_colocated_step(limits, ex, waited)
        held.append(plan.held)
        assert [r.rid for r in plan.decodes] == [0, 1]
        waited = plan.waited_after(waited)
    assert held == [True, True, True, False] and waited == 0
    assert [c.request_id for c in plan.prefill.chunks] == [2]
    # enough tokens waiting (two prompts: 30 + 30 + 2 >= 50) -> no hold at all
    ex.waiting.append(Req(3, 30, 4))
    assert not plan_colocated_step(limits, ex, 0).held
    # an idle engine never waits: no decodes, the prompt runs at once
    idle = Colocated([], [Req(2, 30, 4)], free=40)
    plan = plan_colocated_step(limits, idle, 0)
    assert not plan.held and [c.request_id for c in plan.prefill.chunks] == [2] and plan.waited_after(2) == 2


def test_batch_wait_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="batch_wait_tokens_ratio.*1.5"):
        StepLimits(batch_wait_tokens_ratio=1.5)
    with pytest.raises(ValueError, match="batch_wait_iters.*-1"):
        StepLimits(batch_wait_iters=-1)


def test_receive_interval_counts_decodes_and_receives_after_prefill_or_idle() -> None:
    # SGLang's SchedulerRecvSkipper with --scheduler-recv-interval 5: a decode adds 1, a forward
    # with prefill 1000; an idle loop receives at once; interval 1 receives every iteration
    assert receive_point(1, 0, idle=False) == receive_point(5, 3, idle=True) == receive_point(5, 5, idle=False) == (True, 0)
    assert receive_point(5, 4, idle=False) == (False, 4)  # (the counter kept: no receive yet)
    assert recv_weight(prefill=True) == 1000 and recv_weight(prefill=False) == 1
    # a span of decodes with nothing arriving: tops receive (and restart) whenever it reached 5
    assert [counter_after_decodes(5, 0, d) for d in (1, 4, 5, 6, 10, 11)] == [1, 4, 5, 1, 5, 1]
    assert counter_after_decodes(5, 3, 2) == 5 and counter_after_decodes(5, 3, 3) == 1
    assert counter_after_decodes(5, 1000, 2) == 2  # after a prefill: received at the first top
    assert counter_after_decodes(1, 0, 7) == 7  # (interval 1: the counter is never read)


def test_step_counted_limits_become_iterations_when_a_step_spans_several() -> None:
    # pdsim with MTP spreads a verify step over `a` iterations (perf/speculative.py), so the limits
    # an engine counts in steps count a x as many iterations; 0 (off) and 1 (every iteration) stay
    from pdsim.config import ClusterConfig, PolicyConfig

    cluster = ClusterConfig(recv_interval_steps=30, batch_wait_iters=20, batch_wait_tokens_ratio=0.9)
    assert [steps_as_iterations(n, 3.18) for n in (0, 1, 2, 10, 30)] == [0, 1, 6, 32, 95]
    assert steps_as_iterations(30, 1.0) == 30
    plain = StepLimits.from_config(cluster, PolicyConfig())
    assert (plain.recv_interval_steps, plain.batch_wait_iters) == (30, 20)
    mtp = StepLimits.from_config(cluster, PolicyConfig(), iterations_per_step=2.5)
    assert (mtp.recv_interval_steps, mtp.batch_wait_iters, mtp.batch_wait_tokens_ratio) == (75, 50, 0.9)
    every = StepLimits.from_config(ClusterConfig(recv_interval_steps=1, batch_wait_iters=0), PolicyConfig(),
                                   iterations_per_step=2.5)
    assert (every.recv_interval_steps, every.batch_wait_iters) == (1, 0)
    with pytest.raises(ValueError, match="iterations_per_step must be >= 1, got 0.5"):
        steps_as_iterations(30, 0.5)
