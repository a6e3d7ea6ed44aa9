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

from serving_helpers import get_text, post, tiny_model_file  # noqa: E402

from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
HEARTBEAT = ["faults.heartbeat_interval_s=0.2", "faults.heartbeat_misses=2", "node.stats_interval_s=0.1",
             "node.unhealthy_after_misses=2"]


def _cluster(tmp_path: Path) -> LocalCluster:
    cfg = load_serve_config(None, [f"node.model={tiny_model_file(tmp_path)}", *HEARTBEAT])
    return LocalCluster(cfg, tmp_path / "cluster", log_dir=tmp_path)


def _generate(url: str, max_new_tokens: int, timeout_s: float = 60.0) -> tuple[int, dict]:
    body = {"input_ids": list(range(1, 30)), "sampling_params": {"max_new_tokens": max_new_tokens,
                                                                  "temperature": 0, "ignore_eos": True}}
    return post(f"{url}/generate", body, timeout_s)


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_heartbeat_fails_requests_of_a_frozen_prefill_peer(tmp_path: Path) -> None:
    with _cluster(tmp_path) as cluster:
        assert _generate(cluster.url, 2)[0] == 200  # the decode side now caches the prefill connection
        prefill = cluster.children["prefill0"].process
        os.kill(prefill.pid, signal.SIGSTOP)  # alive to the kernel, silent to its peers
        try:
            start = time.monotonic()
            status, out = _generate(cluster.url, 4)
            elapsed = time.monotonic() - start
            assert status == 500 and out["meta_info"]["status"] == "failed", out
            assert "missed 2 heartbeats" in out["meta_info"]["failure_reason"], out
            assert elapsed < 5.0, f"failure took {elapsed:.2f} s"
            assert _wait_for(lambda: sample_value(parse_metrics(get_text(f"{cluster.url}/metrics")),
                                                  "pdreal_instance_healthy", role="prefill") == 0)
            status, out = _generate(cluster.url, 2)
            assert status == 500 and "no healthy instance" in out["error"]["message"]
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
        futures = [pool.submit(_generate, cluster.url, 3000) for _ in range(6)]
        time.sleep(0.5)
        os.kill(cluster.children["decode0"].process.pid, signal.SIGKILL)
        results = [f.result(timeout=30) for f in futures]
        assert all(status == 500 for status, _ in results), results
        assert all("decode:0" in out["meta_info"]["failure_reason"] for _, out in results), results
        prefill_url = cluster.children["prefill0"].url

        def prefill_idle() -> bool:
            samples = parse_metrics(get_text(f"{prefill_url}/metrics"))
            return sample_value(samples, "pdreal_kv_used_tokens") == 0 and sample_value(samples, "pdreal_transfer_rooms") == 0

        assert _wait_for(prefill_idle), get_text(f"{prefill_url}/metrics")
        assert _wait_for(lambda: sample_value(parse_metrics(get_text(f"{cluster.url}/metrics")),
                                              "pdreal_instance_healthy", role="decode") == 0)
        status, out = _generate(cluster.url, 2)
        assert status == 500 and "no healthy instance" in out["error"]["message"]
