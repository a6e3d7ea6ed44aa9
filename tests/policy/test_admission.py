"""Admission policies on hand-built views: thresholds, token bucket, early rejection."""

from __future__ import annotations

import pytest

from pdsim.perf import LinearModel
from pdsim.policy import (
    AdmissionParams,
    AdmissionState,
    InstanceView,
    RequestView,
    SloPredictor,
    admit,
)
from pdsim.policy.admission import predict_tbt_s, predict_ttft_s, prefill_wait_s

REQ = RequestView(request_id=0, input_tokens=1000, output_tokens=100)
# prefill: 0.02 s + 1e-4 s/token; decode: 0.01 s + 0.001 s/seq + 1e-6 s/context token
MODEL = LinearModel(prefill_base_s=0.02, prefill_per_token_s=1e-4, decode_base_s=0.01,
                    decode_per_seq_s=0.001, decode_per_ctx_token_s=1e-6)
PREDICTOR = SloPredictor(prefill=MODEL, decode=MODEL, max_prefill_tokens=4000)


def inst(i: int, role: str, queued: int = 0, tokens: int = 0, running: int = 0, kv: int = 0) -> InstanceView:
    return InstanceView(instance_id=i, role=role, queued_requests=queued, queued_tokens=tokens,
                        running_requests=running, kv_used_tokens=kv, kv_total_tokens=100_000)


def test_accept_all() -> None:
    p = [inst(0, "prefill", queued=10**6, tokens=10**9)]
    assert admit("accept_all", REQ, p, [], AdmissionParams(), AdmissionState(), 0.0).admitted


def test_threshold_rejects_only_when_every_queue_is_full() -> None:
    params = AdmissionParams(max_queued_requests=4, max_queued_tokens=10_000)
    full = [inst(0, "prefill", queued=4, tokens=100), inst(1, "prefill", queued=2, tokens=9500)]
    decision = admit("threshold", REQ, full, [], params, AdmissionState(), 0.0)
    assert not decision.admitted and decision.reason.startswith("threshold:") and "limits 4 requests" in decision.reason
    room = [*full, inst(2, "prefill", queued=3, tokens=9000)]
    assert admit("threshold", REQ, room, [], params, AdmissionState(), 0.0).admitted


def test_threshold_lets_an_empty_queue_take_a_huge_prompt() -> None:
    params = AdmissionParams(max_queued_tokens=500)
    assert admit("threshold", REQ, [inst(0, "prefill")], [], params, AdmissionState(), 0.0).admitted


def test_token_bucket_refills_at_its_rate() -> None:
    params, state = AdmissionParams(token_bucket_rps=2.0, token_bucket_burst=2), AdmissionState()
    at = [0.0, 0.0, 0.0, 0.5, 0.6, 1.6, 1.6, 1.6]
    got = [admit("token_bucket", REQ, [], [], params, state, t).admitted for t in at]
    # burst of 2, then one token per 0.5 s; the 1.0 s gap to 1.6 refills to the burst of 2
    assert got == [True, True, False, True, False, True, True, False]
    reject = admit("token_bucket", REQ, [], [], params, state, 1.6)
    assert reject.reason == "token_bucket: rate above 2 req/s (burst 2)"


def test_token_bucket_needs_a_rate() -> None:
    with pytest.raises(ValueError, match="token_bucket_rps > 0, got 0.0"):
        admit("token_bucket", REQ, [], [], AdmissionParams(), AdmissionState(), 0.0)


def test_prefill_wait_batches_by_token_budget() -> None:
    # 9000 queued + 1000 own = 10,000 tokens: two full 4000-token batches and one of 2000
    assert prefill_wait_s(9000, 1000, PREDICTOR) == pytest.approx(2 * (0.02 + 0.4) + (0.02 + 0.2))
    p = [inst(0, "prefill", queued=3, tokens=9000), inst(1, "prefill", queued=1, tokens=3000)]
    assert predict_ttft_s(REQ, p, PREDICTOR) == pytest.approx(0.02 + 0.4)


def test_tbt_prediction_uses_batch_and_context_after_joining() -> None:
    d = [inst(0, "decode", queued=1, tokens=500, running=9, kv=20_000)]
    # batch 9 + 1 + 1 = 11, context 20,000 + 500 + 1000 = 21,500
    assert predict_tbt_s(REQ, d, PREDICTOR) == pytest.approx(0.01 + 0.011 + 0.0215)
    capped = SloPredictor(prefill=MODEL, decode=MODEL, max_running_requests=5)
    assert predict_tbt_s(REQ, d, capped) == pytest.approx(0.01 + 0.005 + 0.0215)


def test_early_reject_on_predicted_ttft_and_tbt() -> None:
    params = AdmissionParams(ttft_slo_s=1.0, tbt_slo_s=0.05)
    busy_p = [inst(0, "prefill", queued=5, tokens=20_000)]
    idle_d = [inst(0, "decode")]
    ttft = admit("early_reject", REQ, busy_p, idle_d, params, AdmissionState(), 0.0, PREDICTOR)
    assert not ttft.admitted and ttft.reason.startswith("early_reject: predicted TTFT")
    light_p = [inst(0, "prefill", queued=1, tokens=1000)]
    busy_d = [inst(0, "decode", running=40, kv=50_000)]
    tbt = admit("early_reject", REQ, light_p, busy_d, params, AdmissionState(), 0.0, PREDICTOR)
    assert not tbt.admitted and "predicted TBT" in tbt.reason
    assert admit("early_reject", REQ, light_p, idle_d, params, AdmissionState(), 0.0, PREDICTOR).admitted


def test_early_reject_margin_loosens_the_slo() -> None:
    p = [inst(0, "prefill", queued=1, tokens=5000)]  # 6000 tokens: predicted TTFT 0.42 + 0.22 = 0.64 s
    tight = AdmissionParams(ttft_slo_s=0.5)
    loose = AdmissionParams(ttft_slo_s=0.5, ttft_margin=2.0)
    assert not admit("early_reject", REQ, p, [], tight, AdmissionState(), 0.0, PREDICTOR).admitted
    assert admit("early_reject", REQ, p, [], loose, AdmissionState(), 0.0, PREDICTOR).admitted


@pytest.mark.parametrize("tokens", [10, 1000, 200_000])
def test_early_reject_never_rejects_an_idle_system(tokens: int) -> None:
    # SLOs far below what even an idle system can do: still admitted
    params = AdmissionParams(ttft_slo_s=1e-6, tbt_slo_s=1e-6)
    big = RequestView(request_id=1, input_tokens=tokens, output_tokens=4000)
    p = [InstanceView(instance_id=i, role="prefill", kv_total_tokens=10**6) for i in range(3)]
    d = [InstanceView(instance_id=i, role="decode", kv_total_tokens=10**6) for i in range(2)]
    for decode in (d, []):
        decision = admit("early_reject", big, p, decode, params, AdmissionState(), 5.0, PREDICTOR)
        assert decision.admitted and decision.reason == ""


def test_early_reject_needs_a_predictor_and_unknown_names_fail() -> None:
    with pytest.raises(ValueError, match="predictor"):
        admit("early_reject", REQ, [inst(0, "prefill", queued=1)], [], AdmissionParams(), AdmissionState(), 0.0)
    with pytest.raises(ValueError, match="'bouncer'"):
        admit("bouncer", REQ, [], [], AdmissionParams(), AdmissionState(), 0.0)
