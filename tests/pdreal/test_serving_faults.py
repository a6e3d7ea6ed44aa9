"""Faults on a live 1P1D cluster (tiny random model, subprocesses, Mooncake TCP on loopback):
a frozen prefill peer is found by the decode side's heartbeat, a killed decode instance fails
its requests without leaking prefill pages."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

from serving_helpers import generate_ids, get_text, tiny_model_file, wait_for  # noqa: E402

from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
HEARTBEAT = ["faults.heartbeat_interval_s=0.2", "faults.heartbeat_misses=2", "node.stats_interval_s=0.1",
             "node.unhealthy_after_misses=2"]


def _cluster(tmp_path: Path) -> LocalCluster:
    cfg = load_serve_config(None, [f"node.model={tiny_model_file(tmp_path)}", *HEARTBEAT])
    return LocalCluster(cfg, tmp_path / "cluster", log_dir=tmp_path)


def test_heartbeat_fails_requests_of_a_frozen_prefill_peer(tmp_path: Path) -> None:
    with _cluster(tmp_path) as cluster:
        assert generate_ids(cluster.url, 2)[0] == 200  # the decode side now caches the prefill connection
        prefill = cluster.children["prefill0"].process
        os.kill(prefill.pid, signal.SIGSTOP)  # alive to the kernel, silent to its peers
        try:
            start = time.monotonic()
            status, out = generate_ids(cluster.url, 4)
            elapsed = time.monotonic() - start
            assert status == 500 and out["meta_info"]["status"] == "failed", out
            reason = out["meta_info"]["failure_reason"]  # the decode's heartbeat or the router's health check
            assert "missed 2 heartbeats" in reason or "prefill:0" in reason and "marked unhealthy" in reason, out
            assert elapsed < 5.0, f"failure took {elapsed:.2f} s"
            assert wait_for(lambda: sample_value(parse_metrics(get_text(f"{cluster.url}/metrics")),
                                                  "pdreal_instance_healthy", role="prefill") == 0)
            status, out = generate_ids(cluster.url, 2)
            assert status == 503 and "no healthy instance" in out["error"]["message"]
        finally:
            os.kill(prefill.pid, signal.SIGKILL)
        decode = parse_metrics(get_text(f"{cluster.children['decode0'].url}/metrics"))
        assert sample_value(decode, "pdreal_peers_dead_total") >= 1
        assert sample_value(decode, "pdreal_heartbeat_failed_rooms_total") >= 1
        assert sample_value(decode, "pdreal_kv_used_tokens") == 0
        assert sample_value(decode, "pdreal_transfer_rooms") == 0
        router = parse_metrics(get_text(f"{cluster.url}/metrics"))
        assert sample_value(router, "pdreal_router_requests_total", status="failed") == 2


def test_killed_decode_fails_its_requests_and_frees_prefill_pages(tmp_path: Path) -> None:
    with _cluster(tmp_path) as cluster, ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(generate_ids, cluster.url, 3000) for _ in range(6)]
        time.sleep(0.5)
        os.kill(cluster.children["decode0"].process.pid, signal.SIGKILL)
        results = [f.result(timeout=30) for f in futures]
        assert all(status == 500 for status, _ in results), results
        assert all("decode:0" in out["meta_info"]["failure_reason"] for _, out in results), results
        prefill_url = cluster.children["prefill0"].url

        def prefill_idle() -> bool:
            samples = parse_metrics(get_text(f"{prefill_url}/metrics"))
            return sample_value(samples, "pdreal_kv_used_tokens") == 0 and sample_value(samples, "pdreal_transfer_rooms") == 0

        assert wait_for(prefill_idle), get_text(f"{prefill_url}/metrics")
        assert wait_for(lambda: sample_value(parse_metrics(get_text(f"{cluster.url}/metrics")),
                                              "pdreal_instance_healthy", role="decode") == 0)
        status, out = generate_ids(cluster.url, 2)
        assert status == 503 and "no healthy instance" in out["error"]["message"]
