"""The scheduler process of an instance (pdreal/serving/scheduler.py): it blocks instead of
spinning while KV is in flight, wakes at once on a KV state change, and when it dies its
requests fail within a bound, the instance says why and a new scheduler takes over."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

import zmq  # noqa: E402
from serving_helpers import generate_ids, get_text, tiny_model_file, wait_for  # noqa: E402

from pdreal.engine.common import EngineStats  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.ipc import pack  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402
from pdreal.serving.scheduler import SchedulerLoop, Waker  # noqa: E402

pytestmark = [pytest.mark.real]


class _WaitingEngine:
    """Has work, but nothing can run until `arrive()` (a transfer thread's KV landing)."""

    kv = None

    def __init__(self) -> None:
        self.arrived = threading.Event()
        self.step_times: list[float] = []

    def has_work(self) -> bool:
        return True

    def ready_to_run(self) -> bool:
        return self.arrived.is_set()

    def step(self) -> list[Any]:
        self.step_times.append(time.monotonic())
        return []

    def stats(self) -> EngineStats:
        return EngineStats({"waiting": len(self.step_times)}, 0, 0, 0, 0)


def test_loop_blocks_while_waiting_and_wakes_on_a_kv_change() -> None:
    ctx = zmq.Context()
    events, commands, feed = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    sink = ctx.socket(zmq.PULL)
    sink.bind("inproc://events")
    events.connect("inproc://events")
    commands.bind("inproc://commands")
    feed.connect("inproc://commands")
    engine, waker = _WaitingEngine(), Waker()
    loop = SchedulerLoop(engine, events, poll_interval_s=5.0)  # only a wake-up can end a wait early
    runner = threading.Thread(target=loop.run, args=(commands, waker))
    try:
        runner.start()
        time.sleep(0.5)
        assert len(engine.step_times) <= 1  # blocked: a 1 ms poll would have stepped ~400 times
        woken_at = time.monotonic()
        engine.arrived.set()
        waker.wake()
        deadline = time.monotonic() + 2.0
        while len(engine.step_times) < 3 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert len(engine.step_times) >= 3, "ready engine not stepped after the wake-up"
        first = next(t for t in engine.step_times if t >= woken_at)
        assert first - woken_at < 0.1, f"woke {first - woken_at:.3f} s after the KV change"
    finally:
        feed.send(pack(["stop"]))
        runner.join(5.0)
        waker.close()
        for sock in (events, commands, feed, sink):
            sock.close(linger=0)
        ctx.term()
    assert not runner.is_alive()


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _engine_facts(url: str) -> dict[str, Any]:
    import json

    return json.loads(get_text(f"{url}/stats"))["engine"]


def _cluster(tmp_path: Path) -> LocalCluster:
    cfg = load_serve_config(None, [f"node.model={tiny_model_file(tmp_path)}", "node.stats_interval_s=0.1",
                                   "faults.bootstrap_timeout_s=30"])
    return LocalCluster(cfg, tmp_path / "cluster", log_dir=tmp_path)


@pytest.mark.slow
def test_decode_waiting_for_kv_does_not_spin(tmp_path: Path) -> None:
    with _cluster(tmp_path) as cluster, ThreadPoolExecutor(1) as pool:
        assert generate_ids(cluster.url, 2)[0] == 200
        prefill_pid = _engine_facts(cluster.children["prefill0"].url)["scheduler_pid"]
        decode_pid = _engine_facts(cluster.children["decode0"].url)["scheduler_pid"]
        os.kill(prefill_pid, signal.SIGSTOP)  # the KV never comes: decode holds a pre-allocated request
        try:
            future = pool.submit(generate_ids, cluster.url, 4)
            time.sleep(0.5)
            before = _cpu_s(decode_pid)
            time.sleep(2.0)
            used = _cpu_s(decode_pid) - before
        finally:
            os.kill(prefill_pid, signal.SIGCONT)
        assert used < 0.1, f"decode scheduler used {used:.2f} CPU s in 2 s while waiting for KV"
        assert future.result(timeout=60)[0] == 200


@pytest.mark.slow
def test_dead_scheduler_fails_its_requests_fast_and_is_replaced(tmp_path: Path) -> None:
    with _cluster(tmp_path) as cluster, ThreadPoolExecutor(4) as pool:
        decode_url = cluster.children["decode0"].url
        old_pid = _engine_facts(decode_url)["scheduler_pid"]
        futures = [pool.submit(generate_ids, cluster.url, 3000) for _ in range(4)]
        time.sleep(1.0)
        killed_at = time.monotonic()
        os.kill(old_pid, signal.SIGKILL)
        results = [f.result(timeout=30) for f in futures]
        assert time.monotonic() - killed_at < 5.0
        assert all(status == 500 for status, _ in results), results
        assert all("scheduler process exited" in out["meta_info"]["failure_reason"] for _, out in results), results

        def restarted() -> bool:
            return _engine_facts(decode_url).get("scheduler_pid") not in (None, old_pid)

        assert wait_for(restarted, 20.0)
        assert wait_for(lambda: generate_ids(cluster.url, 3)[0] == 200, 20.0)
        decode = parse_metrics(get_text(f"{decode_url}/metrics"))
        assert sample_value(decode, "pdreal_scheduler_restarts_total") == 1
        assert sample_value(decode, "pdreal_up") == 1
        prefill = parse_metrics(get_text(f"{cluster.children['prefill0'].url}/metrics"))
        assert wait_for(lambda: sample_value(parse_metrics(get_text(f"{cluster.children['prefill0'].url}/metrics")),
                                              "pdreal_kv_used_tokens") == 0), prefill


@pytest.mark.slow
def test_scheduler_exits_when_its_http_process_is_killed(tmp_path: Path) -> None:
    """Busy (streaming tokens into a pipe nobody reads any more) or idle, a scheduler whose HTTP
    process is gone stops: nothing is left running."""
    with _cluster(tmp_path) as cluster, ThreadPoolExecutor(2) as pool:
        busy, idle = cluster.children["decode0"], cluster.children["prefill0"]
        pids = {name: _engine_facts(c.url)["scheduler_pid"] for name, c in (("busy", busy), ("idle", idle))}
        futures = [pool.submit(generate_ids, cluster.url, 3000) for _ in range(2)]
        time.sleep(1.0)
        busy.process.kill()
        idle.process.kill()

        def gone(pid: int) -> bool:
            try:
                return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
            except FileNotFoundError:
                return True

        for name, pid in pids.items():
            assert wait_for(lambda pid=pid: gone(pid), 10.0), f"{name} scheduler {pid} outlived its HTTP process"
        for future in futures:
            assert future.result(timeout=30)[0] == 500
