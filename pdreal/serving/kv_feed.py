"""KV events in `pdreal serve`: each prefill instance publishes, the router follows them all.

Instance side (`InstanceEvents`): a prefill instance with `node.kv_events` on binds a
`KVEventPublisher` (PUB + replay ROUTER on `node.kv_events_port`, or any free ports), names its
run by an epoch (the start time in ns, so a scheduler restarted on the same ports is told apart),
hands the engine a `RequestBlockTracker` (the prefix cache's stored/removed blocks; without a
cache, a request's blocks stored at the end of its prefill and removed when its KV is released)
and advertises both endpoints in /stats as `engine.kv_events = {"pub": ..., "replay": ...}`.

Router side (`KVEventFollower`): for every prefill upstream whose /stats advertises endpoints it
keeps one `KVEventSubscriber` (its own `CacheSummary`; a new one when the endpoints change, e.g.
after a restart on free ports), which asks for replay from seq 0 on joining and when the epoch
changes (a restart on fixed ports). `poll` runs on a worker thread (never on the router's event
loop): it waits up to `wait_ms` for live events, applies them in order (replaying gaps) and
returns each instance's cached blocks as frozensets, which the router swaps in as its
`kv_summary` (InstanceView.cached_blocks for cache_aware / kv_centric).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import zmq

from pdreal.kv_events import CacheSummary, KVEventPublisher, KVEventSubscriber, RequestBlockTracker

log = logging.getLogger(__name__)
REPLAY_TIMEOUT_MS = 1000


def _advertised(endpoint: str, public_host: str) -> str:
    """`tcp://0.0.0.0:5555` as peers reach it: `tcp://<public_host>:5555`."""
    scheme, _, rest = endpoint.partition("://")
    if scheme != "tcp":
        return endpoint
    return f"tcp://{public_host}:{rest.rpartition(':')[2]}"


@dataclass
class InstanceEvents:
    """A prefill instance's publisher, its context and the tracker the engine calls."""

    ctx: zmq.Context
    publisher: KVEventPublisher
    tracker: RequestBlockTracker
    endpoints: dict[str, str]

    @classmethod
    def start(cls, instance_id: int, host: str, public_host: str, port: int, block_tokens: int) -> InstanceEvents:
        ctx = zmq.Context()
        pub, replay = (f"tcp://{host}:{port}", f"tcp://{host}:{port + 1}") if port else (
            f"tcp://{host}:*", f"tcp://{host}:*")
        try:
            publisher = KVEventPublisher(ctx, instance_id, pub, replay, epoch=time.time_ns())
        except zmq.ZMQError as exc:
            ctx.term()
            raise RuntimeError(f"node.kv_events_port={port}: cannot bind KV event sockets on {host}: {exc}") from exc
        bound = publisher.endpoints()
        endpoints = {"pub": _advertised(bound[0], public_host), "replay": _advertised(bound[1], public_host)}
        log.info("kv events of prefill %d: %s", instance_id, endpoints)
        return cls(ctx, publisher, RequestBlockTracker(publisher, block_tokens), endpoints)

    def close(self) -> None:
        self.publisher.close()
        self.ctx.term()


@dataclass
class _Follow:
    endpoints: tuple[str, str]
    subscriber: KVEventSubscriber
    summary: CacheSummary


@dataclass
class FollowerCounts:
    """Per prefill instance index: events applied, replays asked, blocks held, summary partial."""

    events: dict[int, int] = field(default_factory=dict)
    replays: dict[int, int] = field(default_factory=dict)
    blocks: dict[int, int] = field(default_factory=dict)
    partial: dict[int, bool] = field(default_factory=dict)


class KVEventFollower:
    """The router's subscribers, one per prefill instance index; used from one thread at a time."""

    def __init__(self) -> None:
        self._ctx = zmq.Context()
        self._follows: dict[int, _Follow] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.counts = FollowerCounts()
        self._retired: dict[int, tuple[int, int]] = {}  # events, replays of replaced subscribers

    def poll(self, endpoints: dict[int, tuple[str, str]], wait_ms: int = 50) -> dict[int, frozenset[int]]:
        """Follow `endpoints` (index -> (pub, replay)); apply what arrives within `wait_ms`;
        return the cached blocks of every followed instance."""
        with self._lock:
            if self._closed:
                return {}
            for index, pair in sorted(endpoints.items()):
                self._ensure(index, pair)
            poller = zmq.Poller()
            for follow in self._follows.values():
                poller.register(follow.subscriber.live_socket, zmq.POLLIN)
            if self._follows:
                poller.poll(wait_ms)
            for index in sorted(self._follows):
                self._drain(index)
            return self._snapshot()

    def _ensure(self, index: int, pair: tuple[str, str]) -> None:
        follow = self._follows.get(index)
        if follow is not None and follow.endpoints == pair:
            return
        if follow is not None:
            log.info("kv events of prefill %d moved to %s: following afresh", index, pair)
            self._drop(index)
        summary = CacheSummary()
        subscriber = KVEventSubscriber(self._ctx, pair[0], pair[1], summary)
        self._follows[index] = _Follow(pair, subscriber, summary)
        try:
            subscriber.replay(REPLAY_TIMEOUT_MS)
        except TimeoutError as exc:
            log.warning("kv events of prefill %d: %s; retrying later", index, exc)
            self._drop(index)

    def _drain(self, index: int) -> None:
        follow = self._follows[index]
        try:
            follow.subscriber.poll(0)
        except TimeoutError as exc:  # the REQ socket is stuck: start over on the next poll
            log.warning("kv events of prefill %d: %s; resubscribing", index, exc)
            self._drop(index)

    def _drop(self, index: int) -> None:
        follow = self._follows.pop(index)
        events, replays = self._retired.get(index, (0, 0))
        self._retired[index] = (events + follow.subscriber.num_events, replays + follow.subscriber.num_replays)
        follow.subscriber.close()

    def _snapshot(self) -> dict[int, frozenset[int]]:
        out, counts = {}, FollowerCounts()
        for index in sorted(set(self._follows) | set(self._retired)):
            events, replays = self._retired.get(index, (0, 0))
            follow = self._follows.get(index)
            blocks: frozenset[int] = frozenset()
            if follow is not None:
                blocks = frozenset().union(*follow.summary.blocks.values())
                events, replays = events + follow.subscriber.num_events, replays + follow.subscriber.num_replays
                counts.partial[index] = follow.subscriber.partial
                out[index] = blocks
            counts.events[index], counts.replays[index], counts.blocks[index] = events, replays, len(blocks)
        self.counts = counts
        return out

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for index in list(self._follows):
                self._drop(index)
            self._ctx.term()


def advertised_endpoints(upstreams: list[Any]) -> dict[int, tuple[str, str]]:
    """index -> (pub, replay) of the healthy prefill upstreams that advertise KV events."""
    out = {}
    for u in upstreams:
        ends = u.stats.get("engine", {}).get("kv_events") if u.healthy else None
        if ends:
            out[u.index] = (str(ends["pub"]), str(ends["replay"]))
    return out
