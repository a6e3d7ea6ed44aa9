"""pdreal's engines in virtual time, next to pdsim on the same workload and latency model.

The real engines (PrefillEngine, DecodeEngine, ColocatedEngine) run unchanged; only what they
touch outside themselves is replaced:

- `FakeRunner`: no model; a forward advances the engine's clock by the step time pdsim's latency
  model gives for the same batch (the very LatencyModel object pdsim builds from the config), and
  returns all-zero logits (greedy token 0, never EOS). A KV reload costs what pdsim charges
  (tokens x seconds per token over PCIe).
- `Fabric` + `VirtualKV`: the KV-transfer contract with timestamps. The decode side's transfer
  info reaches the prefill side at once (control-plane latency 0 in the pdsim config), and the
  last chunk's KV arrives the moment it is sent (pdsim: infinite NIC bandwidth, no link latency).
  A poll sees only what happened at or before the polling engine's clock.
- `drive`: a conservative discrete-event loop - always step the engine (or deliver the arrival)
  with the earliest time; a step is atomic (observe at t, forward until t + d); an engine with
  nothing to run sleeps until an arrival or a fabric event for it.
The router's decision comes from pdsim.policy.RouterPolicy with the same seeded streams as pdsim.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pandas as pd
import torch

from pdreal.engine.colocated import ColocatedEngine
from pdreal.engine.common import EngineConfig, EngineRequest, StepRecord, merge_halves
from pdreal.engine.decode import DecodeEngine
from pdreal.engine.prefill import PrefillEngine
from pdreal.kv.allocator import PageAllocator
from pdreal.model.batch import SeqChunk
from pdreal.model.sampling import SamplingParams
from pdreal.transfer.base import KVManager, KVPoll, KVReceiver, KVSender, TransferAux
from pdsim.config import Config
from pdsim.perf import LatencyModel, build_latency_model
from pdsim.policy import InstanceView, RequestView, RouterPolicy
from pdsim.policy.decisions import DecisionLog
from pdsim.rng import stream
from pdsim.sim.transfer import wire_bytes_per_token
from pdsim.workload.request import Workload

VOCAB = 8


@dataclass
class VClock:
    """One engine's local time; callable like time.monotonic."""

    t: float = 0.0

    def __call__(self) -> float:
        return self.t


