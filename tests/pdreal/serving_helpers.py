"""Helpers for the serving tests: a tiny-model YAML, HTTP calls with urllib, a cluster context."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

TINY_MODEL_YAML = """\
name: tiny
num_layers: 2
hidden_size: 32
num_heads: 4
num_kv_heads: 2
head_dim: 8
ffn_size: 64
vocab_size: 101
tied_embeddings: true
dtype: fp32
"""


def tiny_model_file(folder: Path) -> str:
    path = folder / "tiny.yaml"
    path.write_text(TINY_MODEL_YAML)
    return str(path)


def post(url: str, body: Any, timeout_s: float = 60.0, raw: bytes | None = None) -> tuple[int, dict[str, Any]]:
    data = raw if raw is not None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def get_text(url: str, timeout_s: float = 10.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return resp.read().decode()


def sse(url: str, body: Any, timeout_s: float = 60.0) -> list[dict[str, Any]]:
    """POST and read a Server-Sent Events stream: the JSON events, up to `data: [DONE]`."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    events = []
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        for raw in resp:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                return events
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    raise AssertionError(f"stream ended without [DONE] after {len(events)} events")


def generate_ids(url: str, max_new_tokens: int, timeout_s: float = 60.0) -> tuple[int, dict[str, Any]]:
    """POST /generate of a fixed 29-token prompt, greedy, ignoring EOS: (status, body)."""
    body = {"input_ids": list(range(1, 30)), "sampling_params": {"max_new_tokens": max_new_tokens,
                                                                  "temperature": 0, "ignore_eos": True}}
    return post(f"{url}/generate", body, timeout_s)


def wait_for(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll `predicate` every 50 ms until it holds (True) or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
