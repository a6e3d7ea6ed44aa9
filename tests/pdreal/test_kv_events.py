"""KV events over ZMQ: ordered delivery, replay to a late subscriber, engine block tracking."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import zmq

from pdreal.kv_events import (
    CLEARED,
    REMOVED,
    STORED,
    CacheSummary,
    KVEvent,
    KVEventPublisher,
    KVEventSubscriber,
    RequestBlockTracker,
    block_hash_ids,
)
from pdsim.policy import InstanceView, RequestView, RouterState, RoutingParams, route

_PORTS = itertools.count()


@pytest.fixture
def endpoints(tmp_path):
    n = next(_PORTS)
    return f"ipc://{tmp_path}/pub{n}", f"ipc://{tmp_path}/replay{n}"


@pytest.fixture
def ctx():
    context = zmq.Context()
    yield context
    context.term()


def drain(sub: KVEventSubscriber, until_seq: int) -> None:
    for _ in range(100):
        sub.poll(20)
        if sub.next_seq >= until_seq:
            return
    raise AssertionError(f"stuck at seq {sub.next_seq}, wanted {until_seq}")


def test_late_subscriber_gets_replay_in_order_then_live_events(ctx, endpoints) -> None:
    pub = KVEventPublisher(ctx, 3, *endpoints)
    try:
        pub.publish(STORED, [1, 2, 3])
        pub.publish(REMOVED, [2])
        pub.publish(STORED, [9])
        applied: list[int] = []
        summary = CacheSummary()
        original = summary.apply
        summary.apply = lambda e: (applied.append(e.seq), original(e))  # type: ignore[method-assign]
        sub = KVEventSubscriber(ctx, *endpoints, summary)
        sub.replay()  # late join: everything from seq 0
        assert applied == [0, 1, 2] and summary.cached_blocks(3) == {1, 3, 9}
        time.sleep(0.2)  # let the SUB connection settle (PUB drops for slow joiners)
        pub.publish(CLEARED)
        pub.publish(STORED, [5])
        drain(sub, 5)
        assert applied == [0, 1, 2, 3, 4] and summary.cached_blocks(3) == {5}
        sub.close()
    finally:
        pub.close()


def test_gap_in_live_events_is_filled_by_replay(ctx, endpoints) -> None:
    pub = KVEventPublisher(ctx, 0, *endpoints)
    try:
        sub = KVEventSubscriber(ctx, *endpoints, CacheSummary())
        time.sleep(0.2)
        pub.publish(STORED, [1])
        pub.publish(STORED, [2])
        sub._accept(KVEvent(1, 0, STORED, (2,)))  # seq 1 arrives first (seq 0 lost or late)
        assert sub.next_seq == 0 and not sub.summary.cached_blocks(0)  # held until seq 0
        drain(sub, 2)
        assert sub.summary.cached_blocks(0) == {1, 2}
        sub.close()
    finally:
        pub.close()


def test_tracker_refcounts_shared_blocks(ctx, endpoints) -> None:
    pub = KVEventPublisher(ctx, 1, *endpoints)
    try:
        tracker = RequestBlockTracker(pub, block_tokens=4)
        prompt = list(range(10))  # two full blocks
        a = tracker.stored(prompt)
        b = tracker.stored(prompt[:8] + [99, 98, 97, 96])  # shares both blocks, adds a third
        assert len(a) == 2 and a == b[:2] and len(b) == 3
        tracker.removed(a)  # still held by b: nothing removed
        tracker.removed(b)
        kinds = [(e.kind, e.block_hashes) for e in pub._buffer]
        assert kinds == [(STORED, a), (STORED, b[2:]), (REMOVED, b)]
    finally:
        pub.close()


def test_block_hashes_are_chained_and_feed_cache_aware_routing() -> None:
    x, y = block_hash_ids([1, 2, 3, 4, 5, 6], 3), block_hash_ids([7, 2, 3, 4, 5, 6], 3)
    assert x[0] != y[0] and x[1] != y[1]  # same second block, different prefix
    summary = CacheSummary()
    summary.apply(KVEvent(0, 1, STORED, x))
    views = [InstanceView(i, "prefill", queued_tokens=10, cached_blocks=summary.cached_blocks(i)) for i in (0, 1)]
    state = RouterState(params=RoutingParams(block_tokens=3))
    decision = route("cache_aware", RequestView(0, 7, 1, hash_ids=x), views, [], state, np.random.default_rng(0))
    assert decision.prefill_id == 1


def test_a_publisher_restarted_on_the_same_endpoints_is_followed_again(ctx, endpoints) -> None:
    """Seq numbers restart at 0 with the scheduler; the new epoch tells the subscriber so."""
    old = KVEventPublisher(ctx, 2, *endpoints, epoch=1)
    sub = KVEventSubscriber(ctx, *endpoints, CacheSummary())
    try:
        old.publish(STORED, [1, 2])
        old.publish(STORED, [3])
        sub.replay()
        assert (sub.next_seq, sub.epoch, sub.summary.cached_blocks(2)) == (2, 1, {1, 2, 3})
    finally:
        old.close()
    new = KVEventPublisher(ctx, 2, *endpoints, epoch=2)
    try:
        published = []
        for i in range(50):  # live events until the reconnected SUB sees one (earlier ones drop)
            published.append(10 + i)
            new.publish(STORED, [10 + i])
            sub.poll(50)
            if sub.epoch == 2:
                break
        # the old run's blocks are gone; the new run is replayed from seq 0, dropped events included
        assert (sub.epoch, sub.num_restarts) == (2, 1) and len(published) < 50
        assert sub.summary.cached_blocks(2) == set(published) and sub.next_seq == len(published)
    finally:
        sub.close()
        new.close()


def test_an_epoch_change_seen_in_a_replay_answer_restarts_from_seq_0(ctx, endpoints) -> None:
    new = KVEventPublisher(ctx, 4, *endpoints, epoch=9)
    try:
        for block in (5, 6, 7):
            new.publish(STORED, [block])
        sub = KVEventSubscriber(ctx, *endpoints, CacheSummary())
        sub.epoch, sub.next_seq = 8, 2  # followed an earlier run up to seq 2
        sub.summary.blocks[4] = {1}
        sub.replay()
        assert (sub.epoch, sub.next_seq, sub.summary.cached_blocks(4)) == (9, 3, {5, 6, 7})
        sub.close()
    finally:
        new.close()
