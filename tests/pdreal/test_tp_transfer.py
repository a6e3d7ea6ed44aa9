"""KV transfer between instances of different TP sizes (seed 003's heterogeneous parallelism).

In-process: the head-slice protocol between per-rank managers of the `local` backend (rank pools
filled with known values; the decode pools must end up holding exactly their heads). End to end:
prefill TP = m -> decode TP = n over Mooncake TCP on loopback, rank processes and all, must
decode what TP 1 -> 1 decodes.
"""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from pd_helpers import TINY  # noqa: E402

from pdreal.engine.common import EngineConfig, EngineRequest  # noqa: E402
from pdreal.engine.decode import DecodeEngine  # noqa: E402
from pdreal.engine.driver import run_disaggregated  # noqa: E402
from pdreal.engine.prefill import PrefillEngine  # noqa: E402
from pdreal.engine.tp_runner import make_runner  # noqa: E402
from pdreal.kv.pool import KVLayout, KVPool  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdreal.model.weights import ModelSource  # noqa: E402
from pdreal.transfer import KVPoll, LocalHub, TransferAux, TransferConfig, make_kv_manager  # noqa: E402
from pdreal.transfer.slices import dest_count, overlap, source_ranks  # noqa: E402

pytestmark = [pytest.mark.real]
HEADS = 4  # KV heads of the model in the in-process tests


def test_overlaps_follow_the_head_ranges() -> None:
    assert source_ranks(4, dst_rank=0, dst_size=1, src_size=2) == [0, 1]  # N:1 gather
    assert source_ranks(4, dst_rank=1, dst_size=2, src_size=1) == [0]  # 1:N split
    assert source_ranks(8, dst_rank=1, dst_size=2, src_size=4) == [2, 3]  # seed 001's 4 -> 2 example
    assert dest_count(4, src_rank=0, src_size=1, dst_size=2) == 2
    half = overlap(4, src_rank=0, src_size=1, dst_rank=1, dst_size=2)
    assert half is not None and (half.src_head, half.dst_head, half.num_heads) == (2, 0, 2)
    assert overlap(4, src_rank=0, src_size=2, dst_rank=1, dst_size=2) is None


def _pools(tp: int, fill: bool) -> list[KVPool]:
    layout = KVLayout(num_layers=2, num_pages=8, page_size_tokens=2, num_kv_heads=HEADS // tp, head_dim=3,
                      dtype_bytes=4)
    pools = [KVPool(layout, torch.float32) for _ in range(tp)]
    if fill:  # value = global head * 1000 + layer * 100 + kv * 10 + page, so every slice is recognisable
        for rank, pool in enumerate(pools):
            heads = torch.arange(rank * layout.num_kv_heads, (rank + 1) * layout.num_kv_heads, dtype=torch.float32)
            index = (heads[None, None, None, None, :, None] * 1000 + torch.arange(2.0)[:, None, None, None, None, None]
                     * 100 + torch.arange(2.0)[None, :, None, None, None, None] * 10
                     + torch.arange(8.0)[None, None, :, None, None, None])
            pool.buffer.copy_(index.expand_as(pool.buffer))
    return pools


def _managers(pools: list[KVPool], hub: LocalHub) -> list:  # noqa: ANN202
    return [make_kv_manager(TransferConfig(backend="local", tp_rank=r, tp_size=len(pools)), pool, hub)
            for r, pool in enumerate(pools)]


@pytest.mark.parametrize(("m", "n"), [(2, 1), (1, 2), (2, 4), (4, 2), (2, 2)])
def test_head_slices_land_in_the_right_decode_rank(m: int, n: int) -> None:
    hub = LocalHub()
    src_pools, dst_pools = _pools(m, fill=True), _pools(n, fill=False)
    prefill, decode = _managers(src_pools, hub), _managers(dst_pools, hub)
    addr = ",".join(p.bootstrap_addr for p in prefill)
    try:
        senders = [p.create_sender(9) for p in prefill]
        receivers = [d.create_receiver(addr, 9) for d in decode]
        for receiver in receivers:
            receiver.init([5, 6])
        assert [s.poll() for s in senders] == [KVPoll.WaitingForInput] * m
        for sender in senders:
            sender.send([1, 2], TransferAux(9, first_token_id=42))
        deadline = time.monotonic() + 10
        while any(r.poll() != KVPoll.Success for r in receivers) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [r.poll() for r in receivers] == [KVPoll.Success] * n
        assert {r.aux().first_token_id for r in receivers} == {42}
        whole = torch.cat([p.buffer for p in dst_pools], dim=4)
        expected = torch.cat([p.buffer for p in src_pools], dim=4)
        assert torch.equal(whole[:, :, 5:7], expected[:, :, 1:3])
        assert whole[:, :, :5].abs().sum() == 0 and whole[:, :, 7:].abs().sum() == 0
        assert sum(r.aux().transfer_bytes for r in receivers) == 2 * 2 * 2 * 2 * HEADS * 3 * 4
    finally:
        for manager in prefill + decode:
            manager.close()


