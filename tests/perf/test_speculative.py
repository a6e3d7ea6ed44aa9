"""MTP / speculative decoding (pdsim/perf/speculative.py): hand-computed step times, the default
acceptance, validation, and a closed-loop run where TPOT falls by the step ratio."""

from __future__ import annotations

import pytest

from pdsim.cli import compose_config
from pdsim.config import PerfConfig
from pdsim.perf import build_latency_model, catalog
from pdsim.perf.linear import LinearModel
from pdsim.perf.speculative import SpeculativeModel, accepted_tokens, default_accepted_tokens

BASE_S, PER_SEQ_S, PER_CTX_S = 0.010, 0.001, 1e-6
INNER = LinearModel(prefill_base_s=0.02, prefill_per_token_s=1e-4, decode_base_s=BASE_S,
                    decode_per_seq_s=PER_SEQ_S, decode_per_ctx_token_s=PER_CTX_S)


def test_default_acceptance_from_the_deepseek_v3_report() -> None:
    assert default_accepted_tokens(0) == 1.0
    assert default_accepted_tokens(1) == pytest.approx(1.85, rel=1e-15)
    assert default_accepted_tokens(2) == pytest.approx(1 + 0.85 + 0.7225, rel=1e-15)
    assert accepted_tokens(2, 0.0) == default_accepted_tokens(2)
    assert accepted_tokens(2, 2.5) == 2.5


def test_decode_step_by_hand() -> None:
    """k = 2 drafts, 2.2 accepted, one draft layer of 61: verify 3n rows over the same KV."""
    mtp = SpeculativeModel(INNER, 2, 2.2, 1 / 61)
    n, ctx = 8, 8 * 1000
    verify = BASE_S + PER_SEQ_S * 3 * n + PER_CTX_S * ctx
    draft = 2 * (BASE_S + PER_SEQ_S * n + PER_CTX_S * ctx) / 61
    assert mtp.decode_time_s(n, ctx) == pytest.approx((verify + draft) / 2.2, rel=1e-12)
    assert mtp.decode_step(n).time_s(ctx) == mtp.decode_time_s(n, ctx)
    assert mtp.decode_time_s(0, 0) == 0.0
    assert mtp.prefill_time_s([(512, 0)]) == INNER.prefill_time_s([(512, 0)])
    # a step that carries prefill chunks is charged whole (no 1/a credit)
    items = [(256, 0)]
    assert mtp.mixed_time_s(items, n, ctx) == pytest.approx(INNER.mixed_time_s(items, 3 * n, ctx) + draft, rel=1e-12)
    assert mtp.mixed_time_s((), n, ctx) == mtp.decode_time_s(n, ctx)
    assert mtp.name == "linear+mtp2"


@pytest.mark.parametrize(("fields", "message"), [
    (dict(mtp_draft_tokens=2, mtp_accepted_tokens=3.5), "'mtp_accepted_tokens' must be in [1, mtp_draft_tokens + 1 = 3]"),
    (dict(mtp_draft_tokens=0, mtp_accepted_tokens=1.5), "'mtp_accepted_tokens' must be in [1, mtp_draft_tokens + 1 = 1]"),
    (dict(mtp_draft_tokens=-1), "'mtp_draft_tokens' must be >= 0, got -1"),
    (dict(mtp_draft_tokens=1, mtp_draft_layers=0), "'mtp_draft_layers' must be in [1, 32], got 0"),
])
def test_bad_mtp_fields_name_the_field(fields: dict, message: str) -> None:
    perf = PerfConfig(kind="linear", **fields)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]").replace("+", r"\+")):
        build_latency_model(perf, catalog.load_model("llama3_8b"), catalog.load_hardware("h100"), 1)


def test_mtp_run_lowers_tpot_by_the_step_ratio() -> None:
    """A decode-bound closed loop (8 clients, 4-token prompts, 64 outputs, linear perf): TPOT
    with MTP over TPOT without is the step ratio at the same batch, within 5% (prefill-carrying
    steps and the ramp differ)."""
    from pdsim.run import run_simulation

    base = ["model=llama3_8b", "hardware=h100", "perf=linear", "scenario=bench_random", "cluster.mode=colocated",
            "cluster.colocated=1", "scenario.num_requests=16", "scenario.concurrency=8",
            "scenario.input.value=4", "scenario.output.value=64", "progress=false"]
    plain = run_simulation(compose_config(base))
    mtp = run_simulation(compose_config([*base, "perf.mtp_draft_tokens=1", "perf.mtp_accepted_tokens=1.8"]))
    for out in (plain, mtp):
        assert (out.trace["status"] == "finished").all() and (out.trace["output_tokens"] == 64).all()
    cfg = compose_config(base)
    inner = build_latency_model(cfg.perf, cfg.model, cfg.hardware, 1)
    ctx = 8 * 36  # mean KV of 8 sequences mid-way through 64 outputs of 4-token prompts
    ratio = SpeculativeModel(inner, 1, 1.8, 1 / 32).decode_time_s(8, ctx) / inner.decode_time_s(8, ctx)
    measured = mtp.summary["tpot_s"]["mean"] / plain.summary["tpot_s"]["mean"]
    assert ratio < 0.75
    assert measured == pytest.approx(ratio, rel=0.05)


def test_mtp_scales_the_step_counted_limits_of_the_instances() -> None:
    """With MTP a simulator iteration is 1/a of an engine step, so SGLang's receive interval and
    TensorRT-LLM's batch waiting (counted in engine steps) are a x as many iterations."""
    from pdsim.sim.cluster import Simulation
    from pdsim.workload import build_workload

    base = ["model=llama3_8b", "hardware=h100", "perf=linear", "scenario=bench_random", "cluster.mode=colocated",
            "cluster.colocated=1", "scenario.num_requests=4", "scenario.concurrency=2",
            "cluster.recv_interval_steps=10", "cluster.batch_wait_iters=4", "progress=false"]
    for extra, limits in (([], (10, 4)), (["perf.mtp_draft_tokens=1", "perf.mtp_accepted_tokens=1.8"], (18, 7))):
        cfg = compose_config([*base, *extra])
        sim = Simulation(cfg, build_workload(cfg.scenario, cfg.seed, cfg.data_dir))
        (instance,) = sim.instances
        assert (instance.limits.recv_interval_steps, instance.limits.batch_wait_iters) == limits
