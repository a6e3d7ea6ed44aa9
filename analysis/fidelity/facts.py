"""The real engine's measured facts -> pdsim overrides (read, never retyped).

Inputs: `engine.json` from `pdreal profile` (the served engine's limits, KV bytes per token,
KV-transfer bandwidth and setup time, per-step overheads) and the idle probe of the running
cluster (`pdreal.probe`: dispatch, ZMQ transfer-info and delivery hops). Output: the hydra
overrides that make pdsim simulate that engine:

    cluster.page_size_tokens / kv_capacity_tokens / max_running_requests / max_prefill_tokens /
      chunk_size_tokens / prealloc_slots        <- engine.json's engine config
    cluster.prefix_cache                        <- the engine's prefix cache on/off
    cluster.transfer_backend=tcp, tcp_gbps      <- measured KV-transfer bandwidth
    cluster.link_latency_s                      <- probe: last forward -> decode sees the KV,
                                                   minus the probe's bytes at that bandwidth
                                                   (setup, aux notify, poll); else the profile's
                                                   one-page time minus its bytes
    cluster.control_plane_latency_s             <- probe: decode pre-allocation -> prefill sees it
    cluster.dispatch_latency_s                  <- probe: client -> router -> engine (mean of sides)
    cluster.token_delivery_s                    <- probe: the engine emits a token -> the client
                                                   has it (streaming through the router)
    perf.kind=table, perf.path                  <- profile.csv
    perf.prefill/decode_step_overhead_s         <- engine loop time per step beyond the forward
    perf.prefill/decode_step_scale              <- loaded probe (pilot.py): served forwards /
                                                   profile on the pilot's requests (absent: 1)
    model.dtype                                 <- the engine's dtype (KV bytes on the wire)

Colocated (`colocated` > 0; engine.json profiled with cluster.mode=colocated): cluster.mode=
colocated, cluster.colocated, cluster.colocated_schedule and policy.new_token_ratio from the
colocated engine, the same limits, cluster.dispatch_latency_s from the probe's client -> router
-> colocated engine hop and token_delivery_s from its last prompt forward -> client; no transfer or decode pre-allocation parameters (nothing moves).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.fidelity.pilot import probed_step_scale


@dataclass(frozen=True)
class EngineFacts:
    """What pdsim needs from engine.json (+ the probe), in pdsim's units."""

    page_size_tokens: int
    kv_capacity_tokens: int
    max_running_requests: int
    max_prefill_tokens: int
    chunk_size_tokens: int
    prealloc_slots: int
    dtype: str
    kv_bytes_per_token: int
    transfer_bytes_per_s: float
    transfer_setup_s: float
    prefill_step_overhead_s: float
    decode_step_overhead_s: float
    probe: dict[str, float]
    mode: str = "disaggregated"  # the profiled engine: disaggregated | colocated
    colocated_schedule: str = "mixed"
    new_token_ratio: float = 0.0  # the colocated engine's KV reserve for its decodes
    prefix_cache: bool = False  # the engine's radix prefix cache (engine.json before it: none)

    @classmethod
    def load(cls, engine_json: Path, probe: dict[str, Any] | None = None) -> EngineFacts:
        try:
            data = json.loads(Path(engine_json).read_text())
            engine, transfer = data["engine"], data["transfer"]
            bandwidth = float(transfer["bandwidth_bytes_per_s"])
            page_bytes = data["kv_bytes_per_token"] * data["page_size_tokens"]
            setup = max(0.0, float(transfer["one_page_transfer_s"]) - page_bytes / bandwidth)
            return cls(
                page_size_tokens=int(data["page_size_tokens"]),
                kv_capacity_tokens=int(data["kv_capacity_tokens"]),
                max_running_requests=int(data["max_running_requests"]),
                max_prefill_tokens=int(data["max_prefill_tokens"]),
                chunk_size_tokens=int(data["chunk_size_tokens"]),
                prealloc_slots=int(engine["max_prealloc_requests"]),
                dtype=str(data["dtype"]),
                kv_bytes_per_token=int(data["kv_bytes_per_token"]),
                transfer_bytes_per_s=bandwidth,
                transfer_setup_s=setup,
                prefill_step_overhead_s=max(0.0, float(data["prefill_step_overhead_s"])),
                decode_step_overhead_s=max(0.0, float(data["decode_step_overhead_s"])),
                probe={k: float(v) for k, v in (probe or data.get("probe") or {}).items()
                       if isinstance(v, int | float)},
                mode=str(data.get("mode", "disaggregated")),
                colocated_schedule=str(engine.get("colocated_schedule", "mixed")),
                new_token_ratio=float(engine.get("new_token_ratio", 0.0)),
                prefix_cache=bool(engine.get("prefix_cache", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{engine_json}: not a `pdreal profile` engine.json ({type(exc).__name__}: {exc})") from None

    def _probed(self, name: str) -> float | None:
        value = self.probe.get(name)
        return value if value is not None and math.isfinite(value) and value >= 0 else None

    def link_latency_s(self) -> float:
        ready, nbytes = self._probed("kv_ready_s"), self._probed("kv_bytes")
        if ready is None or nbytes is None:
            return self.transfer_setup_s
        return max(0.0, ready - nbytes / self.transfer_bytes_per_s)

    def cluster_overrides(self) -> dict[str, Any]:
        values: dict[str, Any] = {
            "page_size_tokens": self.page_size_tokens,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "max_running_requests": self.max_running_requests,
            "max_prefill_tokens": self.max_prefill_tokens,
            "chunk_size_tokens": self.chunk_size_tokens,
            "prefix_cache": self.prefix_cache,
        }
        delivery = self._probed("token_delivery_s")
        if delivery is not None:
            values["token_delivery_s"] = delivery
        if self.mode == "colocated":
            dispatch = self._probed("dispatch_colocated_s")
            if dispatch is not None:
                values["dispatch_latency_s"] = dispatch
            return values
        values.update(prealloc_slots=self.prealloc_slots, transfer_backend="tcp",
                      tcp_gbps=8 * self.transfer_bytes_per_s / 1e9, link_latency_s=self.link_latency_s())
        info = self._probed("transfer_info_s")
        if info is not None:
            values["control_plane_latency_s"] = info
        sides = [v for v in (self._probed("dispatch_prefill_s"), self._probed("dispatch_decode_s")) if v is not None]
        if sides:
            values["dispatch_latency_s"] = sum(sides) / len(sides)
        return values

    def perf_overrides(self, profile_csv: Path) -> dict[str, Any]:
        return {"kind": "table", "path": str(Path(profile_csv).resolve()),
                "prefill_step_overhead_s": self.prefill_step_overhead_s,
                "decode_step_overhead_s": self.decode_step_overhead_s, **probed_step_scale(self.probe)}


def sim_overrides(facts: EngineFacts, profile_csv: Path, model: str, prefill: int, decode: int,
                  colocated: int = 0) -> list[str]:
    """pdsim hydra overrides for the profiled engine in a prefill x decode cluster, or (colocated
    > 0) in a cluster of that many colocated instances (the engine must be a colocated one)."""
    out = [f"model={model}", f"model.dtype={facts.dtype}", "cluster=1p1d"]
    if colocated > 0:
        if facts.mode != "colocated":
            raise ValueError(f"{colocated} colocated instances asked, but the engine facts are of a {facts.mode} "
                             "engine: profile with cluster.mode=colocated (pdsim fidelity --colocated N)")
        out += ["cluster.mode=colocated", f"cluster.colocated={colocated}",
                f"cluster.colocated_schedule={facts.colocated_schedule}",
                f"policy.new_token_ratio={_fmt(facts.new_token_ratio)}"]
    elif facts.mode == "colocated":
        raise ValueError(f"a {prefill}P{decode}D cluster asked, but the engine facts are of a colocated engine: "
                         "profile without cluster.mode=colocated")
    else:
        out += [f"cluster.prefill={prefill}", f"cluster.decode={decode}"]
    out += [f"cluster.{k}={_fmt(v)}" for k, v in facts.cluster_overrides().items()]
    out += [f"perf.{k}={_fmt(v)}" for k, v in facts.perf_overrides(profile_csv).items()]
    return out


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)
