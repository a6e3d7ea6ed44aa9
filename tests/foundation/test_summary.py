"""The terminal summary renders the numbers it is given (and tier hits when present)."""

from __future__ import annotations

from pdsim.metrics import Slo, summarize
from pdsim.summary import format_summary
from pdsim.trace import TraceRecorder


def _summary() -> dict:
    rec = TraceRecorder()
    rec.add({"request_id": 0, "arrival_s": 0.0, "input_tokens": 100, "output_tokens": 11, "first_token_s": 0.5,
             "last_token_s": 1.5, "finish_s": 1.5, "status": "finished", "cached_prefix_tokens": 50})
    rec.add({"request_id": 1, "arrival_s": 1.0, "input_tokens": 100, "output_tokens": 5, "finish_s": 1.0,
             "status": "rejected", "failure_reason": "queue full"})
    return summarize(rec.to_frame(), Slo(1.0, 0.2))


def test_summary_lines():
    text = format_summary(_summary(), "title")
    assert text.startswith("title\n=====")
    assert "requests 2  finished 1  failed 0  rejected 1" in text
    assert "prefix-cache hit 25.0% of prompt tokens" in text
    assert "TTFT s        0.5000    0.5000    0.5000    0.5000" in text
    assert "both 50.0% (target 90.0%: MISSED)" in text
    assert "KV tiers" not in text


def test_summary_shows_tier_hits():
    summary = _summary()
    summary["kv_tiers"] = {"hit_ratio_gpu": 0.2, "hit_ratio_host": 0.05, "hit_ratio_ssd": 0.0,
                           "hit_ratio_store": 0.1, "loads_taken": 7.0, "loads_rejected": 2.0}
    text = format_summary(summary, "t")
    assert "KV tiers: prefix hits GPU 20.0%, host 5.0%, SSD 0.0%, store 10.0%; 7 loads taken, 2 rejected" in text
