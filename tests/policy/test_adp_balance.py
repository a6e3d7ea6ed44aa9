"""TensorRT-LLM's attention-DP balance (pdsim.policy.adp_balance): the gate iteration by iteration,
the rank a request goes to, the counters over a decode-only span, and the limits that switch it on."""

from __future__ import annotations

import pytest

from pdsim.config import ClusterConfig, PolicyConfig
from pdsim.policy import ADP_START, AdpCounters, StepLimits, adp_gate, assign_dp_rank
from pdsim.policy.batching import PrefillBatch, PrefillChunk
from pdsim.policy.prefill_step import adp_holds


def gate(prompt_ranks: int, counters: AdpCounters, decode_ranks: int = 4, slots_free: bool = True,
         timeout: int = 3, batching: int = 0) -> tuple[bool, AdpCounters]:
    return adp_gate(4, prompt_ranks, decode_ranks, slots_free, counters, timeout, batching)


def test_assign_goes_to_the_rank_holding_fewest_lowest_on_ties() -> None:
    assert assign_dp_rank([3, 2, 2, 4]) == 1
    assert assign_dp_rank([0, 0]) == 0
    with pytest.raises(ValueError, match="no DP ranks"):
        assign_dp_rank([])


def test_prompts_on_every_rank_run_at_once_and_reset_the_timeout() -> None:
    assert gate(4, AdpCounters(2, 0)) == (False, AdpCounters(0, 0))


def test_prompts_on_some_ranks_wait_for_the_timeouts_turn() -> None:
    # timeout 3: held at counts 1 and 2, released (and the count back to 0) at the third iteration
    held, c = gate(1, ADP_START)
    assert (held, c) == (True, AdpCounters(1, 0))
    held, c = gate(3, c)
    assert (held, c) == (True, AdpCounters(2, 0))
    held, c = gate(3, c)
    assert (held, c) == (False, AdpCounters(0, 0))


def test_the_timeout_counts_iterations_without_any_prompt_too() -> None:
    held, c = gate(0, AdpCounters(1, 0))
    assert c == AdpCounters(2, 0)
    held, c = gate(2, c)  # a prompt arrives at the timeout's turn: it runs at once
    assert (held, c) == (False, AdpCounters(0, 0))


def test_a_rank_with_nothing_to_decode_releases_the_prompts() -> None:
    assert gate(1, AdpCounters(1, 0), decode_ranks=3) == (False, AdpCounters(0, 0))


def test_a_full_rank_holds_prompts_even_when_every_rank_has_one() -> None:
    assert gate(4, ADP_START, slots_free=False) == (True, AdpCounters(1, 0))


def test_batching_wait_holds_prompts_on_every_rank_while_all_decode() -> None:
    held, c = gate(4, ADP_START, batching=2)
    assert (held, c) == (True, AdpCounters(0, 1))
    held, c = gate(4, c, batching=2)
    assert (held, c) == (True, AdpCounters(0, 2))
    assert gate(4, c, batching=2) == (False, AdpCounters(0, 0))
    # with a rank not decoding there is no batching wait
    assert gate(4, ADP_START, decode_ranks=2, batching=2) == (False, AdpCounters(0, 0))


def test_counters_over_a_decode_only_span() -> None:
    assert AdpCounters(50, 0).after_idle(25, 60, True) == AdpCounters(15, 0)
    assert AdpCounters(50, 0).after_idle(9, 60, True) == AdpCounters(59, 0)
    assert AdpCounters(50, 1).after_idle(9, 60, False) == AdpCounters(0, 1)


class _Ranks:
    def __init__(self, waiting: list[int], running: list[int]) -> None:
        self.waiting, self.running = waiting, running

    def waiting_per_rank(self) -> list[int]:
        return self.waiting

    def running_per_rank(self) -> list[int]:
        return self.running


def _batch(*rids: int) -> PrefillBatch:
    return PrefillBatch(tuple(PrefillChunk(r, 100, 0, 7, True) for r in rids), "token_budget")


def test_holds_reads_where_prompts_wait_and_the_per_rank_slots() -> None:
    limits = StepLimits(max_running_requests=8, dp_ranks=2, adp_timeout_iters=60)
    # prompts wait on rank 1 only: held
    assert adp_holds(limits, _batch(5, 6), _Ranks([0, 2], [3, 2]), ADP_START) == (True, AdpCounters(1, 0))
    # on both ranks: the batch runs (even if the one batch reaches only one rank's prompts)
    assert adp_holds(limits, _batch(5), _Ranks([1, 1], [3, 2]), ADP_START) == (False, ADP_START)
    # rank 0 holds 4 = its max_batch_size (8 / 2): held although both ranks have a prompt
    assert adp_holds(limits, _batch(5, 6), _Ranks([1, 1], [4, 2]), ADP_START) == (True, AdpCounters(1, 0))
    # no batch (nothing fits, or nothing waits): the timeout's counter still turns
    assert adp_holds(limits, _batch(), _Ranks([1, 1], [3, 2]), AdpCounters(7, 0)) == (True, AdpCounters(8, 0))
    with pytest.raises(ValueError, match="needs the executor's ranks"):
        adp_holds(limits, _batch(5), None, ADP_START)


def test_limits_switch_the_balance_on_from_two_ranks_counted_in_iterations() -> None:
    cluster = ClusterConfig(adp_balance=True, adp_timeout_iters=60, adp_batching_wait_iters=10)
    one = StepLimits.from_config(cluster, PolicyConfig())
    assert (one.dp_ranks, one.adp_timeout_iters, one.adp_batching_wait_iters) == (1, 0, 0)
    eight = StepLimits.from_config(cluster, PolicyConfig(), ranks=8)
    assert (eight.dp_ranks, eight.adp_timeout_iters, eight.adp_batching_wait_iters) == (8, 60, 10)
    mtp = StepLimits.from_config(cluster, PolicyConfig(), ranks=8, iterations_per_step=2.0)
    assert (mtp.adp_timeout_iters, mtp.adp_batching_wait_iters) == (120, 20)
    off = StepLimits.from_config(ClusterConfig(), PolicyConfig(), ranks=8)
    assert off.adp_timeout_iters == 0


def test_bad_balance_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="'adp_timeout_iters' must be >= 1 with adp_balance, got 0"):
        StepLimits.from_config(ClusterConfig(adp_balance=True, adp_timeout_iters=0), PolicyConfig(), ranks=2)
    with pytest.raises(ValueError, match="needs dp_ranks >= 2, got 1"):
        StepLimits(adp_timeout_iters=5)
    with pytest.raises(ValueError, match="'adp_batching_wait_iters' must be >= 0, got -1"):
        StepLimits(dp_ranks=2, adp_timeout_iters=5, adp_batching_wait_iters=-1)
