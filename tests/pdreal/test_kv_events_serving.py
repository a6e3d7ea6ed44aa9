"""KV events wired through `pdreal serve`: prefill instances publish, the router follows and routes.

A 2-prefill/1-decode cluster (tiny random model) with cache_aware routing: the router receives
the stored event of the first request's prompt pages, which stay in the prefix cache of the
instance that served it; a late subscriber gets it by replay with the same block hashes the router
computes, and a second request sharing the prefix goes to the same instance and hits its cache. In-process, the router's follower turns a publisher's
stored events into the summary that steers cache_aware to the instance holding the prefix.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")
zmq = pytest.importorskip("zmq")

from serving_helpers import get_text, post, tiny_model_file  # noqa: E402

from pdreal.kv_events import REMOVED, STORED, CacheSummary, KVEventPublisher, block_hash_ids  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.kv_feed import KVEventFollower, advertised_endpoints  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402
from pdreal.serving.router import Router  # noqa: E402
from pdreal.serving.upstream import Upstream  # noqa: E402
from pdsim.policy import RequestView  # noqa: E402

PAGE = 16
PREFIX = [1 + (7 * i) % 97 for i in range(5 * PAGE)]  # five full pages shared by both prompts


def _generate(url: str, input_ids: list[int]) -> dict:
    body = {"input_ids": input_ids, "sampling_params": {"max_new_tokens": 2, "temperature": 0, "ignore_eos": True}}
    status, out = post(f"{url}/generate", body, 60.0)
    assert status == 200, out
    return out["meta_info"]["trace"]


def _router_counts(url: str, instance: int) -> tuple[float, float]:
    samples = parse_metrics(get_text(f"{url}/metrics"))
    labels = {"role": "prefill", "instance": str(instance)}
    return (sample_value(samples, "pdreal_router_kv_events_total", **labels),
            sample_value(samples, "pdreal_router_kv_event_replays_total", **labels))


def _replay_from_zero(endpoint: str) -> list[dict]:
    """What a subscriber joining now gets: every buffered event from seq 0."""
    ctx = zmq.Context()
    req = ctx.socket(zmq.REQ)
    try:
        req.connect(endpoint)
        req.send(json.dumps({"from_seq": 0}).encode())
        assert req.poll(5000), "no replay answer"
        return json.loads(req.recv())["events"]
    finally:
        req.close(linger=0)
        ctx.term()


@pytest.mark.real
@pytest.mark.slow
def test_router_follows_prefill_kv_events_and_routes_by_prefix(tmp_path: Path) -> None:
    cfg = load_serve_config(None, [f"node.model={tiny_model_file(tmp_path)}", "policy=cache_aware",
                                   f"cluster.page_size_tokens={PAGE}", "node.stats_interval_s=0.1"])
    assert cfg.kv_events_enabled
    with LocalCluster(cfg, tmp_path / "cluster", prefill_count=2, log_dir=tmp_path) as cluster:
        first_prompt = PREFIX + [5, 6, 7]
        first = _generate(cluster.url, first_prompt)
        target = first["prefill_instance"]
        deadline = time.monotonic() + 10.0
        while _router_counts(cluster.url, target)[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        events, replays = _router_counts(cluster.url, target)
        assert events >= 1 and replays >= 1  # stored (the pages stay cached); joined by replay
        stats = json.loads(get_text(f"{cluster.children[f'prefill{target}'].url}/stats"))
        late = _replay_from_zero(stats["engine"]["kv_events"]["replay"])
        assert [e["kind"] for e in late] == [STORED] and late[0]["epoch"] > 0
        assert tuple(late[0]["block_hashes"]) == block_hash_ids(first_prompt, PAGE)
        assert len(late[0]["block_hashes"]) == 5 and late[0]["instance_id"] == target
        second = _generate(cluster.url, PREFIX + [9, 9])
        assert second["prefill_instance"] == target
        assert (first["cached_prefix_tokens"], second["cached_prefix_tokens"]) == (0, 5 * PAGE)
        router_stats = json.loads(get_text(f"{cluster.url}/stats"))
        assert router_stats["kv_events"]["events"][str(target)] >= 1


def test_follower_summary_steers_cache_aware_to_the_instance_holding_the_prefix(tmp_path: Path) -> None:
    cfg = load_serve_config(None, ["policy=cache_aware", f"cluster.page_size_tokens={PAGE}"])
    prefill = [Upstream("prefill", i, f"http://p{i}", healthy=True) for i in range(2)]
    router = Router(cfg, prefill, [Upstream("decode", 0, "http://d0", healthy=True)])
    ctx, follower = zmq.Context(), KVEventFollower()
    publishers = [KVEventPublisher(ctx, i, f"ipc://{tmp_path}/pub{i}", f"ipc://{tmp_path}/replay{i}")
                  for i in range(2)]
    try:
        hashes = block_hash_ids(PREFIX + [3], PAGE)
        publishers[1].publish(STORED, hashes)  # before anyone follows: reaches the router by replay
        for u, pub in zip(prefill, publishers, strict=True):
            u.stats = {"engine": {"kv_events": dict(zip(("pub", "replay"), pub.endpoints(), strict=True))}}
        blocks = follower.poll(advertised_endpoints(prefill), wait_ms=10)
        assert blocks == {0: frozenset(), 1: frozenset(hashes)}
        router.kv_summary = CacheSummary(dict(blocks))
        view = RequestView(7, len(PREFIX) + 1, 4, hash_ids=block_hash_ids(PREFIX + [4], PAGE))
        pair, _, _, _ = router._choose(view, 0.0)
        assert pair is not None and pair[0].index == 1
        publishers[1].publish(REMOVED, hashes)
        for _ in range(50):
            blocks = follower.poll(advertised_endpoints(prefill), wait_ms=20)
            if not blocks[1]:
                break
        assert blocks[1] == frozenset() and follower.counts.events == {0: 0, 1: 2}
        assert follower.counts.replays == {0: 1, 1: 1}
    finally:
        follower.close()
        for pub in publishers:
            pub.close()
        ctx.term()