def test_mismatched_total_heads_fail_the_room() -> None:
    hub = LocalHub()
    prefill = _managers(_pools(2, fill=True), hub)
    odd = KVPool(KVLayout(2, 8, 2, 2, 3, 4), torch.float32)  # 2 heads x TP 1 != 2 x 2
    decode = make_kv_manager(TransferConfig(backend="local"), odd, hub)
    try:
        senders = [p.create_sender(3) for p in prefill]
        receiver = decode.create_receiver(",".join(p.bootstrap_addr for p in prefill), 3)
        receiver.init([0])
        assert [s.poll() for s in senders] == [KVPoll.Failed] * 2
        assert "2 heads x TP 2 != 2 heads x TP 1" in senders[0].failure_reason
        three = decode.create_receiver(",".join(p.bootstrap_addr for p in prefill) + ",local-99", 4)
        assert three.poll() == KVPoll.Failed and "cannot be split" in three.failure_reason
    finally:
        for manager in [*prefill, decode]:
            manager.close()


# ---- end to end over Mooncake ------------------------------------------------------------------
MOONCAKE = TransferConfig(backend="mooncake", host="127.0.0.1", protocol="tcp")
SOURCE = ModelSource("random", spec=TINY, seed=7)


def _decode(p_tp: int, d_tp: int, reqs: list[EngineRequest], **decode: int) -> tuple[list[list[int]], int]:
    """(each request's decoded tokens, retractions on the decode side); `decode`: EngineConfig
    fields of the decode instance."""
    p_cfg = EngineConfig(num_pages=64, page_size_tokens=4, chunk_size_tokens=8, tp_size=p_tp)
    d_cfg = EngineConfig(**{"instance_id": 1, "num_pages": 64, "page_size_tokens": 4, "tp_size": d_tp, **decode})
    runners = [make_runner(SOURCE, p_cfg), make_runner(SOURCE, d_cfg)]
    managers = [runner.kv_manager(MOONCAKE) for runner in runners]
    try:
        prefill = PrefillEngine(runners[0], managers[0], p_cfg)
        decode = DecodeEngine(runners[1], managers[1], d_cfg)
        results = run_disaggregated(prefill, decode, reqs)
        prefill.check_invariants()
        decode.check_invariants()
        assert all(results[r.request_id].row["status"] == "finished" for r in reqs)
        return ([results[r.request_id].token_ids for r in reqs],
                sum(results[r.request_id].row["num_retractions"] for r in reqs))
    finally:
        for manager in managers:
            manager.close()
        for runner in runners:
            runner.close()


def _requests(room: int) -> list[EngineRequest]:
    gen = torch.Generator().manual_seed(11)
    return [EngineRequest(i, tuple(torch.randint(0, 100, (n,), generator=gen).tolist()),
                          SamplingParams(max_new_tokens=6, ignore_eos=True), bootstrap_room=room + i)
            for i, n in enumerate([6, 19, 33])]


@pytest.fixture(scope="module")
def one_to_one() -> list[list[int]]:
    pytest.importorskip("mooncake.engine")
    return _decode(1, 1, _requests(100))[0]


@pytest.mark.parametrize(("m", "n"), [(2, 1), (1, 2), (2, 2)])
def test_mooncake_tp_m_to_n_decodes_as_one_to_one(m: int, n: int, one_to_one: list[list[int]]) -> None:
    assert len({tuple(t) for t in one_to_one}) == 3 and all(len(t) == 6 for t in one_to_one)
    assert _decode(m, n, _requests(200 + 10 * m + n))[0] == one_to_one


def test_mooncake_one_to_two_with_retractions_decodes_as_single_process(tiny_model) -> None:  # noqa: ANN001
    """A decode pool too small for all three: retracted requests' KV is gathered from both decode
    ranks to host and scattered back on resume; the tokens are one process's."""
    from pdreal.engine.common import ModelRunner
    from pdreal.engine.generate import generate

    reqs = [EngineRequest(i, tuple(range(1 + i, 11 + 2 * i + i)), SamplingParams(max_new_tokens=20, ignore_eos=True),
                          bootstrap_room=300 + i) for i in range(3)]
    tokens, retractions = _decode(1, 2, reqs, num_pages=16, decode_reserved_tokens=1)
    expected = generate(ModelRunner(tiny_model, EngineConfig(num_pages=64, page_size_tokens=4)),
                        [list(r.input_ids) for r in reqs], [r.sampling for r in reqs])
    assert retractions > 0 and tokens == expected


