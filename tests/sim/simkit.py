"""Builders for tiny simulator scenarios (Config objects built directly, no hydra)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from pdsim.config import (
    ClusterConfig,
    Config,
    FaultConfig,
    HardwareConfig,
    ModelConfig,
    PerfConfig,
    PolicyConfig,
    ScenarioConfig,
    SloConfig,
)
from pdsim.workload.request import Workload, make_workload

# 1 layer, 1 KV head of dim 250, bf16: 2 * 250 * 2 = 1000 KV bytes per token.
TINY_MODEL = ModelConfig(
    name="tiny", num_layers=1, hidden_size=256, num_heads=1, num_kv_heads=1, head_dim=250,
    ffn_size=512, vocab_size=1000,
)
# One GPU and one 8 Gb/s (1e9 B/s) NIC per node, no NVLink: every instance on its own node.
TINY_HW = HardwareConfig(
    name="toy", bf16_tflops=100.0, hbm_gbps=1000.0, memory_gib=16.0, nvlink_gbps=0.0,
    gpus_per_node=1, nics_per_node=1, nic_gbps=8.0, pcie_gbps=1.0,
)
KV_BYTES_PER_TOKEN = 1000
NIC_BYTES_PER_S = 1e9


def make_config(
    cluster: dict[str, Any] | None = None, perf: dict[str, Any] | None = None,
    policy: dict[str, Any] | None = None, faults: dict[str, Any] | None = None,
    hardware: dict[str, Any] | None = None, **top: Any,
) -> Config:
    """A tiny cluster: 1P1D, page 10 tokens, 1000 KV tokens per instance, 1 ms control hops,
    prefill = 0.1 + 0.001/token s, decode = 0.01 s per iteration, no aux bytes, no link latency."""
    base_cluster = dict(
        prefill=1, decode=1, colocated=1, page_size_tokens=10, kv_capacity_tokens=1000,
        max_running_requests=8, max_prefill_tokens=1000, chunk_size_tokens=0, prefix_cache=False,
        control_plane_latency_s=0.001, link_latency_s=0.0, transfer_aux_bytes=0,
    )
    base_perf = dict(
        kind="linear", prefill_base_s=0.1, prefill_per_token_s=0.001, decode_base_s=0.01,
        decode_per_seq_s=0.0, decode_per_ctx_token_s=0.0,
    )
    base_top = dict(seed=0, progress=False, timeseries_interval_s=0.0)
    base_top.update(top)
    return Config(
        scenario=ScenarioConfig(name="tiny"),
        model=TINY_MODEL,
        hardware=replace(TINY_HW, **(hardware or {})),
        cluster=ClusterConfig(**{**base_cluster, **(cluster or {})}),
        policy=PolicyConfig(**{"decode_reserved_tokens": 0, **(policy or {})}),
        slo=SloConfig(),
        perf=PerfConfig(**{**base_perf, **(perf or {})}),
        faults=FaultConfig(**(faults or {})),
        **base_top,
    )


def make_requests(rows: list[tuple[float, int, int]], hashes: list[list[int]] | None = None,
                  block_tokens: int = 512) -> Workload:
    """rows: (arrival_s, input_tokens, output_tokens) per request."""
    arr = np.array(rows, dtype=float).reshape(-1, 3)
    return make_workload(
        "tiny", arr[:, 0], arr[:, 1].astype(np.int64), arr[:, 2].astype(np.int64),
        hash_lists=[np.array(h, dtype=np.int64) for h in hashes] if hashes is not None else None,
        block_tokens=block_tokens,
    )


def synthetic(n: int, seed: int, rate_rps: float = 20.0, shared_prefixes: int = 4) -> Workload:
    """Poisson arrivals, varied lengths, prompts sharing a few 64-token-block prefixes."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_rps, n))
    inputs = rng.integers(20, 600, n)
    outputs = rng.integers(1, 60, n)
    hashes = []
    for i in range(n):
        blocks = int(inputs[i]) // 64
        prefix = int(rng.integers(shared_prefixes))
        hashes.append(np.array([prefix * 1000 + b if b < 3 else 10**6 + i * 100 + b for b in range(blocks)]))
    return make_workload("synthetic", arrival, inputs, outputs, hash_lists=hashes, block_tokens=64)


def timeline(trace: Any, request_id: int, fields: tuple[str, ...]) -> list[tuple[str, float]]:
    """(field, time rounded to 1 ns) for one request, in the given field order."""
    row = trace.set_index("request_id").loc[request_id]
    return [(f, round(float(row[f]), 9)) for f in fields]


def rounded(pairs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    return [(f, round(t, 9)) for f, t in pairs]
