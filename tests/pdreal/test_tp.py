"""Tensor parallelism: a TP = 2 runner (rank 1 in its own process, gloo all-reduces) computes what
TP = 1 computes, and retraction's offload/reload round-trips every rank's heads."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from pd_helpers import TINY  # noqa: E402

from pdreal.engine.common import EngineConfig, ModelRunner  # noqa: E402
from pdreal.engine.generate import generate  # noqa: E402
from pdreal.engine.tp_runner import TPModelRunner  # noqa: E402
from pdreal.model.batch import SeqChunk  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402
from pdreal.model.tp import check_tp, head_range, shard_spec  # noqa: E402
from pdreal.model.weights import ModelSource  # noqa: E402

pytestmark = [pytest.mark.real]
SOURCE = ModelSource("random", spec=TINY, seed=7)
CONFIG = EngineConfig(num_pages=64, page_size_tokens=4, tp_size=2)


@pytest.fixture(scope="module")
def tp2() -> Iterator[TPModelRunner]:
    runner = TPModelRunner(SOURCE, CONFIG)
    yield runner
    runner.close()


def test_shard_shapes_and_refusals() -> None:
    local = shard_spec(TINY, 2)
    assert (local.num_heads, local.num_kv_heads, local.ffn_size, local.hidden_size) == (2, 1, 32, 32)
    assert [head_range(6, r, 3) for r in range(3)] == [(0, 2), (2, 4), (4, 6)]
    with pytest.raises(ValueError, match="num_kv_heads 2 is not divisible by tp_size 4"):
        check_tp(TINY, 4)
    with pytest.raises(ValueError, match="num_heads 9 is not divisible by tp_size 2"):
        check_tp(replace(TINY, num_heads=9, num_kv_heads=3), 2)


def test_tp2_pool_holds_half_the_heads(tp2: TPModelRunner) -> None:
    assert tp2.pool.layout.num_kv_heads == 1
    assert tp2.model.spec.num_heads == 2 and tp2.model.spec.eos_token_ids == TINY.eos_token_ids


def test_tp2_logits_equal_tp1(tp2: TPModelRunner, tiny_model) -> None:  # noqa: ANN001
    tp1 = ModelRunner(tiny_model, replace(CONFIG, tp_size=1))
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 100, (n,), generator=gen).tolist() for n in (5, 13, 13)]
    logits = []
    for runner in (tp1, tp2):
        tables = [runner.pool.allocator.allocate(6) for _ in prompts]
        first = runner.forward([SeqChunk(p[:8], 0, t) for p, t in zip(prompts, tables, strict=True)])
        rest = runner.forward([SeqChunk(p[8:], 8, t) for p, t in zip(prompts[1:], tables[1:], strict=True)])
        decode = runner.forward([SeqChunk([1], len(p), t) for p, t in zip(prompts, tables, strict=True)])
        logits.append(torch.cat([first, rest, decode]))
        for table in tables:
            runner.pool.allocator.free(table)
    assert logits[0].shape == (8, TINY.vocab_size)
    torch.testing.assert_close(logits[1], logits[0], rtol=1e-5, atol=1e-5)
    assert logits[1].argmax(-1).tolist() == logits[0].argmax(-1).tolist()


def test_tp2_greedy_tokens_equal_tp1(tp2: TPModelRunner, tiny_model) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(4)
    prompts = [torch.randint(0, 100, (n,), generator=gen).tolist() for n in (3, 17, 30)]
    sampling = [SamplingParams(max_new_tokens=12, ignore_eos=True)] * 3
    expected = generate(ModelRunner(tiny_model, replace(CONFIG, tp_size=1)), prompts, sampling)
    assert generate(tp2, prompts, sampling) == expected
    assert len({tuple(t) for t in expected}) == 3  # distinct continuations: the check is not vacuous


def test_tp2_offload_reload_round_trips_every_rank(tp2: TPModelRunner) -> None:
    pages = tp2.pool.allocator.allocate(2)
    tp2.forward([SeqChunk(list(range(1, 9)), 0, pages)])
    host = tp2.offload_kv(pages, 8)
    assert host.shape == (TINY.num_layers, 2, 2, 4, TINY.num_kv_heads, TINY.head_dim)
    assert host[..., 1, :].abs().sum() > 0  # rank 1's head came back
    other = tp2.pool.allocator.allocate(2)
    tp2.reload_kv(other, host)
    assert torch.equal(tp2.offload_kv(other, 8), host)
    tp2.pool.allocator.free(pages + other)


def test_colocated_engine_on_tp2_decodes_as_tp1(tp2: TPModelRunner, tiny_model) -> None:  # noqa: ANN001
    """The engines see a TP runner as any runner: a colocated engine (chunked prefill mixed with
    decodes) on TP 2 emits TP 1's greedy tokens."""
    from pdreal.engine.colocated import ColocatedEngine
    from pdreal.engine.common import EngineRequest
    from pdreal.engine.driver import run_colocated

    cfg = replace(CONFIG, chunk_size_tokens=8, max_prefill_tokens=8)
    gen = torch.Generator().manual_seed(5)
    reqs = [EngineRequest(i, tuple(torch.randint(0, 100, (n,), generator=gen).tolist()),
                          SamplingParams(max_new_tokens=7, ignore_eos=True)) for i, n in enumerate([5, 21, 12])]
    tokens = []
    for runner in (ModelRunner(tiny_model, replace(cfg, tp_size=1)), tp2):
        engine = ColocatedEngine(runner, cfg)
        results = run_colocated(engine, reqs, add_every_steps=2)
        engine.check_invariants()
        tokens.append([results[r.request_id].token_ids for r in reqs])
    assert tokens[1] == tokens[0] and all(len(t) == 7 for t in tokens[0])
