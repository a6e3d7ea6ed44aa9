"""Chaos: `pdreal serve` (1P1D, tiny random model, real subprocesses, Mooncake TCP on loopback)
under a small open-loop replay while its instances are stopped (SIGSTOP), resumed and killed, and
every kind of bad request is sent. Every request must end - finished, or failed or rejected with
a reason - within a bound; the supervisor restarts the killed child and says why; the service
answers afterwards; KV pages, transfer rooms, live requests and the router's in-flight count all
return to zero; a 10 MB body in flight does not hold the router's /health."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

from serving_helpers import get_text, post, tiny_model_file  # noqa: E402

from pdreal.replay import PlannedRequest, ReplayOptions, replay  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
OVERRIDES = ["node.num_pages=64", "faults.heartbeat_interval_s=0.2", "faults.heartbeat_misses=2",
             "node.stats_interval_s=0.1", "node.unhealthy_after_misses=2"]
REQUEST_BOUND_S = 15.0  # no request may take longer than this from send to its end, whatever happens
HEALTH_BOUND_S = 0.5  # /health answers within this while a 10 MB body is being parsed
BAD_REQUESTS: list[tuple[str, Any, int, str]] = [  # path, body (bytes: sent raw), status, in the message
    ("/v1/completions", {"prompt": [1, 2], "max_tokens": 3, "temperature": 0.7, "seed": -1}, 400, "field 'seed'"),
    ("/v1/completions", b'{"prompt": [1, 2], "temperature": NaN}', 400, "field 'temperature'"),
    ("/v1/completions", {"prompt": [1, 2], "max_tokens": 0}, 400, "field 'max_tokens'"),
    ("/v1/completions", {"prompt": [1, 2], "top_p": 7}, 400, "field 'top_p'"),
    ("/v1/completions", {"prompt": [1, 500]}, 400, "token id 500"),
    ("/v1/completions", {"prompt": [1] * 2000}, 400, "2000 token ids exceed the largest KV pool (1024 tokens)"),
    ("/v1/completions", {"prompt": [1] * 1000, "max_tokens": 100}, 400, "exceeds the decode KV pool (1024 tokens)"),
    ("/v1/completions", {"prompt": "\ud800"}, 400, "no tokenizer"),
    ("/v1/completions", {"prompt": [1, 2], "logprobs": 9}, 400, "field 'logprobs' must be an integer in [0, 5]"),
    ("/v1/completions", {"prompt": [1, 2], "model": "gpt-4"}, 404, "model 'gpt-4' does not exist"),
    ("/v1/completions", b"[" * 50_000 + b"]" * 50_000, 400, "nested too deeply"),
    ("/generate", {"input_ids": [1, 2], "sampling_params": [1]}, 400, "field 'sampling_params' must be a JSON object"),
    ("/generate", {"input_ids": [1, 2], "sampling_params": {"stop_token_ids": ["x"]}}, 400, "'stop_token_ids': 'x'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
     "only text parts"),
]


class Serve:
    """`pdreal serve` in a subprocess; its stdout lines are collected by a thread."""

    def __init__(self, tmp_path: Path) -> None:
        self.logs = tmp_path / "logs" / "not-yet-there"  # --log-dir is created
        cmd = [sys.executable, "-m", "pdreal.cli", "serve", "--log-dir", str(self.logs),
               f"node.model={tiny_model_file(tmp_path)}", *OVERRIDES]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        ready = self.wait_line(r"pdreal serve: ready at (\S+)", 120.0)
        self.url = ready.group(1)
        started = [m for m in (re.match(r"pdreal serve: (\w+) \(pid (\d+)\) at (\S+)", x) for x in self.lines) if m]
        self.pids = {m.group(1): int(m.group(2)) for m in started}
        self.urls = {m.group(1): m.group(3) for m in started}

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip())

    def wait_line(self, pattern: str, timeout_s: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if match := re.search(pattern, line):
                    return match
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in {timeout_s} s:\n" + "\n".join(self.lines))

    def stop(self) -> None:
        for pid in self.pids.values():  # never leave a child stopped
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _health_latency_s(url: str) -> float:
    start = time.monotonic()
    with urllib.request.urlopen(f"{url}/health", timeout=10.0) as resp:
        resp.read()
    return time.monotonic() - start


def _big_bodies_keep_health_responsive(url: str) -> None:
    """~10 MB: refused by size before it is read; ~1 MB (under that limit): decoded and checked on
    the router's worker thread. /health answers within HEALTH_BOUND_S meanwhile."""
    for ids, status, needle in [(3_300_000, 413, "bytes exceeds 1048576 bytes"),
                                (200_000, 400, "200000 token ids exceed the largest KV pool (1024 tokens)")]:
        raw = json.dumps({"prompt": [7] * ids, "max_tokens": 2}).encode()
        answer: list[tuple[int, dict[str, Any]]] = []
        sender = threading.Thread(target=lambda r=raw, a=answer: a.append(post(f"{url}/v1/completions", None, raw=r)))
        sender.start()
        latencies = []
        while sender.is_alive() or not latencies:
            latencies.append(_health_latency_s(url))
            time.sleep(0.02)
        sender.join()
        assert answer[0][0] == status and needle in answer[0][1]["error"]["message"], answer
        assert max(latencies) < HEALTH_BOUND_S, latencies


