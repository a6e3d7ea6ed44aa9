"""A fake `pdreal profile` engine.json and profile.csv for the fidelity loop's pure tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

ENGINE = {
    "dtype": "fp32", "page_size_tokens": 16, "kv_capacity_tokens": 8192, "max_running_requests": 32,
    "max_prefill_tokens": 2048, "chunk_size_tokens": 512, "kv_bytes_per_token": 46080,
    "engine": {"max_prealloc_requests": 64},
    "transfer": {"bandwidth_bytes_per_s": 2.0e9, "one_page_transfer_s": 0.002},
    "prefill_step_overhead_s": 0.003, "decode_step_overhead_s": 0.001,
}
PROFILE = ("kind,num_seqs,new_tokens,context_tokens,latency_s\nprefill,1,16,0,0.1\nprefill,1,64,0,0.3\n"
           "decode,1,1,64,0.05\ndecode,4,4,256,0.08\n")


@pytest.fixture
def engine_json(tmp_path: Path) -> Callable[..., Path]:
    """Writes engine.json (ENGINE with `extra` keys) into `folder` (default tmp_path); returns its path."""
    def write(folder: Path | None = None, **extra: object) -> Path:
        path = (folder or tmp_path) / "engine.json"
        path.write_text(json.dumps({**ENGINE, **extra}))
        return path
    return write


@pytest.fixture
def profile_csv(tmp_path: Path) -> Path:
    path = tmp_path / "profile.csv"
    path.write_text(PROFILE)
    return path
