"""The radix prefix cache (pdreal/kv/radix.py) in the prefill and colocated engines.

Greedy tokens with the cache equal those without it, token for token, on prompts sharing prefixes:
a shared system prompt ending mid-page (the hit stops at its last full page), an identical prompt
(the hit stops short of the whole prompt), a prompt that is a prefix of an earlier one, and one
extending an earlier prompt past chunk boundaries. The hits are the numbers the page rule gives,
the prefill computes only the rest, and eviction under a small pool never frees a page a request
holds (checked after every step).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from pdreal.engine.colocated import ColocatedEngine  # noqa: E402
from pdreal.engine.common import EngineConfig, EngineRequest, ModelRunner  # noqa: E402
from pdreal.engine.driver import run_colocated, run_disaggregated  # noqa: E402
from pdreal.kv.allocator import PageAllocator  # noqa: E402
from pdreal.kv.radix import RadixCache  # noqa: E402
from pdreal.model.sampling import SamplingParams  # noqa: E402

PAGE = 4


def shared_prompts(seed: int = 0) -> list[tuple[int, ...]]:
    """sys (22 tokens: 5 pages + 2) + q0; sys + q1; the same again; sys[:13]; sys + q0 + 9 more."""
    gen = torch.Generator().manual_seed(seed)

    def rand(n: int) -> list[int]:
        return torch.randint(0, 100, (n,), generator=gen).tolist()

    system, q0, q1, more = rand(22), rand(5), rand(9), rand(9)
    first, second = system + q0, system + q1
    return [tuple(p) for p in (first, second, second, system[:13], first + more)]


# hits: none; sys's 5 full pages; all 7 full pages of the same 31-token prompt (the 8th is short);
# 3 of sys[:13]'s pages (12 tokens: its last token is computed); the first prompt's 6 full pages
EXPECTED_CACHED = [0, 20, 28, 12, 24]


def request(i: int, prompt: tuple[int, ...], max_new: int = 5) -> EngineRequest:
    return EngineRequest(i, prompt, SamplingParams(max_new_tokens=max_new, ignore_eos=True), bootstrap_room=2000 + i)


def run_pd_one_by_one(pd_factory, cache: bool) -> tuple[list[list[int]], list[int], object]:  # noqa: ANN001
    prefill_cfg = EngineConfig(num_pages=64, page_size_tokens=PAGE, chunk_size_tokens=8, prefix_cache=cache)
    pd = pd_factory(prefill_cfg=prefill_cfg)
    tokens, cached = [], []
    for i, prompt in enumerate(shared_prompts()):
        result = run_disaggregated(pd.prefill, pd.decode, [request(i, prompt)])[i]
        tokens.append(result.token_ids)
        cached.append(result.row["cached_prefix_tokens"])
        pd.check_invariants()
    return tokens, cached, pd


def test_pd_greedy_tokens_equal_with_and_without_the_cache(pd_factory) -> None:  # noqa: ANN001
    off_tokens, off_cached, _ = run_pd_one_by_one(pd_factory, cache=False)
    on_tokens, on_cached, pd = run_pd_one_by_one(pd_factory, cache=True)
    assert on_tokens == off_tokens and all(len(t) == 5 for t in on_tokens)
    assert off_cached == [0] * 5 and on_cached == EXPECTED_CACHED
    computed = sum(s.new_tokens for s in pd.prefill.runner.steps)
    assert computed == sum(map(len, shared_prompts())) - sum(EXPECTED_CACHED)
    # the last prompt's 12 new tokens after 24 cached ones ran as chunks of 8 and 4
    assert [(s.new_tokens, s.context_tokens) for s in pd.prefill.runner.steps][-2:] == [(8, 24), (4, 32)]
    cache = pd.prefill.cache
    assert cache.evictable_pages == cache.cached_pages == 6 + 2 + 0 + 0 + 3  # nothing locked when idle
    assert pd.prefill.stats().kv_used_tokens == 0


@pytest.mark.parametrize("schedule", ["mixed", "prefill_priority"])
def test_colocated_greedy_tokens_equal_with_and_without_the_cache(tiny_model, schedule: str) -> None:  # noqa: ANN001
    outputs = {}
    for cache in (False, True):
        cfg = EngineConfig(num_pages=64, page_size_tokens=PAGE, chunk_size_tokens=8, max_prefill_tokens=8,
                           colocated_schedule=schedule, prefix_cache=cache)
        eng = ColocatedEngine(ModelRunner(tiny_model, cfg), cfg)
        rows = []
        for i, prompt in enumerate(shared_prompts()):
            rows.append(run_colocated(eng, [request(i, prompt)])[i])
            eng.check_invariants()
        outputs[cache] = ([r.token_ids for r in rows], [r.row["cached_prefix_tokens"] for r in rows])
    assert outputs[True][0] == outputs[False][0]
    assert outputs[False][1] == [0] * 5 and outputs[True][1] == EXPECTED_CACHED


def step_checked(pd) -> tuple[list, list]:  # noqa: ANN001
    """One step of each engine, the KV writes it queued run to the end (so the schedule does not
    depend on the transfer thread's timing), then the invariants: no leak, every held cache page
    locked."""
    outs = pd.prefill.step(), pd.decode.step()
    assert pd.prefill.kv.wait_idle(10.0), "KV transfers still queued after 10 s"
    pd.check_invariants()
    return outs


def test_eviction_under_pressure_never_frees_a_page_in_use(pd_factory) -> None:  # noqa: ANN001
    """20 prompts over 4 system prompts (5 each in a row), all at once, through a 12-page prefill pool."""
    gen = torch.Generator().manual_seed(5)
    systems = [torch.randint(0, 100, (16,), generator=gen).tolist() for _ in range(4)]
    prompts = [tuple(systems[i // 5] + torch.randint(0, 100, (3 + i % 9,), generator=gen).tolist()) for i in range(20)]
    reqs = [request(i, p, max_new=3) for i, p in enumerate(prompts)]
    results = {}
    for cache in (False, True):
        cfg = EngineConfig(num_pages=12, page_size_tokens=PAGE, chunk_size_tokens=8, max_prefill_tokens=16,
                           prefix_cache=cache)
        pd = pd_factory(prefill_cfg=cfg, decode_cfg=EngineConfig(instance_id=1, num_pages=128, page_size_tokens=PAGE))
        for r in reqs:
            pd.prefill.add_request(r)
            pd.decode.add_request(replace(r, bootstrap_addr=pd.prefill.kv.bootstrap_addr))
        tokens: dict[int, list[int]] = {r.request_id: [] for r in reqs}
        rows = {}
        steps = 0
        while pd.prefill.has_work() or pd.decode.has_work():
            steps += 1
            assert steps < 500, f"cache={cache}: unfinished after 500 steps"
            prefill_outs, decode_outs = step_checked(pd)
            rows.update({out.request_id: out.row for out in prefill_outs if out.finished})
            for out in decode_outs:
                tokens[out.request_id].extend(out.token_ids)
        results[cache] = (tokens, rows, pd.prefill.cache)
    assert results[True][0] == results[False][0]
    assert all(len(t) == 3 for t in results[True][0].values())
    hits = [row["cached_prefix_tokens"] for _, row in sorted(results[True][1].items())]
    cache = results[True][2]
    # two of each group run together (both miss), the other three hit the system prompt's 4 pages;
    # every switch of system prompt evicts blocks of the previous ones
    assert hits == [0, 0, 16, 16, 16] * 4 and cache.evicted_blocks == 32
    assert cache.cached_pages <= 12


def test_radix_cache_evicts_only_unlocked_blocks_and_checks_it() -> None:
    allocator = PageAllocator(6)
    cache = RadixCache(allocator, PAGE)
    a, b = tuple(range(1, 13)), (50, 51, 52, 53, 54)  # a: 3 full pages; b: 1 full page + 1
    for prompt in (a, b):
        hashes = cache.hashes(prompt)
        prefix = cache.lock([], 0.0)
        pages = cache.allocate(-(-len(prompt) // PAGE))
        cache.release(prefix, pages, hashes, len(prompt), True, 1.0)
    assert cache.cached_pages == 4 and allocator.num_free == 2
    held = cache.lock(cache.match(cache.hashes(a), len(a) + 1), 2.0)  # a 13-token prompt: a's 3 pages hit
    assert len(held.pages) == 3 and cache.free_pages == 2 + 1
    assert cache.allocate(4) is None  # b's page is all that may go: a's are locked
    mine = cache.allocate(3)
    assert mine is not None and cache.evicted_blocks == 1 and not set(mine) & set(held.pages)
    cache.check_invariants([held])
    cache.tree.unlock(held.path, 3.0)  # a bug: the pages are still in the request's page table
    cache.tree.evict(3)
    with pytest.raises(AssertionError, match="in use"):
        cache._free_evicted()
        cache.check_invariants([held])
