"""KV events: prefill instances tell routers which prompt blocks they hold (seed 001 §13).

Each prefill instance owns a `KVEventPublisher`: every event (`stored`, `removed`, `cleared`,
with block hashes) gets the next sequence number (0, 1, ...) and the publisher's `epoch` (one
value per run: a restarted instance starts again at seq 0 under a new epoch), goes out on a ZMQ
PUB socket as [topic, json] and into a bounded replay buffer. PUB drops what a subscriber missed (slow joiner,
reconnect), so a ROUTER socket answers replay requests `{"from_seq": N}` with the buffered events
seq >= N, in order (`{"events": [...], "oldest_seq": K}`; K > N means the buffer lost some and
the subscriber should treat its summary as partial).

A `KVEventSubscriber` (one per router and instance) applies events to a `CacheSummary` strictly
in sequence order: live events after a gap wait until a replay fills it; a late subscriber asks
for replay from 0 first. An event of another epoch than the one followed means the instance
restarted (on the same endpoints): the summary is emptied and followed again from seq 0 of the new
run. The summary's `cached_blocks(instance_id)` is what pdsim's cache-aware
policy reads from `InstanceView.cached_blocks`, so real routing sees the simulator's summary.

`RequestBlockTracker` is what an engine publishes through. With the prefix cache on
(pdreal/kv/radix.py) it forwards the cache's own changes: blocks `stored` when they join the cache,
`removed` when evicted, so the router's summary is the cache. With it off, a request's full blocks
are stored when its prefill completes and removed when its KV is released (reference counted over
concurrent requests sharing blocks). Block hashes are chained (`block_hash_ids`, one per KV page):
equal hashes mean equal prefixes, as in the Mooncake trace.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import zmq

from pdreal.kv.radix import block_hash_ids

log = logging.getLogger(__name__)
STORED, REMOVED, CLEARED = "stored", "removed", "cleared"
TOPIC = b"kv"


@dataclass(frozen=True, slots=True)
class KVEvent:
    seq: int
    instance_id: int
    kind: str
    block_hashes: tuple[int, ...] = ()
    epoch: int = 0

    @classmethod
    def from_dict(cls, raw: dict) -> KVEvent:
        return cls(raw["seq"], raw["instance_id"], raw["kind"], tuple(raw["block_hashes"]), int(raw.get("epoch", 0)))



class KVEventPublisher:
    """PUB socket for live events plus a ROUTER socket (served by a thread) for replays."""

    def __init__(self, ctx: zmq.Context, instance_id: int, pub_endpoint: str, replay_endpoint: str,
                 buffer_events: int = 10_000, epoch: int = 0) -> None:
        self.instance_id = instance_id
        self.epoch = epoch
        self._pub = ctx.socket(zmq.PUB)
        self._pub.bind(pub_endpoint)
        self._replay = ctx.socket(zmq.ROUTER)
        self._replay.bind(replay_endpoint)
        self._buffer: deque[KVEvent] = deque(maxlen=buffer_events)
        self._lock = threading.Lock()
        self._next_seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"kv-replay-{instance_id}", daemon=True)
        self._thread.start()

    def endpoints(self) -> tuple[str, str]:
        """The bound (pub, replay) endpoints; a `tcp://host:*` bind names the port it got."""
        last = zmq.LAST_ENDPOINT
        return self._pub.getsockopt(last).decode(), self._replay.getsockopt(last).decode()

    def publish(self, kind: str, block_hashes: Sequence[int] = ()) -> KVEvent:
        with self._lock:
            event = KVEvent(self._next_seq, self.instance_id, kind, tuple(block_hashes), self.epoch)
            self._next_seq += 1
            self._buffer.append(event)
        self._pub.send_multipart([TOPIC, json.dumps(asdict(event)).encode()])
        return event

    def _serve(self) -> None:
        while not self._stop.is_set():
            if not self._replay.poll(50):
                continue
            ident, _, body = self._replay.recv_multipart()
            from_seq = int(json.loads(body)["from_seq"])
            with self._lock:
                events = [asdict(e) for e in self._buffer if e.seq >= from_seq]
                oldest = self._buffer[0].seq if self._buffer else self._next_seq
            reply = {"events": events, "oldest_seq": oldest, "epoch": self.epoch}
            self._replay.send_multipart([ident, b"", json.dumps(reply).encode()])

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._pub.close(linger=0)
        self._replay.close(linger=0)


@dataclass
class CacheSummary:
    """Block hashes each instance holds, as learnt from its events (or a snapshot of frozensets,
    as the router's follower hands them over: an event then applies to a copy)."""

    blocks: dict[int, set[int] | frozenset[int]] = field(default_factory=dict)

    def apply(self, event: KVEvent) -> None:
        held = self.blocks.get(event.instance_id)
        if not isinstance(held, set):
            held = self.blocks[event.instance_id] = set(held or ())
        if event.kind == STORED:
            held.update(event.block_hashes)
        elif event.kind == REMOVED:
            held.difference_update(event.block_hashes)
        elif event.kind == CLEARED:
            held.clear()
        else:
            raise ValueError(f"kv event {event.seq}: unknown kind {event.kind!r}")

    def cached_blocks(self, instance_id: int) -> frozenset[int]:
        return frozenset(self.blocks.get(instance_id, ()))


class KVEventSubscriber:
    """Follows one publisher: live events in order, replay for gaps and late joins."""

    def __init__(self, ctx: zmq.Context, pub_endpoint: str, replay_endpoint: str, summary: CacheSummary) -> None:
        self.summary = summary
        self.next_seq = 0
        self.epoch: int | None = None  # the publisher's run being followed (None: not known yet)
        self.num_restarts = 0  # epoch changes seen (the instance restarted)
        self.partial = False  # the publisher's buffer no longer held events we needed
        self._sub = ctx.socket(zmq.SUB)
        self._sub.setsockopt(zmq.SUBSCRIBE, TOPIC)
        self._sub.connect(pub_endpoint)
        self._req = ctx.socket(zmq.REQ)
        self._req.connect(replay_endpoint)
        self._pending: dict[int, KVEvent] = {}
        self.num_events = 0  # events applied to the summary
        self.num_replays = 0  # replay requests sent (late join, gaps)

    @property
    def live_socket(self) -> zmq.Socket:
        """The SUB socket (for a zmq.Poller waiting on several subscribers)."""
        return self._sub

    def replay(self, timeout_ms: int = 2000) -> None:
        """Fetch and apply every buffered event from `next_seq` on."""
        self.num_replays += 1
        self._req.send(json.dumps({"from_seq": self.next_seq}).encode())
        if not self._req.poll(timeout_ms):
            raise TimeoutError(f"kv events: no replay answer within {timeout_ms} ms")
        reply = json.loads(self._req.recv())
        epoch = int(reply.get("epoch", 0))
        if self.epoch is not None and epoch != self.epoch:  # restarted since: this reply is its new run
            self._restart(epoch)
            self._req.send(json.dumps({"from_seq": 0}).encode())
            if not self._req.poll(timeout_ms):
                raise TimeoutError(f"kv events: no replay answer within {timeout_ms} ms")
            reply = json.loads(self._req.recv())
        self.epoch = int(reply.get("epoch", 0))
        if reply["oldest_seq"] > self.next_seq:
            log.warning("kv events: events %d..%d lost", self.next_seq, reply["oldest_seq"] - 1)
            self.partial, self.next_seq = True, reply["oldest_seq"]
        for raw in reply["events"]:
            self._accept(KVEvent.from_dict(raw))

    def poll(self, timeout_ms: int = 0) -> int:
        """Apply live events received so far (replaying a gap when one shows); returns how many
        events were applied."""
        before = self.next_seq
        while self._sub.poll(timeout_ms):
            _, body = self._sub.recv_multipart()
            self._accept(KVEvent.from_dict(json.loads(body)))
            timeout_ms = 0
        if self._pending:
            self.replay()
        return self.next_seq - before

    def _restart(self, epoch: int) -> None:
        """The publisher restarted (a new epoch): forget its old run and follow the new from 0."""
        log.info("kv events: publisher restarted (epoch %s -> %s); following afresh", self.epoch, epoch)
        self.summary.blocks.clear()
        self.epoch, self.next_seq, self.partial = epoch, 0, False
        self._pending.clear()
        self.num_restarts += 1

    def _accept(self, event: KVEvent) -> None:
        if self.epoch is None:
            self.epoch = event.epoch
        elif event.epoch != self.epoch:
            self._restart(event.epoch)  # poll() then replays the new run from seq 0
        if event.seq < self.next_seq:
            return  # already applied (replay overlapping live events)
        self._pending[event.seq] = event
        while self.next_seq in self._pending:
            self.summary.apply(self._pending.pop(self.next_seq))
            self.next_seq += 1
            self.num_events += 1

    def close(self) -> None:
        self._sub.close(linger=0)
        self._req.close(linger=0)


class RequestBlockTracker:
    """Publishes stored/removed events: the prefix cache's changes (`cache_stored`,
    `cache_removed`), or without a cache the full blocks of live requests' KV (ref-counted)."""

    def __init__(self, publisher: KVEventPublisher, block_tokens: int) -> None:
        self.publisher = publisher
        self.block_tokens = block_tokens
        self.refs: dict[int, int] = {}

    def stored(self, token_ids: Sequence[int]) -> tuple[int, ...]:
        hashes = block_hash_ids(token_ids, self.block_tokens)
        new = [h for h in hashes if self.refs.get(h, 0) == 0]
        for h in hashes:
            self.refs[h] = self.refs.get(h, 0) + 1
        if new:
            self.publisher.publish(STORED, new)
        return hashes

    def removed(self, hashes: Sequence[int]) -> None:
        gone = []
        for h in hashes:
            self.refs[h] -= 1
            if self.refs[h] == 0:
                del self.refs[h]
                gone.append(h)
        if gone:
            self.publisher.publish(REMOVED, gone)

    def cache_stored(self, block_hashes: Sequence[int]) -> None:
        self.publisher.publish(STORED, block_hashes)

    def cache_removed(self, block_hashes: Sequence[int]) -> None:
        self.publisher.publish(REMOVED, block_hashes)
