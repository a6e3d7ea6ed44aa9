"""The P:D rebalancer: pressure over a window, hysteresis, warm-up and cool-down."""

from __future__ import annotations

import pytest

from pdsim.policy import InstanceView, ScalingParams, ScalingSample, ScalingState, propose_move
from pdsim.policy.scaling import decode_pressure, prefill_pressure, window_pressure

PARAMS = ScalingParams(window_s=30.0, min_samples=3, prefill_queue_tokens=1000, decode_kv_fraction=0.8,
                       decode_queue_requests=4, high=1.0, low=0.5, warmup_s=20.0, cooldown_s=10.0)


def prefill(n: int, queued_tokens: int) -> tuple[InstanceView, ...]:
    return tuple(InstanceView(instance_id=i, role="prefill", queued_tokens=queued_tokens, queued_requests=1)
                 for i in range(n))


def decode(kv_fractions: list[float], queued: int = 0) -> tuple[InstanceView, ...]:
    return tuple(InstanceView(instance_id=i, role="decode", kv_used_tokens=int(f * 1000), kv_total_tokens=1000,
                              queued_requests=queued) for i, f in enumerate(kv_fractions))


def samples(p: tuple[InstanceView, ...], d: tuple[InstanceView, ...], times: list[float]) -> list[ScalingSample]:
    return [ScalingSample(t, p, d) for t in times]


def test_pressures() -> None:
    assert prefill_pressure(prefill(2, 1500), PARAMS) == pytest.approx(1.5)
    assert decode_pressure(decode([0.4, 0.8]), PARAMS) == pytest.approx((0.5 + 1.0) / 2)
    assert decode_pressure(decode([0.0], queued=8), PARAMS) == pytest.approx(2.0)
    assert prefill_pressure((), PARAMS) == 0.0


def test_saturated_prefill_takes_the_least_loaded_decode_instance() -> None:
    d = decode([0.3, 0.1, 0.1, 0.2])  # pressure 0.22; ids 1 and 2 tie on load, 1 wins
    move = propose_move(samples(prefill(2, 2000), d, [10, 20, 30]), ScalingState(), PARAMS, 30.0)
    assert (move.instance_id, move.from_role, move.to_role) == (1, "decode", "prefill")
    assert (move.decided_s, move.ready_s) == (30.0, 50.0)


def test_saturated_decode_takes_a_prefill_instance() -> None:
    move = propose_move(samples(prefill(3, 100), decode([0.9, 1.0]), [10, 20, 30]), ScalingState(), PARAMS, 30.0)
    assert (move.instance_id, move.from_role, move.to_role) == (0, "prefill", "decode")


def test_needs_enough_samples_inside_the_window() -> None:
    old = samples(prefill(2, 5000), decode([0.1, 0.1]), [0, 5])
    assert window_pressure(old, PARAMS, 40.0)[2] == 0
    recent = samples(prefill(2, 5000), decode([0.1, 0.1]), [25, 35])
    assert propose_move(old + recent, ScalingState(), PARAMS, 40.0) is None


def test_hysteresis_band_and_projection_block_moves() -> None:
    # prefill saturated but decode between low and high: no move
    assert propose_move(samples(prefill(2, 2000), decode([0.6, 0.6]), [1, 2, 3]), ScalingState(), PARAMS, 3) is None
    # decode at the low mark, but on one instance fewer it would reach high: blocked (no ping-pong)
    two = decode([0.4, 0.4])  # pressure 0.5; projected 0.5 * 2 / 1 = 1.0 >= high
    assert propose_move(samples(prefill(2, 2000), two, [1, 2, 3]), ScalingState(), PARAMS, 3) is None
    # never below min_per_role
    one = decode([0.0])
    assert propose_move(samples(prefill(2, 2000), one, [1, 2, 3]), ScalingState(), PARAMS, 3) is None


def test_warmup_and_cooldown_hold_off_the_next_move() -> None:
    window = samples(prefill(2, 2000), decode([0.1, 0.1, 0.1]), [10, 20, 30])
    first = propose_move(window, ScalingState(), PARAMS, 30.0)
    state = ScalingState().after(first)
    assert state.moves == 1 and state.last_ready_s == 50.0
    later = samples(prefill(3, 2000), decode([0.1, 0.1]), [45, 50, 55])
    assert propose_move(later, state, PARAMS, 55.0) is None  # ready at 50, cool-down until 60
    later += samples(prefill(3, 2000), decode([0.1, 0.1]), [60])
    assert propose_move(later, state, PARAMS, 60.0) is not None


def test_bad_params_name_the_values() -> None:
    with pytest.raises(ValueError, match="low=1.0, high=0.5"):
        ScalingParams(low=1.0, high=0.5)
    with pytest.raises(ValueError, match="warmup_s=-1"):
        ScalingParams(warmup_s=-1)
