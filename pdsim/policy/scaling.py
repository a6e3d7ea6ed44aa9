"""Scaling: a P:D rebalancer that moves one instance at a time between the prefill and decode roles.

The caller samples the instances' views periodically (`ScalingSample`) and calls `propose_move`
with the samples, its `ScalingState` and the time; the function is pure. When it returns a
`ScalingDecision`, the caller drains the named instance (stops routing to it, lets its requests
finish), brings it up in the new role at `ready_s` (the warm-up delay: weights reload, CUDA
graphs, registration with the router), and records the move with `state.after(decision)`.

Pressure of a side, averaged over the samples in the window (1.0 = saturated):
  prefill: queued prefill tokens per healthy instance / prefill_queue_tokens
  decode:  per healthy instance, max(KV used fraction / decode_kv_fraction,
                                     queued requests / decode_queue_requests), averaged
Hysteresis: a side must be at or above `high` while the other is at or below `low` (low < high);
the donor's pressure projected onto one instance fewer must stay below `high` (no ping-pong);
no decision until `cooldown_s` after the previous move became ready; the donor keeps at least
`min_per_role` instances. The donor instance is its side's least-loaded healthy one (ties: id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from pdsim.policy.views import ROLE_DECODE, ROLE_PREFILL, InstanceView


@dataclass(frozen=True, slots=True)
class ScalingSample:
    t_s: float
    prefill: tuple[InstanceView, ...]
    decode: tuple[InstanceView, ...]


@dataclass(frozen=True, slots=True)
class ScalingParams:
    """Thresholds of the rebalancer (from policy.scaling_* in the config)."""

    window_s: float = 60.0
    min_samples: int = 3
    prefill_queue_tokens: int = 16384
    decode_kv_fraction: float = 0.9
    decode_queue_requests: int = 8
    high: float = 1.0
    low: float = 0.5
    warmup_s: float = 30.0
    cooldown_s: float = 60.0
    min_per_role: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high:
            raise ValueError(f"scaling: need 0 <= low < high, got low={self.low}, high={self.high}")
        if self.window_s <= 0 or self.min_samples < 1 or self.min_per_role < 1:
            raise ValueError(
                f"scaling: window_s={self.window_s}, min_samples={self.min_samples} and "
                f"min_per_role={self.min_per_role} must be positive"
            )
        if self.warmup_s < 0 or self.cooldown_s < 0:
            raise ValueError(f"scaling: warmup_s={self.warmup_s} and cooldown_s={self.cooldown_s} must be >= 0")
        if self.prefill_queue_tokens < 1 or self.decode_queue_requests < 1 or not 0 < self.decode_kv_fraction <= 1:
            raise ValueError(
                f"scaling: prefill_queue_tokens={self.prefill_queue_tokens}, decode_queue_requests="
                f"{self.decode_queue_requests} must be >= 1 and decode_kv_fraction={self.decode_kv_fraction} in (0, 1]"
            )


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    instance_id: int
    from_role: str
    to_role: str
    decided_s: float
    ready_s: float  # decided_s + warmup_s: serves in its new role from then on
    reason: str


@dataclass(frozen=True, slots=True)
class ScalingState:
    """What the rebalancer remembers: when the last move became ready, how many moves so far."""

    last_ready_s: float = float("-inf")
    moves: int = 0

    def after(self, decision: ScalingDecision) -> ScalingState:
        return replace(self, last_ready_s=decision.ready_s, moves=self.moves + 1)


def _healthy(views: Sequence[InstanceView]) -> list[InstanceView]:
    return [v for v in views if v.healthy]


def prefill_pressure(views: Sequence[InstanceView], params: ScalingParams) -> float:
    healthy = _healthy(views)
    if not healthy:
        return 0.0
    return sum(v.queued_tokens for v in healthy) / (len(healthy) * params.prefill_queue_tokens)


def decode_pressure(views: Sequence[InstanceView], params: ScalingParams) -> float:
    healthy = _healthy(views)
    if not healthy:
        return 0.0
    per = [max(v.kv_used_fraction / params.decode_kv_fraction, v.queued_requests / params.decode_queue_requests)
           for v in healthy]
    return sum(per) / len(per)


def window_pressure(samples: Sequence[ScalingSample], params: ScalingParams, now_s: float) -> tuple[float, float, int]:
    """(prefill pressure, decode pressure, samples used) over the samples in (now - window, now]."""
    recent = [s for s in samples if now_s - params.window_s < s.t_s <= now_s]
    if not recent:
        return 0.0, 0.0, 0
    p = sum(prefill_pressure(s.prefill, params) for s in recent) / len(recent)
    d = sum(decode_pressure(s.decode, params) for s in recent) / len(recent)
    return p, d, len(recent)


def _donor(views: Sequence[InstanceView]) -> InstanceView:
    return min(_healthy(views), key=lambda v: (v.load_tokens, v.queued_requests, v.instance_id))


def _move(
    needy: float, donor: float, donors: Sequence[InstanceView], params: ScalingParams,
) -> bool:
    n = len(_healthy(donors))
    if needy < params.high or donor > params.low or n <= params.min_per_role:
        return False
    return donor * n / (n - 1) < params.high


def propose_move(
    samples: Sequence[ScalingSample], state: ScalingState, params: ScalingParams, now_s: float,
) -> ScalingDecision | None:
    """A role move if the window shows one side saturated and the other idle enough, else None."""
    if now_s < state.last_ready_s + params.cooldown_s:
        return None
    p, d, used = window_pressure(samples, params, now_s)
    if used < params.min_samples:
        return None
    latest = max(samples, key=lambda s: s.t_s)
    if _move(p, d, latest.decode, params):
        donor, src, dst = _donor(latest.decode), ROLE_DECODE, ROLE_PREFILL
    elif _move(d, p, latest.prefill, params):
        donor, src, dst = _donor(latest.prefill), ROLE_PREFILL, ROLE_DECODE
    else:
        return None
    reason = f"prefill pressure {p:.2f}, decode pressure {d:.2f} over {used} samples"
    return ScalingDecision(donor.instance_id, src, dst, now_s, now_s + params.warmup_s, reason)
