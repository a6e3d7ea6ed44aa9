"""SGLang's prefill DP dispatch (bootstrap_room % dp, one queue and budget per rank), by hand."""

from __future__ import annotations

import pytest

from pdsim.config import ClusterConfig, PolicyConfig
from pdsim.policy import (
    BOOTSTRAP_ROOM,
    PrefillBudget,
    RequestView,
    StepLimits,
    check_dispatch,
    form_ranked_prefill_batch,
    plan_ranked_prefill_step,
    prefill_dp_rank,
)
from pdsim.policy.dp_dispatch import rank_budget


def _req(rid: int, tokens: int, prefilled: int = 0) -> RequestView:
    return RequestView(rid, tokens, 1, prefilled_tokens=prefilled)


def _budget(tokens: int, free_kv: int = 1 << 20, max_requests: int = 0) -> PrefillBudget:
    return PrefillBudget(max_prefill_tokens=tokens, chunk_size_tokens=tokens, page_size_tokens=16,
                         free_kv_tokens=free_kv, max_requests=max_requests)


def test_rank_is_room_mod_dp() -> None:
    assert [prefill_dp_rank(room, 4) for room in (0, 5, 10, 2**63 - 1)] == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="bootstrap_room must be >= 0, got -1"):
        prefill_dp_rank(-1, 4)
    with pytest.raises(ValueError, match="dp_ranks must be >= 1, got 0"):
        prefill_dp_rank(3, 0)


def test_rank_budget_is_the_instance_budget_over_dp() -> None:
    share = rank_budget(_budget(4096, max_requests=10), 4)
    assert (share.max_prefill_tokens, share.chunk_size_tokens, share.max_requests) == (1024, 1024, 2)
    assert share.free_kv_tokens == 1 << 20  # the ranks draw on the instance's one pool


def test_each_rank_fills_its_own_budget() -> None:
    # 2 ranks of 1024 tokens each. Rank 0: r1 (600), then r2 is cut at 1024 - 600 = 424 -> 416
    # (a whole number of 16-token pages) and closes rank 0; r4 (rank 0) is not taken though rank
    # 1 still has room. Rank 1: r3 (300), r5 (700); r6 (100) would overflow: chunked to 16.
    cands = [(0, _req(1, 600)), (0, _req(2, 600)), (1, _req(3, 300)), (0, _req(4, 100)),
             (1, _req(5, 700)), (1, _req(6, 100))]
    batch, ranks = form_ranked_prefill_batch(cands, _budget(2048), 2)
    got = [(c.request_id, c.new_tokens, c.is_last) for c in batch.chunks]
    assert got == [(1, 600, True), (2, 416, False), (3, 300, True), (5, 700, True), (6, 16, False)]
    assert ranks == (0, 0, 1, 1, 1)
    assert batch.stop_reason == "chunked"


def test_one_busy_rank_leaves_the_others_idle() -> None:
    # three prompts all drawn to rank 1: rank 1 takes what its 1024 tokens hold, rank 0 nothing,
    # where one balanced batch of 2048 tokens would have taken all three
    cands = [(1, _req(i, 500)) for i in range(3)]
    batch, ranks = form_ranked_prefill_batch(cands, _budget(2048), 2)
    assert [(c.request_id, c.new_tokens) for c in batch.chunks] == [(0, 500), (1, 500), (2, 16)]
    assert ranks == (1, 1, 1)


def test_ranks_share_the_kv_pool() -> None:
    # 1000 free KV tokens: r1 takes 38 pages (608 tokens), r2 on the other rank 19 pages (304);
    # r3 (200 tokens, 13 pages) no longer fits in the 88 left and closes its rank on memory
    cands = [(0, _req(1, 600)), (1, _req(2, 300)), (0, _req(3, 200))]
    batch, _ = form_ranked_prefill_batch(cands, _budget(4096, free_kv=1000), 2)
    assert [c.request_id for c in batch.chunks] == [1, 2]
    assert sum(c.new_pages for c in batch.chunks) == 38 + 19
    assert batch.stop_reason == "memory"


def test_stops_reading_once_every_rank_closed() -> None:
    seen: list[int] = []

    def cands():
        for rid in range(100):
            seen.append(rid)
            yield rid % 2, _req(rid, 1024)

    batch, _ = form_ranked_prefill_batch(cands(), _budget(2048), 2)
    assert [c.request_id for c in batch.chunks] == [0, 1]
    assert seen == [0, 1, 2, 3]  # r2 and r3 close their ranks; nothing after them is viewed


def test_rank_outside_the_instance_is_refused() -> None:
    with pytest.raises(ValueError, match="request 7 on rank 2, outside 0..1"):
        form_ranked_prefill_batch([(2, _req(7, 10))], _budget(2048), 2)


class _Executor:
    def __init__(self, rooms: dict[int, int], tokens: int) -> None:
        self.rooms, self.tokens = rooms, tokens

    def prefill_candidates(self):
        return (_req(rid, self.tokens) for rid in self.rooms)

    def free_kv_tokens(self) -> int:
        return 1 << 20

    def bootstrap_room(self, request_id: int) -> int:
        return self.rooms[request_id]


def test_planner_reads_rooms_and_per_rank_limits() -> None:
    cluster = ClusterConfig(max_prefill_tokens=1024, chunk_size_tokens=1024, prefill_dp_dispatch=BOOTSTRAP_ROOM)
    limits = StepLimits.from_config(cluster, PolicyConfig(), ranks=4)
    assert (limits.prefill_token_budget, limits.prefill_dp_dispatch) == (4096, BOOTSTRAP_ROOM)
    # rooms 8, 13, 4, 6, 3 -> ranks 0, 1, 0, 2, 3: rank 0 holds two 600-token prompts, one chunked
    rooms = {10: 8, 11: 13, 12: 4, 13: 6, 14: 3}
    batch = plan_ranked_prefill_step(limits, _Executor(rooms, 600))
    assert [(c.request_id, c.new_tokens) for c in batch.chunks] == [(10, 600), (11, 600), (12, 416), (13, 600), (14, 600)]
    assert [prefill_dp_rank(rooms[c.request_id], 4) for c in batch.chunks] == [0, 1, 0, 2, 3]


def test_unknown_dispatch_names_field_and_value() -> None:
    assert check_dispatch(BOOTSTRAP_ROOM) == BOOTSTRAP_ROOM
    with pytest.raises(ValueError, match=r"cluster: field 'prefill_dp_dispatch' has unknown value 'roomy'"):
        StepLimits(prefill_dp_dispatch="roomy")
