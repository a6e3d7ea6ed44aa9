"""Wiring the KV tiers into a simulation, and their run summary.

`attach_kv_tiers` gives every prefill instance its host/ssd tiers (kv_tiers.InstanceTiers) and a
handle on one shared global store, with PCIe bandwidth hardware.pcie_gbps per GPU times the
prefill TP, and store reads as network flows into the instance's NIC (nic_in, node_in).
`kv_tier_summary` turns the trace's per-tier columns and the instances' counters into the
summary's `kv_tiers` section (hit ratios are shares of all prompt tokens of requests that
started a prefill; bytes are totals over prefill instances).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from pdsim.config import Config
from pdsim.perf.spec import kv_bytes_per_token
from pdsim.policy.kv_centric import TIER_NAMES
from pdsim.sim.kv_tiers import InstanceTiers, TierLRU
from pdsim.sim.network import Network

STORE_WRITES = ("through", "evict")
EVICTIONS = ("lru", "fifo")
DECISIONS = ("cost", "always")


def validate_kv_tiers(cfg: Config) -> None:
    t = cfg.kv_tiers
    for name, value, allowed in (("store_write", t.store_write, STORE_WRITES), ("eviction", t.eviction, EVICTIONS),
                                 ("decision", t.decision, DECISIONS)):
        if value not in allowed:
            raise ValueError(f"kv_tiers: field {name!r} has unknown value {value!r} (choose from {allowed})")
    for name in ("host_tokens", "ssd_tokens", "store_tokens", "hot_block_hits"):
        if getattr(t, name) < 0:
            raise ValueError(f"kv_tiers: field {name!r} must be >= 0, got {getattr(t, name)}")
    if t.ssd_tokens and t.ssd_gbps <= 0:
        raise ValueError(f"kv_tiers: field 'ssd_gbps' must be > 0 with an SSD tier, got {t.ssd_gbps}")
    if t.enabled and not cfg.cluster.prefix_cache:
        raise ValueError("kv_tiers: tiers need cluster.prefix_cache=true (the GPU tier)")


def attach_kv_tiers(cfg: Config, prefill: Sequence[Any], network: Network, block_tokens: int) -> TierLRU | None:
    """Attach tiers to placed prefill instances when cfg.kv_tiers has any; returns the store."""
    t = cfg.kv_tiers
    validate_kv_tiers(cfg)
    if not t.enabled or cfg.cluster.mode != "disaggregated":
        return None
    store = TierLRU("store", t.store_tokens // block_tokens, t.eviction == "lru") if t.store_tokens else None
    tp = cfg.cluster.prefill_tp
    pcie = cfg.hardware.pcie_gbps * 1e9 * tp
    for inst in prefill:
        tiers = InstanceTiers(inst.name, t, block_tokens, kv_bytes_per_token(cfg.model), pcie, inst.latency, store)
        path = (inst.placement.nic_in, inst.placement.node_in)
        tiers.nic_bytes_per_s = min(r.capacity_bytes_per_s for r in path)
        tiers.start_store_read = _store_reader(network, path)
        inst.kv.attach_tiers(tiers)
    return store


def _store_reader(network: Network, path: tuple[Any, ...]) -> Callable[[float, Callable[[], Any]], None]:
    def read(nbytes: float, on_done: Callable[[], Any]) -> None:
        network.start_flow(path, nbytes, 0.0, on_done)

    return read


def kv_tier_summary(trace: pd.DataFrame, instance_stats: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Per-tier hit ratios, bytes moved per tier, prefill compute saved (see module docstring)."""
    started = trace[trace["prefill_start_s"].notna()] if "prefill_start_s" in trace else trace
    prompt = float(started["input_tokens"].sum()) if len(started) else 0.0
    out: dict[str, Any] = {}
    for name in TIER_NAMES:
        tokens = float(started[f"cached_tokens_{name}"].sum()) if len(started) else 0.0
        out[f"hit_ratio_{name}"] = tokens / prompt if prompt else 0.0
    cached = float(started["cached_prefix_tokens"].sum()) if len(started) else 0.0
    out["hit_ratio"] = cached / prompt if prompt else 0.0
    out["prefill_tokens_saved"] = cached
    out["prefill_compute_saved_fraction"] = out["hit_ratio"]
    out["load_skipped_tokens"] = float(started["kv_load_skipped_tokens"].sum()) if len(started) else 0.0
    keys = ("kv_load_bytes_host", "kv_load_bytes_ssd", "kv_load_bytes_store", "kv_demote_bytes_host",
            "kv_demote_bytes_ssd", "kv_demote_bytes_store", "kv_store_write_bytes", "kv_recompute_saved_s",
            "kv_load_s", "kv_loads_taken", "kv_loads_rejected", "kv_replicated_blocks")
    for key in keys:
        out[key.removeprefix("kv_")] = float(sum(s.get(key, 0.0) for s in instance_stats.values()))
    return out
