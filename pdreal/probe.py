"""Control-plane and delivery latencies of a running cluster, measured with idle probe requests.

`probe_cluster(url)` sends a few small requests one at a time (each finishes before the next is
sent, so no queue forms) and takes the median of each hop over them, from the replay trace row
(client times and the instances' times on one clock):

    client_to_router_s     route_s - arrival_s                  client -> router HTTP, admission, routing
    dispatch_prefill_s     bootstrap_enter_s - arrival_s        client -> router -> prefill engine
    dispatch_decode_s      prealloc_enter_s - arrival_s         client -> router -> decode engine
    transfer_info_s        bootstrap_leave_s - transfer_queue_enter_s
                                                                decode pre-allocation -> prefill sees
                                                                WaitingForInput (ZMQ + prefill poll)
    kv_ready_s             transfer_queue_leave_s - prefill_end_s
                                                                last forward done -> decode poll sees
                                                                Success (KV write, aux notify, poll)
    token_delivery_s       first_token_s (client) - transfer_queue_leave_s
                                                                decode emits the first token -> client
    kv_bytes               transfer_bytes of the probe requests

A colocated cluster (trace rows with mode=colocated) has no bootstrap, KV transfer or second
half; its hops are

    client_to_router_s     route_s - arrival_s
    dispatch_colocated_s   prefill_waiting_enter_s - arrival_s  client -> router -> colocated engine
    token_delivery_s       first_token_s (client) - prefill_end_s
                                                                the last prompt chunk's forward
                                                                (first token) -> client

These are the constant costs a simulator has to add to the engine's step times; `pdsim
fidelity` maps them onto pdsim's cluster parameters (analysis/fidelity/facts.py).
"""

from __future__ import annotations

import asyncio
import math
import statistics
from typing import Any

PROBE_HOPS = {
    "client_to_router_s": ("arrival_s", "route_s"),
    "dispatch_prefill_s": ("arrival_s", "bootstrap_enter_s"),
    "dispatch_decode_s": ("arrival_s", "prealloc_enter_s"),
    "transfer_info_s": ("transfer_queue_enter_s", "bootstrap_leave_s"),
    "kv_ready_s": ("prefill_end_s", "transfer_queue_leave_s"),
    "token_delivery_s": ("transfer_queue_leave_s", "first_token_s"),
}
COLOCATED_PROBE_HOPS = {
    "client_to_router_s": ("arrival_s", "route_s"),
    "dispatch_colocated_s": ("arrival_s", "prefill_waiting_enter_s"),
    "token_delivery_s": ("prefill_end_s", "first_token_s"),
}


def hop_medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median of each hop over finished rows (NaN when no row has both ends); the colocated hops
    when the rows are colocated ones."""
    out: dict[str, float] = {}
    finished = [r for r in rows if r.get("status") == "finished"]
    colocated = any(r.get("mode") == "colocated" for r in finished)
    for name, (start, end) in (COLOCATED_PROBE_HOPS if colocated else PROBE_HOPS).items():
        values = [float(r[end]) - float(r[start]) for r in finished
                  if _finite(r.get(start)) and _finite(r.get(end))]
        out[name] = statistics.median(values) if values else math.nan
    if not colocated:
        sizes = [float(r["transfer_bytes"]) for r in finished if _finite(r.get("transfer_bytes"))]
        out["kv_bytes"] = statistics.median(sizes) if sizes else math.nan
    return out


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def probe_cluster(url: str, num_probes: int = 8, input_tokens: int = 32, output_tokens: int = 2,
                  gap_s: float = 0.0) -> dict[str, Any]:
    """Send `num_probes` small requests one after another; returns the hop medians (seconds)."""
    from pdreal.replay import PlannedRequest, ReplayOptions, replay
    from pdreal.replay_cli import router_state

    state = router_state(url)
    vocab = int(next(i["stats"]["engine"]["vocab_size"] for i in state["instances"] if i["stats"]))
    options = ReplayOptions(drain_timeout_s=60.0, seed=12345)
    rows: list[dict[str, Any]] = []
    for i in range(num_probes + 1):  # the first request also resolves and connects: dropped
        probe = PlannedRequest(-(i + 1) % (2**31), 0.0, input_tokens, output_tokens)
        got, _ = asyncio.run(replay(url, [probe], vocab, options))
        if i:
            rows.extend(got)
        if gap_s:
            asyncio.run(asyncio.sleep(gap_s))
    return {**hop_medians(rows), "probes": len(rows), "probe_input_tokens": input_tokens,
            "probe_output_tokens": output_tokens}
