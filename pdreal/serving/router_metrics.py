"""The router's /metrics: request outcomes, TTFT/TPOT/E2E histograms, instance state.

TTFT and TPOT here are measured at the router (first token received from the decode or
colocated instance minus the request's arrival at the router; TPOT excludes the first token),
the same definitions as pdsim.metrics. Instance gauges come from the latest /stats poll.
"""

from __future__ import annotations

import math
from typing import Any

from pdreal.serving.metrics import TPOT_BUCKETS_S, TTFT_BUCKETS_S, MetricsRegistry
from pdsim.trace import STATUS_FINISHED

FAILURE_SIDES = ("router", "client", "prefill", "decode", "colocated")


class RouterMetrics:
    def __init__(self) -> None:
        reg = self.registry = MetricsRegistry()
        self.requests = reg.counter("pdreal_router_requests_total", "requests ended, by status")
        self.failures = reg.counter("pdreal_router_failures_total",
                                    "failed or rejected requests, by status and the side the failure arose on")
        self.tokens = reg.counter("pdreal_router_output_tokens_total", "output tokens streamed to clients")
        self.ttft = reg.histogram("pdreal_ttft_seconds", "time to first token at the router", TTFT_BUCKETS_S)
        self.tpot = reg.histogram("pdreal_tpot_seconds", "time per output token after the first", TPOT_BUCKETS_S)
        self.e2e = reg.histogram("pdreal_e2e_seconds", "arrival to last token of finished requests",
                                 TTFT_BUCKETS_S)
        self.inflight_gauge = reg.gauge("pdreal_router_inflight_requests", "requests dispatched and not ended")
        self.queue = reg.gauge("pdreal_queue_requests", "requests in each instance queue (last poll)")
        self.kv_used = reg.gauge("pdreal_kv_used_tokens", "KV pool tokens in use (last poll)")
        self.kv_total = reg.gauge("pdreal_kv_total_tokens", "KV pool capacity in tokens")
        self.healthy = reg.gauge("pdreal_instance_healthy", "1 when the router routes to the instance")
        self.queued = reg.gauge("pdreal_router_queued_requests", "router-side queued requests per instance")
        self.kv_events = reg.counter("pdreal_router_kv_events_total", "KV events applied, per prefill instance")
        self.kv_replays = reg.counter("pdreal_router_kv_event_replays_total",
                                      "KV event replays asked (late join, gaps), per prefill instance")
        self.kv_blocks = reg.gauge("pdreal_router_kv_cached_blocks", "blocks in the KV event summary per instance")
        self.kv_partial = reg.gauge("pdreal_router_kv_summary_partial", "1 when events were lost to a full buffer")
        self.inflight = 0

    def observe(self, row: dict[str, Any], num_tokens: int, side: str = "") -> None:
        """One ended request; `side` (FAILURE_SIDES) is where a failure arose: the router itself
        (admission, no healthy instance), the client (gone), or the role of the instance whose
        half failed first."""
        status = row["status"]
        self.requests.inc(status=status)
        self.tokens.inc(num_tokens)
        if status != STATUS_FINISHED:
            if side not in FAILURE_SIDES:
                raise ValueError(f"failure side {side!r} unknown (one of {FAILURE_SIDES})")
            self.failures.inc(status=status, side=side)
            return
        first, last = row.get("first_token_s", math.nan), row.get("last_token_s", math.nan)
        self.ttft.observe(first - row["arrival_s"])
        if num_tokens > 1:
            self.tpot.observe((last - first) / (num_tokens - 1))
        self.e2e.observe(last - row["arrival_s"])

    def observe_kv_events(self, counts: Any) -> None:
        """The KV event follower's totals (kv_feed.FollowerCounts)."""
        for index, value in counts.events.items():
            labels = {"role": "prefill", "instance": index}
            self.kv_events.set(value, **labels)
            self.kv_replays.set(counts.replays.get(index, 0), **labels)
            self.kv_blocks.set(counts.blocks.get(index, 0), **labels)
            self.kv_partial.set(1 if counts.partial.get(index) else 0, **labels)

    def render(self, upstreams: list[Any]) -> str:
        for gauge in (self.queue, self.kv_used, self.kv_total, self.healthy, self.queued):
            gauge.clear()
        self.inflight_gauge.set(self.inflight)
        for u in upstreams:
            labels = {"role": u.role, "instance": u.index}
            for name, count in u.stats.get("queues", {}).items():
                self.queue.set(count, queue=name, **labels)
            self.kv_used.set(u.stats.get("kv_used_tokens", 0), **labels)
            self.kv_total.set(u.stats.get("kv_total_tokens", 0), **labels)
            self.healthy.set(1 if u.healthy else 0, **labels)
            self.queued.set(len(u.queued), **labels)
        return self.registry.render()