@pytest.mark.slow
def test_pdreal_serve_prefill_tp2_decode_tp1(tmp_path, tiny_model) -> None:  # noqa: ANN001
    """`pdreal serve cluster.prefill_tp=2`: the prefill scheduler spawns its rank process, the
    decode reads both ranks' heads; greedy output equals one process's."""
    pytest.importorskip("aiohttp")
    from serving_helpers import post, tiny_model_file

    from pdreal.engine.common import ModelRunner
    from pdreal.engine.generate import generate
    from pdreal.serving.config import load_serve_config
    from pdreal.serving.launch import LocalCluster

    cfg = load_serve_config(None, [f"node.model={tiny_model_file(tmp_path)}", "node.model_seed=7",
                                   "cluster.page_size_tokens=4", "cluster.prefill_tp=2", "node.num_pages=64"])
    prompts = [[int(t) for t in r.input_ids] for r in _requests(0)]
    sampling = SamplingParams(max_new_tokens=6, ignore_eos=True)
    expected = generate(ModelRunner(tiny_model, EngineConfig(num_pages=64, page_size_tokens=4)), prompts,
                        [sampling] * len(prompts))
    with LocalCluster(cfg, tmp_path / "cluster", log_dir=tmp_path) as cluster:
        outputs = []
        for prompt in prompts:
            body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 6, "temperature": 0, "ignore_eos": True}}
            status, out = post(f"{cluster.url}/generate", body, 60.0)
            assert status == 200, out
            outputs.append(out["output_ids"])
            assert out["meta_info"]["trace"]["transfer_bytes"] > 0
    assert outputs == expected


class _InProcessRanks:
    """A RankChannel whose other ranks are RankRooms in this process (no processes, no gloo)."""

    def __init__(self, others: list) -> None:  # noqa: ANN001
        self.others, self._polls, self.reductions = others, [], 0

    def post(self, command: tuple) -> None:
        if command[0] == "kv":
            for rooms in self.others:
                rooms.apply(command[1], command[2])
        elif command[0] == "kv_poll":
            self._polls = [rooms.polls(command[1]) for rooms in self.others]

    def call(self, command: tuple) -> list:
        assert command[0] == "kv_reason"
        return [rooms.reason(command[1]) for rooms in self.others]

    def all_reduce_min(self, values):  # noqa: ANN001, ANN201
        self.reductions += 1
        for polls in self._polls:
            values = torch.minimum(values, torch.tensor(polls, dtype=values.dtype))
        return values

    def set_wake(self, wake) -> None:  # noqa: ANN001
        pass


def test_tp_polls_are_the_min_over_ranks_once_per_room_per_round() -> None:
    from pdreal.transfer.tp import RankRooms, TPKVManager

    hub = LocalHub()
    ranks = _managers(_pools(2, fill=True), hub)
    decode = _managers(_pools(1, fill=False), hub)[0]
    channel = _InProcessRanks([RankRooms(ranks[1])])
    tp = TPKVManager(ranks[0], channel, [m.bootstrap_addr for m in ranks])
    try:
        senders = [tp.create_sender(room) for room in (1, 2)]
        assert tp.bootstrap_addr == "local-0,local-1"
        receivers = [decode.create_receiver(tp.bootstrap_addr, room) for room in (1, 2)]
        assert [s.poll() for s in senders] == [KVPoll.Bootstrapping] * 2 and channel.reductions == 1
        receivers[0].init([0])
        receivers[1].init([1])
        assert senders[0].poll() == KVPoll.WaitingForInput and channel.reductions == 2  # room 1 again
        assert senders[1].poll() == KVPoll.WaitingForInput and channel.reductions == 2  # same round
        channel.others[0].end(2).abort("rank 1 lost its link")  # one rank fails: the room fails on all
        senders[0].send([3], TransferAux(1, first_token_id=7))
        deadline = time.monotonic() + 10
        while receivers[0].poll() != KVPoll.Success and time.monotonic() < deadline:
            time.sleep(0.01)
        assert receivers[0].poll() == KVPoll.Success
        assert (senders[0].poll(), senders[1].poll()) == (KVPoll.Success, KVPoll.Failed)
        assert ranks[0]._senders[2].state.get() == KVPoll.WaitingForInput  # rank 0 alone saw nothing
        assert senders[1].failure_reason == "rank 1 lost its link"
        for sender in senders:
            sender.close()
        assert tp.num_rooms() == 0 and ranks[1].num_rooms() == 0
    finally:
        for manager in [*ranks, decode]:
            manager.close()
