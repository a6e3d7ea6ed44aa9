"""Prompt logprobs (echo + logprobs) in the engines: every prompt token's logprob given the tokens
before it equals the log-softmax of a single dense forward over the whole prompt, on a PD pair
and a colocated engine, across chunk boundaries, beside a request that does not ask, and after
an identical prompt filled the prefix cache (a request that asks never takes cached tokens)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from pdreal.engine.colocated import ColocatedEngine  # noqa: E402
from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner  # noqa: E402
from pdreal.engine.driver import run_colocated, run_disaggregated  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402

PAGE, TOP = 4, 3
PROMPT = tuple(torch.randint(0, 100, (21,), generator=torch.Generator().manual_seed(3)).tolist())  # 3 chunks of 8


def reference(model: Any, prompt: tuple[int, ...], top: int) -> list[Any]:
    """[None, then per prompt token j >= 1: [logprob, [[id, logprob] x top]]] from one dense forward."""
    logp = torch.log_softmax(model.forward_dense(list(prompt)).float(), dim=-1)
    values, ids = torch.topk(logp[:-1], top, dim=-1)
    return [None] + [[float(logp[j - 1, prompt[j]]), [[int(t), float(v)] for t, v in zip(ids[j - 1], values[j - 1],
                                                                                         strict=True)]]
                     for j in range(1, len(prompt))]


def assert_close(found: tuple[Any, ...], expected: list[Any], tol: float = 1e-4) -> None:
    assert len(found) == len(expected) and found[0] is None
    for (lp, top), (ref_lp, ref_top) in zip(found[1:], expected[1:], strict=True):
        assert abs(lp - ref_lp) < tol
        assert [t for t, _ in top] == [t for t, _ in ref_top]
        assert all(abs(v - rv) < tol for (_, v), (_, rv) in zip(top, ref_top, strict=True))


def request(i: int, prompt_logprobs: int) -> EngineRequest:
    sampling = SamplingParams(max_new_tokens=3, ignore_eos=True, logprobs=prompt_logprobs,
                              prompt_logprobs=prompt_logprobs)
    return EngineRequest(i, PROMPT, sampling, bootstrap_room=4000 + i)


def test_pd_prompt_logprobs_match_dense_and_skip_the_cache(pd_factory, tiny_model) -> None:  # noqa: ANN001
    pd = pd_factory(prefill_cfg=EngineConfig(num_pages=64, page_size_tokens=PAGE, chunk_size_tokens=8))
    expected = reference(tiny_model, PROMPT, TOP)
    plain = run_disaggregated(pd.prefill, pd.decode, [request(0, -1)])[0]  # fills the prefix cache
    assert plain.prompt_logprobs == ()
    both = run_disaggregated(pd.prefill, pd.decode, [request(1, TOP), request(2, -1)])  # one forward, mixed asks
    assert both[1].row["cached_prefix_tokens"] == 0 and both[2].row["cached_prefix_tokens"] == 20
    assert_close(both[1].prompt_logprobs, expected)
    assert both[2].prompt_logprobs == () and both[1].token_ids == plain.token_ids == both[2].token_ids
    pd.check_invariants()


@pytest.mark.parametrize("schedule", ["mixed", "prefill_priority"])
def test_colocated_prompt_logprobs_match_dense_and_skip_the_cache(tiny_model, schedule: str) -> None:  # noqa: ANN001
    cfg = EngineConfig(num_pages=64, page_size_tokens=PAGE, chunk_size_tokens=8, max_prefill_tokens=8,
                       colocated_schedule=schedule)
    eng = ColocatedEngine(ModelRunner(tiny_model, cfg), cfg)
    plain = run_colocated(eng, [request(0, -1)])[0]
    asked = run_colocated(eng, [request(1, TOP), request(2, -1)], add_every_steps=1)
    assert asked[1].row["cached_prefix_tokens"] == 0 and asked[2].row["cached_prefix_tokens"] == 20
    assert_close(asked[1].prompt_logprobs, reference(tiny_model, PROMPT, TOP))
    assert asked[2].prompt_logprobs == () and asked[1].token_ids == plain.token_ids
    eng.check_invariants()