class FakeRunner:
    """ModelRunner's contract, timed by pdsim's latency model on the engine's clock."""

    def __init__(self, role: str, latency: LatencyModel, config: EngineConfig, clock: VClock,
                 reload_s_per_token: float) -> None:
        self.role, self.latency, self.clock = role, latency, clock
        self.reload_s_per_token = reload_s_per_token
        self.config = config
        self.pool = SimpleNamespace(allocator=PageAllocator(config.num_pages))
        self.model = SimpleNamespace(spec=SimpleNamespace(eos_token_ids=(), context_length=0))
        self.steps: list[StepRecord] = []

    @property
    def page_size_tokens(self) -> int:
        return self.config.page_size_tokens

    def step_s(self, chunks: list[SeqChunk], num_decodes: int) -> float:
        prefills, decodes = chunks[:len(chunks) - num_decodes], chunks[len(chunks) - num_decodes:]
        items = [(len(c.token_ids), c.start) for c in prefills]
        ctx = sum(c.start for c in decodes)
        if self.role == "prefill":
            return self.latency.prefill_time_s(items)
        if not prefills:
            return self.latency.decode_time_s(len(decodes), ctx)
        return self.latency.mixed_time_s(items, len(decodes), ctx)

    def forward(self, chunks: list[SeqChunk], num_decodes: int | None = None) -> torch.Tensor:
        return self.forward_logits(chunks, num_decodes)[0]

    def forward_logits(self, chunks: list[SeqChunk], num_decodes: int | None = None
                       ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """ModelRunner.forward_logits: last-token logits, and every new token's where a chunk asks."""
        if num_decodes is None:
            num_decodes = 0 if self.role == "prefill" else len(chunks)
        self.clock.t += self.step_s(chunks, num_decodes)
        full = [torch.zeros((len(c.token_ids), VOCAB)) if c.all_logits else None for c in chunks]
        return torch.zeros((len(chunks), VOCAB)), full

    def offload_kv(self, pages: list[int], num_tokens: int) -> int:
        return num_tokens

    def reload_kv(self, pages: list[int], host_kv: int) -> None:
        self.clock.t += host_kv * self.reload_s_per_token


@dataclass
class Room:
    init_s: float = math.inf  # decode pre-allocated and sent its transfer info
    first_send_s: float = math.inf
    success_s: float = math.inf
    aux: TransferAux | None = None
    failed: str = ""


@dataclass
class Fabric:
    """The shared timestamped transfer state; `wake(node, t)` is called on events for a node."""

    rooms: dict[int, Room] = field(default_factory=dict)
    wake: Callable[[str, float], None] = lambda node, t: None


class VirtualKV(KVManager):
    backend = "virtual"

    def __init__(self, fabric: Fabric, clock: VClock, peer: str) -> None:
        self.fabric, self.clock, self.peer = fabric, clock, peer
        self.open: set[int] = set()

    @property
    def bootstrap_addr(self) -> str:
        return "virtual"

    def create_sender(self, room: int) -> KVSender:
        self.open.add(room)
        return _End(self, room, sender=True)

    def create_receiver(self, bootstrap_addr: str, room: int) -> KVReceiver:
        self.open.add(room)
        return _End(self, room, sender=False)

    def fail_peer(self, peer: str, reason: str) -> int:
        return 0

    def num_rooms(self) -> int:
        return len(self.open)

    def close(self) -> None:
        self.open.clear()


class _End(KVSender, KVReceiver):
    def __init__(self, manager: VirtualKV, room: int, sender: bool) -> None:
        self.m, self.room, self.sender = manager, room, sender
        self.state = manager.fabric.rooms.setdefault(room, Room())

    def poll(self) -> KVPoll:
        s, now = self.state, self.m.clock()
        if s.failed:
            return KVPoll.Failed
        if s.success_s <= now:
            return KVPoll.Success
        if self.sender:
            if s.first_send_s <= now:
                return KVPoll.Transferring
            return KVPoll.WaitingForInput if s.init_s <= now else KVPoll.Bootstrapping
        return KVPoll.Transferring if s.init_s <= now else KVPoll.WaitingForInput

    def send(self, pages: list[int], aux: TransferAux | None = None) -> None:
        now = self.m.clock()
        self.state.first_send_s = min(self.state.first_send_s, now)
        if aux is not None:
            self.state.aux = TransferAux(aux.bootstrap_room, aux.first_token_id, transfer_start_s=self.state.first_send_s,
                                         transfer_end_s=now)
            self.state.success_s = now
            self.m.fabric.wake(self.m.peer, now)

    def init(self, pages: list[int]) -> None:
        self.state.init_s = self.m.clock()
        self.m.fabric.wake(self.m.peer, self.state.init_s)

    def aux(self) -> TransferAux | None:
        return self.state.aux

    def abort(self, reason: str) -> None:
        self.state.failed = reason

    @property
    def failure_reason(self) -> str:
        return self.state.failed

    def close(self) -> None:
        self.m.open.discard(self.room)


def engine_config(cfg: Config, instance_id: int = 0) -> EngineConfig:
    """pdreal's engine limits from the pdsim config (same fields, same values)."""
    c, p = cfg.cluster, cfg.policy
    return EngineConfig(
        instance_id=instance_id, num_pages=c.kv_capacity_tokens // c.page_size_tokens,
        page_size_tokens=c.page_size_tokens, max_running_requests=c.max_running_requests,
        max_prealloc_requests=c.prealloc_slots or c.max_running_requests, max_prefill_tokens=c.max_prefill_tokens,
        chunk_size_tokens=c.chunk_size_tokens, new_token_ratio=p.new_token_ratio,
        decode_reserved_tokens=p.decode_reserved_tokens, colocated_schedule=c.colocated_schedule,
        prefix_cache=c.prefix_cache, batch_wait_iters=c.batch_wait_iters, batch_wait_tokens_ratio=c.batch_wait_tokens_ratio,
        recv_interval_steps=c.recv_interval_steps,
    )


@dataclass
class Node:
    """An engine, its clock and the times it must wake at (a heap)."""

    name: str
    engine: Any
    clock: VClock
    wakes: list[float] = field(default_factory=list)

    @property
    def wake_s(self) -> float:
        """When it steps next: its earliest wake, but not before its clock (a busy engine)."""
        return max(self.wakes[0], self.clock.t) if self.wakes else math.inf

    def wake(self, t: float) -> None:
        heapq.heappush(self.wakes, max(t, self.clock.t))


def drive(nodes: dict[str, Node], arrivals: list[tuple[float, Callable[[float], None]]]) -> dict[int, list[dict]]:
    """Run the engines until every request is done; returns each request's half-rows."""
    rows: dict[int, list[dict]] = {}
    order = list(nodes)
    i = 0
    while True:
        node = min(nodes.values(), key=lambda n: (n.wake_s, order.index(n.name)))
        next_arrival = arrivals[i][0] if i < len(arrivals) else math.inf
        if next_arrival <= node.wake_s:
            if next_arrival == math.inf:
                break
            arrivals[i][1](next_arrival)
            i += 1
            continue
        node.clock.t = max(node.clock.t, node.wake_s)
        before = node.clock.t
        while node.wakes and node.wakes[0] <= before:
            heapq.heappop(node.wakes)
        for out in node.engine.step():
            if out.finished:
                rows.setdefault(out.request_id, []).append(out.row)
        if node.clock.t > before:  # it ran a forward (or a reload): continue at its end
            node.wake(node.clock.t)
    return rows


def prompt_tokens(workload: Workload, k: int) -> tuple[int, ...]:
    """Request k's token ids: one block of `block_tokens` equal tokens per prefix hash id (equal
    ids, equal tokens: pdreal's page hashes then share exactly what pdsim's hash_ids share), the
    rest counting up."""
    inputs = int(workload.input_tokens[k])
    ids = workload.hash_values[workload.hash_offsets[k]:workload.hash_offsets[k + 1]].tolist()
    if not ids:
        return tuple(range(1, inputs + 1))
    tokens = [int(h) for h in ids for _ in range(workload.block_tokens)][:inputs]
    return tuple(tokens + list(range(len(tokens) + 1, inputs + 1)))


def route(policy: RouterPolicy, req_id: int, inputs: int, outputs: int, t: float, colocated: bool) -> int:
    p = [InstanceView(0, "colocated" if colocated else "prefill")]
    d = [] if colocated else [InstanceView(0, "decode")]
    decision = policy.decide(RequestView(req_id, inputs, outputs, arrival_s=t), p, d, t)
    assert decision.routed
    return decision.bootstrap_room


def run_real(cfg: Config, workload: Workload, data_dir: str = "",
             engines: list[Any] | None = None) -> tuple[pd.DataFrame, DecisionLog]:
    """pdreal's engines on `workload` in virtual time: the merged trace rows and their decisions
    (the engines themselves are appended to `engines` when given)."""
    colocated = cfg.cluster.mode == "colocated"
    latency = build_latency_model(cfg.perf, cfg.model, cfg.hardware, 1, data_dir)
    reload_s = wire_bytes_per_token(cfg.model, 1) / (cfg.hardware.pcie_gbps * 1e9)
    log = DecisionLog()
    nodes: dict[str, Node] = {}
    fabric = Fabric()

    def wake(name: str, t: float) -> None:
        nodes[name].wake(t)

    fabric.wake = wake
    econf = engine_config(cfg)
    if colocated:
        clock = VClock()
        eng = ColocatedEngine(FakeRunner("colocated", latency, econf, clock, reload_s), econf, now_s=clock)
        nodes["colocated"] = Node("colocated", eng, clock)
    else:
        for role, cls, peer in (("prefill", PrefillEngine, "decode"), ("decode", DecodeEngine, "prefill")):
            clock = VClock()
            eng = cls(FakeRunner(role, latency, econf, clock, reload_s), VirtualKV(fabric, clock, peer), econf,
                      now_s=clock)
            nodes[role] = Node(role, eng, clock)
    for node in nodes.values():
        node.engine.decisions = log
    policy = RouterPolicy.create(cfg.policy, cfg.slo, 512, stream(cfg.seed, "router.route"),
                                 stream(cfg.seed, "router.bootstrap_room"))

    def arrival(k: int) -> Callable[[float], None]:
        def add(t: float) -> None:
            inputs, outputs = int(workload.input_tokens[k]), int(workload.output_tokens[k])
            room = route(policy, k, inputs, outputs, t, colocated)
            req = EngineRequest(k, prompt_tokens(workload, k), SamplingParams(max_new_tokens=outputs),
                                bootstrap_room=room, bootstrap_addr="virtual", arrival_s=t)
            for node in nodes.values():
                saved = node.clock.t
                node.clock.t = t  # the request reaches the queue at its arrival time
                node.engine.add_request(req)
                node.clock.t = max(saved, t)
                node.wake(t)
        return add

    arrivals = [(float(workload.arrival_s[k]), arrival(k)) for k in range(len(workload))]
    halves = drive(nodes, arrivals)
    for node in nodes.values():
        node.engine.check_invariants()
    if engines is not None:
        engines.extend(node.engine for node in nodes.values())
    rows = [_merge(h) for _, h in sorted(halves.items())]
    return pd.DataFrame(rows), log


def _merge(halves: list[dict]) -> dict:
    if len(halves) == 1:
        return halves[0]
    prefill = next(h for h in halves if "bootstrap_enter_s" in h)
    decode = next(h for h in halves if h is not prefill)
    return merge_halves(prefill, decode)
