"""`pdreal serve` configuration: one node's role plus the pdsim groups it shares.

A serve config is YAML (or only `key=value` overrides) merged into `ServeConfig`:

    node:     pdreal-only settings of this process (role, host, port, model, peers)
    cluster:  pdsim's ClusterConfig (page size, batching limits, KV capacity) - same fields;
              mode=colocated with colocated=N and colocated_schedule serves N colocated
              instances (role=all) instead of prefill + decode
    policy:   pdsim's PolicyConfig (routing, admission and their parameters)
    slo:      pdsim's SloConfig (early-rejection admission reads it)
    faults:   pdsim's FaultConfig (heartbeat interval and misses, bootstrap timeout)

A group may be named instead of spelt out, as in pdsim: `policy: least_loaded` in the YAML or
`policy=least_loaded` on the command line loads `scenarios/policy/least_loaded.yaml`. Unknown
keys and wrong types fail with the key named (OmegaConf structured merge).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pdreal.serving.auth import is_loopback
from pdsim.config import ClusterConfig, FaultConfig, PolicyConfig, SloConfig
from pdsim.paths import SCENARIOS_DIR
from pdsim.policy.limits import check_schedule

ROLES = ("all", "prefill", "decode", "colocated", "router")
MODES = ("disaggregated", "colocated")
KV_EVENTS_MODES = ("auto", "on", "off")
CACHE_ROUTING = ("cache_aware", "kv_centric")  # the routing policies that read KV events
SHARED_GROUPS = ("cluster", "policy", "slo")
DEFAULT_NUM_PAGES = 1024


@dataclass
class NodeConfig:
    # all (a local cluster: 1P/1D or, with cluster.mode=colocated, cluster.colocated instances, plus
    # the router) | prefill | decode | colocated | router
    role: str = "all"
    host: str = "127.0.0.1"  # HTTP bind address (and the transfer engine's host)
    advertise_host: str = ""  # address peers use to reach this node ("" = host)
    port: int = 0  # HTTP port; 0 = any free port (the READY line names it)
    instance_id: int = 0
    model: str = "smollm2"  # smollm2 (real weights) | catalog name or YAML path (random weights)
    model_seed: int = 0
    dtype: str = "fp32"
    device: str = "cpu"
    attention: str = "torch"  # torch | flashinfer
    threads: int = 1  # torch threads of an instance process
    num_pages: int = 0  # KV pages; 0 = cluster.kv_capacity_tokens / page size, else 1024
    max_prealloc_requests: int = 0  # decode pre-allocation slots; 0 = cluster.prealloc_slots or 2x running
    transfer_backend: str = "mooncake"
    transfer_protocol: str = "tcp"  # tcp | rdma
    transfer_device: str = ""  # RDMA device (e.g. mlx5_0); "" = auto
    prefill_urls: list[str] = field(default_factory=list)  # router: prefill instances, id = index
    decode_urls: list[str] = field(default_factory=list)  # router: decode instances, id = index
    colocated_urls: list[str] = field(default_factory=list)  # router: colocated instances (instead of P/D)
    stats_interval_s: float = 0.2  # router: how often instances' /stats are polled
    unhealthy_after_misses: int = 3  # router: failed polls before an instance stops being routed to
    request_timeout_s: float = 600.0  # router: give up on a half after this long
    # scheduler: the longest wait while work is pending but nothing can run (KV in flight); a KV
    # state change or a command wakes it at once, so this only bounds timeout checks
    poll_interval_s: float = 0.05
    latency_profile: str = ""  # router: a `pdreal profile` CSV; the latency model of early_reject admission
    kv_events: str = "auto"  # KV block events prefill -> router: auto (on for cache_aware/kv_centric) | on | off
    kv_events_port: int = 0  # prefill: ZMQ PUB port, replay on port + 1; 0 = any free ports
    # shared secret of the control plane (PUT /route, instance /generate and /abort; auth.py);
    # required for an instance bound beyond loopback; the router sends it to the instances
    token_file: str = ""

    @property
    def public_host(self) -> str:
        return self.advertise_host or self.host


@dataclass
class ServeConfig:
    node: NodeConfig = field(default_factory=NodeConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    slo: SloConfig = field(default_factory=SloConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    seed: int = 0

    @property
    def kv_events_enabled(self) -> bool:
        """Prefill instances publish KV events and the router follows them (node.kv_events)."""
        mode = self.node.kv_events
        return mode == "on" or (mode == "auto" and self.policy.routing in CACHE_ROUTING)

    def validate(self) -> ServeConfig:
        n = self.node
        if n.role not in ROLES:
            raise ValueError(f"node.role: unknown value {n.role!r} (choose from {ROLES})")
        pd_urls = bool(n.prefill_urls or n.decode_urls)
        if n.role == "router" and not ((n.prefill_urls and n.decode_urls) or n.colocated_urls):
            raise ValueError("node.role=router needs node.prefill_urls and node.decode_urls, or node.colocated_urls")
        if n.colocated_urls and pd_urls:
            raise ValueError("node.colocated_urls excludes node.prefill_urls / node.decode_urls "
                             f"(got {len(n.colocated_urls)} colocated, {len(n.prefill_urls)} prefill, "
                             f"{len(n.decode_urls)} decode)")
        c = self.cluster
        if c.mode not in MODES:
            raise ValueError(f"cluster.mode: unknown value {c.mode!r} (choose from {MODES})")
        check_schedule(c.colocated_schedule)
        if c.mode == "colocated" and c.colocated < 1:
            raise ValueError(f"cluster.colocated must be >= 1 in colocated mode, got {c.colocated}")
        if n.role in ("router", "all") and self.policy.admission == "early_reject" and not n.latency_profile:
            raise ValueError("policy.admission=early_reject needs node.latency_profile (a `pdreal profile` CSV)")
        if n.kv_events not in KV_EVENTS_MODES:
            raise ValueError(f"node.kv_events: unknown value {n.kv_events!r} (choose from {KV_EVENTS_MODES})")
        if n.role in ("prefill", "decode", "colocated") and not is_loopback(n.host) and not n.token_file:
            raise ValueError(f"node.host={n.host!r} binds beyond loopback: set node.token_file=PATH (a shared "
                             "secret, the same file on every node and the router) to protect the control plane")
        if self.faults.heartbeat_interval_s <= 0 or self.faults.heartbeat_misses < 1:
            raise ValueError(f"faults: heartbeat_interval_s must be > 0 and heartbeat_misses >= 1, got "
                             f"{self.faults.heartbeat_interval_s} and {self.faults.heartbeat_misses}")
        return self


def _group_file(group: str, name: str) -> Any:
    path = SCENARIOS_DIR / group / f"{name}.yaml"
    if not path.is_file():
        options = sorted(p.stem for p in (SCENARIOS_DIR / group).glob("*.yaml"))
        raise ValueError(f"{group}={name!r}: no {path} (available: {', '.join(options)})")
    values = OmegaConf.load(path)
    if not isinstance(values, DictConfig):
        raise ValueError(f"{group}={name!r}: {path} is a list, not a mapping")
    values.pop("defaults", None)
    return values


# Prefill limits per forward where pdsim's defaults (8192 tokens, sized for GPUs) would let one
# forward run for many seconds: on a CPU a 4,000-token prompt was one ~18 s forward, and every
# request behind it waited that long. Chunks of 256 tokens take ~0.3-0.8 s with SmolLM2 on one
# core (the budget per forward is min(max_prefill_tokens, chunk_size_tokens), pdsim.policy's rule,
# as SGLang's). `pdreal profile` writes these into engine.json, and `pdsim fidelity` simulates
# the engine with them.
CPU_PREFILL_DEFAULTS = {"chunk_size_tokens": 256, "max_prefill_tokens": 256}


def prefill_defaults(device: str) -> dict[str, int]:
    """pdreal serve's default cluster.chunk_size_tokens / max_prefill_tokens on `device`."""
    return dict(CPU_PREFILL_DEFAULTS) if device == "cpu" else {}


