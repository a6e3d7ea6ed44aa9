"""Synthetic workloads: determinism, rates, burstiness, lengths, prefix sharing."""

from __future__ import annotations

import numpy as np
import pytest

from pdsim.config import LengthDist, PrefixConfig, ScenarioConfig
from pdsim.workload import build_workload


def _cfg(**kw) -> ScenarioConfig:
    return ScenarioConfig(name="syn", **kw)


def test_same_seed_same_workload_different_seed_differs():
    cfg = _cfg(num_requests=200, input=LengthDist(kind="lognormal", mean=1000, sigma=0.5, low=1, high=10**6))
    a, b, c = build_workload(cfg, seed=1), build_workload(cfg, seed=1), build_workload(cfg, seed=2)
    assert np.array_equal(a.arrival_s, b.arrival_s) and np.array_equal(a.input_tokens, b.input_tokens)
    assert not np.array_equal(a.arrival_s, c.arrival_s)


def test_poisson_rate_and_gamma_burstiness():
    n = 20000
    poisson = build_workload(_cfg(num_requests=n, rate_rps=5.0), seed=3)
    gamma = build_workload(_cfg(num_requests=n, rate_rps=5.0, arrival="gamma", arrival_cv=3.0), seed=3)
    assert poisson.mean_rate_rps() == pytest.approx(5.0, rel=0.03)
    assert gamma.mean_rate_rps() == pytest.approx(5.0, rel=0.1)
    cv = lambda w: np.diff(w.arrival_s).std() / np.diff(w.arrival_s).mean()  # noqa: E731
    assert cv(poisson) == pytest.approx(1.0, abs=0.05)
    assert cv(gamma) == pytest.approx(3.0, rel=0.1)


def test_length_distributions():
    n = 20000
    uni = build_workload(_cfg(num_requests=n, input=LengthDist(kind="uniform", low=10, high=20)))
    assert uni.input_tokens.min() == 10 and uni.input_tokens.max() == 20
    logn = build_workload(_cfg(num_requests=n, input=LengthDist(kind="lognormal", mean=800, sigma=0.5, low=1, high=10**7)))
    assert logn.input_tokens.mean() == pytest.approx(800, rel=0.03)
    fixed = build_workload(_cfg(num_requests=5, output=LengthDist(kind="fixed", value=7)))
    assert fixed.output_tokens.tolist() == [7] * 5


def test_system_prompts_and_sessions_share_prefix_blocks():
    cfg = _cfg(
        num_requests=12,
        rate_rps=1.0,
        input=LengthDist(kind="fixed", value=300),
        output=LengthDist(kind="fixed", value=100),
        prefix=PrefixConfig(block_tokens=256, num_system_prompts=1, system_prompt_tokens=512, session_turns=3),
    )
    reqs = sorted(build_workload(cfg, seed=0), key=lambda r: (r.session_id, r.arrival_s))
    s0 = [r for r in reqs if r.session_id == 0]
    assert [r.input_tokens for r in s0] == [812, 1212, 1612]
    # every request starts with the system prompt's two blocks
    assert all(r.hash_ids[:2] == (0, 1) for r in reqs)
    # turn 2 shares every full block of turn 1's prompt+answer (912 tokens -> 3 full blocks)
    assert s0[1].hash_ids[:3] == s0[0].hash_ids[:3]
    assert s0[1].hash_ids[3] != s0[0].hash_ids[3]  # turn 1's partial block is not reused
    assert len(s0[2].hash_ids) == -(-1612 // 256)
    other = [r for r in reqs if r.session_id == 1][0]
    assert set(other.hash_ids[2:]).isdisjoint(s0[0].hash_ids)


def test_sessions_offer_the_requested_request_rate():
    # 4-turn sessions with 20 s think times: the request rate is the one asked for, from the
    # first second (sessions in progress when the window opens), whatever the count
    prefix = PrefixConfig(session_turns=4, think_time_s=20.0)
    for rate, n in ((50.0, 2000), (2.0, 400)):
        wl = build_workload(_cfg(num_requests=n, rate_rps=rate, prefix=prefix), seed=5)
        assert len(wl) == n and wl.mean_rate_rps() == pytest.approx(rate, rel=0.1)
        half = wl.arrival_s.max() / 2
        assert (wl.arrival_s < half).sum() == pytest.approx(n / 2, rel=0.15)
    assert len(set(wl.session_id.tolist())) > n / 4  # windows cut sessions: many partial ones


def test_prompt_pool_repeats_whole_prompts_in_shuffled_passes() -> None:
    # AIPerf's dataset: N prompts, each pass a permutation of all N; a repeat carries the same
    # length and block ids (a prefix-cache hit of all but its last token), outputs stay per request
    cfg = _cfg(num_requests=25, input=LengthDist(kind="uniform", low=20, high=60), output=LengthDist(value=7),
               prefix=PrefixConfig(block_tokens=16, prompt_pool=10))
    wl = build_workload(cfg, seed=3)
    hashes = [r.hash_ids for r in wl]
    for start in (0, 10):  # the first two passes each hold every prompt once
        assert len(set(hashes[start:start + 10])) == 10
    assert set(hashes[:10]) == set(hashes[10:20]) and set(hashes[20:]) <= set(hashes[:10])
    for i in range(25):
        first = hashes.index(hashes[i])
        assert wl.input_tokens[i] == wl.input_tokens[first]
        assert len(hashes[i]) == -(-int(wl.input_tokens[i]) // 16)
    assert len({h for hs in hashes for h in hs}) == sum(len(h) for h in set(hashes))  # no block shared across prompts
    assert hashes[:10] != hashes[10:20]  # reshuffled
    assert (wl.output_tokens == 7).all()


@pytest.mark.parametrize(("prefix", "message"), [
    (PrefixConfig(prompt_pool=-1), "must be >= 0, got -1"),
    (PrefixConfig(prompt_pool=5, session_turns=2), "5 needs session_turns=1 and no system prompts"),
    (PrefixConfig(prompt_pool=5, num_system_prompts=2, system_prompt_tokens=64), "no system prompts"),
])
def test_bad_prompt_pool_names_the_field(prefix: PrefixConfig, message: str) -> None:
    from pdsim.workload.errors import WorkloadError

    with pytest.raises(WorkloadError, match="prefix.prompt_pool") as err:
        build_workload(_cfg(num_requests=10, prefix=prefix), seed=1)
    assert message in str(err.value)
