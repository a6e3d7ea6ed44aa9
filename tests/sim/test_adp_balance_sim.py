"""TensorRT-LLM's attention-DP balance in the simulator (pdsim.policy.adp_balance): a DP8/EP8
DeepSeek-V3 instance on B200 tables, a closed loop of 24 clients (a trickle of arrivals once the
first wave is in). The end-of-run invariants (simulate) include that no DP rank still holds a
request."""

from __future__ import annotations

import pandas as pd
import pytest

from pdsim.cli import compose_config
from pdsim.run import run_simulation

BASE = [
    "model=deepseek_v3", "hardware=b200", "perf=measured", "perf.engine_version=0.5.14",
    "model.gemm_quant=fp8_block", "model.moe_quant=fp8_block", "cluster.mode=colocated", "cluster.colocated=1",
    "cluster.colocated_tp=1", "cluster.colocated_dp=8", "cluster.colocated_moe_ep=8", "scenario=bench_random",
    "scenario.num_requests=72", "scenario.concurrency=24", "scenario.input.kind=random",
    "scenario.input.value=512", "scenario.input.range_ratio=0.5", "scenario.output.kind=random",
    "scenario.output.value=64", "scenario.output.range_ratio=0.5", "cluster.prefix_cache=false",
    "progress=false",
]


def _trace(*extra: str) -> pd.DataFrame:
    trace = run_simulation(compose_config([*BASE, *extra])).trace
    assert len(trace) == 72 and (trace["status"] == "finished").all()
    return trace


@pytest.fixture(scope="module")
def off() -> pd.DataFrame:
    return _trace()


def test_a_timeout_of_one_iteration_never_holds_a_prompt(off: pd.DataFrame) -> None:
    """Timeout 1 and no batching wait: every iteration releases what waits - the same run."""
    on = _trace("cluster.adp_balance=true", "cluster.adp_timeout_iters=1", "cluster.adp_batching_wait_iters=0")
    cols = ["request_id", "prefill_start_s", "first_token_s", "last_token_s"]
    pd.testing.assert_frame_equal(on[cols], off[cols])


def test_the_balance_holds_prompts_for_the_timeouts_turn(off: pd.DataFrame) -> None:
    on = _trace("cluster.adp_balance=true", "cluster.adp_timeout_iters=60", "cluster.adp_batching_wait_iters=0")
    wait_on = on["prefill_start_s"] - on["prefill_waiting_enter_s"]
    wait_off = off["prefill_start_s"] - off["prefill_waiting_enter_s"]
    # the first wave (every rank empty) runs at once either way ...
    first = on["prefill_waiting_enter_s"] == on["prefill_waiting_enter_s"].min()
    assert first.sum() == 24
    assert wait_on[first].max() == pytest.approx(wait_off[first].max())
    # ... later prompts wait for all ranks or the timeout, up to 60 decode iterations: more than
    # without the balance, and at most 60 of the longest iteration the run could have (a mixed
    # step of every rank's prompt beside 24 decodes, bounded here by the first wave's prefill)
    later_on, later_off = wait_on[~first], wait_off[~first]
    assert later_on.mean() > 3 * later_off.mean()
    first_wave_s = on.loc[first, "first_token_s"].max() - on["prefill_waiting_enter_s"].min()
    assert later_on.max() <= 60 * first_wave_s
    # what the prompts wait for the decodes gain: fewer mixed iterations, so a lower TPOT
    tpot = lambda t: ((t.last_token_s - t.first_token_s) / (t.output_tokens - 1)).mean()  # noqa: E731
    assert tpot(on) < tpot(off)