def _bad_requests_are_refused(url: str) -> None:
    for path, body, status, needle in BAD_REQUESTS:
        raw = body if isinstance(body, bytes) else None
        got, out = post(url + path, None if raw else body, timeout_s=10.0, raw=raw)
        assert got == status and needle in out["error"]["message"], (path, got, out)


def _sampling_is_fresh_unless_seeded(url: str) -> None:
    def sample(seed: int | None) -> list[int]:
        params = {"max_new_tokens": 12, "temperature": 50.0, "ignore_eos": True, **({"seed": seed} if seed else {})}
        status, out = post(f"{url}/generate", {"input_ids": [3, 4, 5], "sampling_params": params}, timeout_s=30.0)
        assert status == 200, out
        return out["output_ids"]

    assert sample(None) != sample(None)  # (a random tiny model is peaked: 50 flattens it to near-uniform)
    assert sample(9) == sample(9)


def _control_plane_needs_the_token(prefill_url: str) -> None:
    entry = {"engine_rank": 0, "addr": "127.0.0.1:1"}  # would misroute every later request
    req = urllib.request.Request(f"{prefill_url}/route", data=json.dumps(entry).encode(), method="PUT",
                                 headers={"Content-Type": "application/json", "X-PDReal-Token": "guess"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5.0)
    assert err.value.code == 401 and "control token wrong" in json.loads(err.value.read())["error"]


def _long_request(url: str, results: list[tuple[float, int, dict[str, Any]]]) -> threading.Thread:
    def run() -> None:
        start = time.monotonic()
        body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 900, "temperature": 0, "ignore_eos": True}}
        status, out = post(f"{url}/generate", body, timeout_s=60.0)
        results.append((time.monotonic() - start, status, out))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _drop_a_client(url: str) -> None:
    """A streaming client that goes away after its first event."""
    body = {"input_ids": [1, 2, 3], "stream": True, "sampling_params": {"max_new_tokens": 900, "ignore_eos": True}}
    req = urllib.request.Request(f"{url}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30.0) as resp:
        resp.readline()


def _healthy(url: str, role: str) -> bool:
    stats = json.loads(get_text(f"{url}/stats"))
    return all(i["healthy"] for i in stats["instances"] if i["role"] == role)


def _settled(url: str) -> tuple[bool, str]:
    stats = json.loads(get_text(f"{url}/stats"))
    router = parse_metrics(get_text(f"{url}/metrics"))
    state = [(i["role"], i["healthy"], i["stats"].get("kv_used_tokens"), i["stats"].get("transfer_rooms"),
              i["stats"].get("num_live"), sum(i["stats"].get("queues", {}).values())) for i in stats["instances"]]
    inflight = sample_value(router, "pdreal_router_inflight_requests")
    ok = inflight == 0 and all(healthy and kv == 0 and rooms == 0 and live == 0 and queued == 0
                               for _, healthy, kv, rooms, live, queued in state)
    return ok, f"inflight {inflight}, instances {state}"


def _wait(predicate: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = predicate()
        if (result[0] if isinstance(result, tuple) else result) or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


def test_chaos_every_request_ends_and_nothing_leaks(tmp_path: Path) -> None:
    serve = Serve(tmp_path)
    try:
        url = serve.url
        planned = [PlannedRequest(i, 0.3 * i, 16 + i % 24, 60 + 7 * (i % 9)) for i in range(45)]
        outcome: dict[str, Any] = {}
        options = ReplayOptions(drain_timeout_s=40.0, request_timeout_s=60.0)
        replayer = threading.Thread(target=lambda: outcome.update(
            zip(("rows", "facts"), asyncio.run(replay(url, planned, 101, options)), strict=True)))
        replayer.start()
        _bad_requests_are_refused(url)
        _big_bodies_keep_health_responsive(url)
        _sampling_is_fresh_unless_seeded(url)
        _control_plane_needs_the_token(serve.urls["prefill0"])
        _drop_a_client(url)
        stalled: list[tuple[float, int, dict[str, Any]]] = []
        long_one = _long_request(url, stalled)
        time.sleep(0.3)
        os.kill(serve.pids["decode0"], signal.SIGSTOP)  # alive, silent
        long_one.join(REQUEST_BOUND_S)
        time.sleep(max(0.0, 1.5 - stalled[0][0]) if stalled else 0.0)
        os.kill(serve.pids["decode0"], signal.SIGCONT)
        elapsed, status, out = stalled[0]
        assert status == 500 and "decode:0" in out["meta_info"]["failure_reason"], out
        assert elapsed < 5.0, f"the stalled decode's request ended after {elapsed:.1f} s"
        assert _wait(lambda: _healthy(url, "decode"), 10.0), "the resumed decode is not routed to again"
        os.kill(serve.pids["prefill0"], signal.SIGKILL)
        killed = time.monotonic()
        serve.wait_line(r"prefill0 \(pid \d+\) killed by SIGKILL; restarting it on port \d+", 10.0)
        serve.wait_line(r"prefill0 \(pid \d+\) is back at ", 90.0)
        assert time.monotonic() - killed < 90.0
        replayer.join(120.0)
        rows, facts = outcome["rows"], outcome["facts"]
        assert facts["requests_unfinished_at_stop"] == 0
        assert {r["status"] for r in rows} <= {"finished", "failed", "rejected"}
        assert all(r["failure_reason"] for r in rows if r["status"] != "finished")
        took = max(r["finish_s"] - r["arrival_s"] for r in rows)
        assert took < REQUEST_BOUND_S, f"a request took {took:.1f} s"
        # the first second's requests, before any fault, finish at least (more when the restart is quick)
        assert sum(r["status"] == "finished" for r in rows) >= 3, "\n".join(
            f"{r['arrival_s']:.1f} {r['finish_s']:.1f} {r['status']} {r['failure_reason'][:120]}" for r in rows)
        # the service answers afterwards, and everything it held is released
        assert _wait(lambda: post(f"{url}/generate", {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 4}},
                                  timeout_s=10.0)[0] == 200, 30.0)
        settled, state = _wait(lambda: _settled(url), 15.0)
        assert settled, state
        router = parse_metrics(get_text(f"{url}/metrics"))
        assert sample_value(router, "pdreal_router_failures_total", status="failed", side="client") >= 1
        assert "Traceback" not in (serve.logs / "router.log").read_text()
    finally:
        serve.stop()
    assert serve.process.returncode == 0, "\n".join(serve.lines)



def test_supervisor_restarts_on_exit_or_a_dead_engine_only(tmp_path: Path) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from pdreal.serving.config import load_serve_config
    from pdreal.serving.launch import Child, LocalCluster

    class DeadEngine(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(503)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), DeadEngine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cluster = LocalCluster(load_serve_config(None, []), tmp_path, unhealthy_restart_s=0.5)
        child = Child("prefill0", process, url=f"http://127.0.0.1:{server.server_address[1]}")
        assert cluster._trouble(child) == ""  # 503 for a while is a scheduler restarting: wait
        time.sleep(0.6)
        assert cluster._trouble(child) == "unhealthy (/health 503 for 1 s)"
        os.kill(process.pid, signal.SIGSTOP)  # an instance that does not answer (busy, stopped) is left alone
        child.url, child.sick_since_s = "http://127.0.0.1:9", float("nan")
        assert cluster._trouble(child) == ""
        process.kill()
        process.wait(10)
        assert cluster._trouble(child) == "killed by SIGKILL"
    finally:
        server.shutdown()
        if process.poll() is None:
            process.kill()
