"""Admission: accept or reject a request at the router, before pair selection.

Contract: `admit(name, request, prefill, decode, params, state, now_s, predictor)` returns an
`AdmissionDecision`; a rejection carries a reason string (`<policy>: <why>`) that the caller
records as the trace's failure_reason with status 'rejected'. Time is an argument; the only
mutable state (the token bucket) lives in the caller-owned `AdmissionState`. In colocated mode
`prefill` holds the colocated instances and `decode` is empty.

Policies:
- accept_all: admit everything.
- threshold: reject when no healthy prefill-side instance is below both per-instance limits
  (max_queued_requests queued requests; max_queued_tokens queued tokens counting this request;
  an instance with nothing queued always takes it). A limit of 0 is no limit.
- token_bucket: `token_bucket_rps` tokens per second refill a bucket of `token_bucket_burst`
  (0 = one second's worth, at least 1); each request takes one token or is rejected.
- early_reject (Mooncake's early rejection): predict TTFT on the best prefill instance (queued
  prefill work plus this prompt, in batches of max_prefill_tokens, timed by the latency model)
  and TBT on the best decode instance (one decode step at its predicted batch and context;
  colocated: the colocated instances); reject when either exceeds its SLO times the margin.
  An idle system (nothing queued, running or in flight anywhere) always admits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from pdsim.policy.views import InstanceView, RequestView

ACCEPT_ALL: Final = "accept_all"
THRESHOLD: Final = "threshold"
TOKEN_BUCKET: Final = "token_bucket"
EARLY_REJECT: Final = "early_reject"
ADMISSION_POLICIES = (ACCEPT_ALL, THRESHOLD, TOKEN_BUCKET, EARLY_REJECT)


class StepLatency(Protocol):
    """The part of `pdsim.perf.LatencyModel` that early rejection uses."""

    def prefill_time_s(self, items: Sequence[tuple[int, int]]) -> float: ...

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float: ...


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    admitted: bool
    reason: str = ""  # why it was rejected; empty when admitted


ADMIT = AdmissionDecision(True)


@dataclass(frozen=True, slots=True)
class AdmissionParams:
    """Limits and SLOs (from policy.* and slo.*); 0 disables a limit."""

    max_queued_requests: int = 0
    max_queued_tokens: int = 0
    token_bucket_rps: float = 0.0
    token_bucket_burst: int = 0
    ttft_slo_s: float = 0.0
    tbt_slo_s: float = 0.0
    ttft_margin: float = 1.0  # reject when predicted TTFT > ttft_slo_s * ttft_margin
    tbt_margin: float = 1.0

    @property
    def burst(self) -> float:
        return float(self.token_bucket_burst) if self.token_bucket_burst > 0 else max(1.0, self.token_bucket_rps)


@dataclass
class AdmissionState:
    """Caller-owned mutable state: the token bucket (starts full at the first request)."""

    bucket_tokens: float = -1.0  # < 0: not started
    bucket_time_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SloPredictor:
    """Latency models of the two sides and the batching limits they run under."""

    prefill: StepLatency
    decode: StepLatency
    max_prefill_tokens: int = 8192
    max_running_requests: int = 0  # decode batch cap (0 = none)


def _threshold(request: RequestView, views: Sequence[InstanceView], p: AdmissionParams) -> AdmissionDecision:
    def fits(v: InstanceView) -> bool:
        if v.queued_requests == 0:
            return True
        ok_requests = p.max_queued_requests <= 0 or v.queued_requests < p.max_queued_requests
        ok_tokens = p.max_queued_tokens <= 0 or v.queued_tokens + request.input_tokens <= p.max_queued_tokens
        return ok_requests and ok_tokens

    healthy = [v for v in views if v.healthy]
    if not healthy or any(fits(v) for v in healthy):
        return ADMIT
    least = min(healthy, key=lambda v: (v.queued_requests, v.queued_tokens, v.instance_id))
    return AdmissionDecision(False, (
        f"threshold: every prefill queue is full (least: {least.queued_requests} requests, "
        f"{least.queued_tokens} tokens; limits {p.max_queued_requests} requests, {p.max_queued_tokens} tokens)"
    ))


def _token_bucket(p: AdmissionParams, state: AdmissionState, now_s: float) -> AdmissionDecision:
    if p.token_bucket_rps <= 0:
        raise ValueError(f"policy: admission 'token_bucket' needs token_bucket_rps > 0, got {p.token_bucket_rps}")
    if state.bucket_tokens < 0:
        state.bucket_tokens, state.bucket_time_s = p.burst, now_s
    elapsed = max(0.0, now_s - state.bucket_time_s)
    state.bucket_tokens = min(p.burst, state.bucket_tokens + elapsed * p.token_bucket_rps)
    state.bucket_time_s = max(now_s, state.bucket_time_s)
    if state.bucket_tokens >= 1.0:
        state.bucket_tokens -= 1.0
        return ADMIT
    return AdmissionDecision(False, f"token_bucket: rate above {p.token_bucket_rps:g} req/s (burst {p.burst:g})")


def prefill_wait_s(queued_tokens: int, own_tokens: int, predictor: SloPredictor) -> float:
    """Time to prefill `queued_tokens` ahead plus `own_tokens`, in batches of the token budget."""
    budget = max(1, predictor.max_prefill_tokens)
    total = queued_tokens + max(1, own_tokens)
    full, rest = divmod(total, budget)
    t = full * predictor.prefill.prefill_time_s([(budget, 0)]) if full else 0.0
    return t + (predictor.prefill.prefill_time_s([(rest, 0)]) if rest else 0.0)


def predict_ttft_s(request: RequestView, views: Sequence[InstanceView], predictor: SloPredictor) -> float:
    """Best predicted TTFT over the healthy prefill-side instances (inf when none)."""
    own = request.remaining_prompt_tokens
    waits = [prefill_wait_s(v.queued_tokens, own, predictor) for v in views if v.healthy]
    return min(waits, default=float("inf"))


def predict_tbt_s(request: RequestView, views: Sequence[InstanceView], predictor: SloPredictor) -> float:
    """Best predicted decode step time over healthy decode instances once this request joins."""
    best = float("inf")
    for v in views:
        if not v.healthy:
            continue
        batch = v.running_requests + v.queued_requests + 1
        if predictor.max_running_requests > 0:
            batch = min(batch, predictor.max_running_requests)
        context = v.kv_used_tokens + v.queued_tokens + request.input_tokens
        best = min(best, predictor.decode.decode_time_s(batch, context))
    return best


def is_idle(views: Sequence[InstanceView]) -> bool:
    return all(v.queued_requests == 0 and v.running_requests == 0 and v.inflight_requests == 0 for v in views)


def _early_reject(
    request: RequestView, prefill: Sequence[InstanceView], decode: Sequence[InstanceView],
    p: AdmissionParams, predictor: SloPredictor | None,
) -> AdmissionDecision:
    if predictor is None:
        raise ValueError("policy: admission 'early_reject' needs a latency predictor (perf model)")
    if is_idle(prefill) and is_idle(decode):
        return ADMIT
    if p.ttft_slo_s > 0:
        ttft = predict_ttft_s(request, prefill, predictor)
        if ttft > p.ttft_slo_s * p.ttft_margin:
            return AdmissionDecision(False, f"early_reject: predicted TTFT {ttft:.3g} s > SLO {p.ttft_slo_s:g} s")
    if p.tbt_slo_s > 0:  # colocated instances (decode empty) decode their own requests
        tbt = predict_tbt_s(request, decode or prefill, predictor)
        if tbt > p.tbt_slo_s * p.tbt_margin:
            return AdmissionDecision(False, f"early_reject: predicted TBT {tbt:.3g} s > SLO {p.tbt_slo_s:g} s")
    return ADMIT


def admit(
    name: str, request: RequestView, prefill: Sequence[InstanceView], decode: Sequence[InstanceView],
    params: AdmissionParams, state: AdmissionState, now_s: float, predictor: SloPredictor | None = None,
) -> AdmissionDecision:
    """Decide with the admission policy `name` (see the module docstring)."""
    if name == ACCEPT_ALL:
        return ADMIT
    if name == THRESHOLD:
        return _threshold(request, prefill, params)
    if name == TOKEN_BUCKET:
        return _token_bucket(params, state, now_s)
    if name == EARLY_REJECT:
        return _early_reject(request, prefill, decode, params, predictor)
    raise ValueError(f"policy: field 'admission' has unknown value {name!r} (choose from {ADMISSION_POLICIES})")