def load_serve_config(path: str | Path | None = None, overrides: list[str] | None = None) -> ServeConfig:
    """Merge the YAML at `path` (optional) and `key=value` overrides into a checked ServeConfig."""
    layers: list[Any] = [OmegaConf.structured(ServeConfig)]
    try:
        if path is not None:
            data = OmegaConf.load(path)
            if not isinstance(data, DictConfig):
                raise ValueError(f"{path}: a serve config is a mapping, not a list")
            for group in SHARED_GROUPS:
                if isinstance(data.get(group), str):
                    data[group] = _group_file(group, data[group])
            layers.append(data)
        dotlist = []
        for item in overrides or []:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"override {item!r} is not key=value")
            if key in SHARED_GROUPS:
                layers.append(OmegaConf.create({key: _group_file(key, value)}))
            else:
                dotlist.append(item)
        layers.append(OmegaConf.from_dotlist(dotlist))
        device = str(OmegaConf.merge(*layers).node.device)
        # pdreal's own prefill limits for the device (before the user's values, which win)
        layers.insert(1, OmegaConf.create({"cluster": prefill_defaults(device)}))
        merged = OmegaConf.merge(*layers)
        cfg = OmegaConf.to_object(merged)
    except OmegaConfBaseException as exc:
        raise ValueError(f"serve config{f' {path}' if path else ''}: {str(exc).splitlines()[0]}") from None
    assert isinstance(cfg, ServeConfig)
    return cfg.validate()


def dump_serve_config(cfg: ServeConfig, path: Path) -> Path:
    """Write `cfg` as YAML that `load_serve_config` reads back (hands a config to child processes)."""
    Path(path).write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    return Path(path)
