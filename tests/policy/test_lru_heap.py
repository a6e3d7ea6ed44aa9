"""pdsim.policy.lru_heap: pops in heapq's order over (time, number, slot) tuples."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from pdsim.policy.lru_heap import LruHeap


def _drain_some(heap: LruHeap, reference: list[tuple[float, int, int]], count: int) -> list[tuple[float, int, int]]:
    popped = []
    for _ in range(min(count, len(reference))):
        got = (heap.top_time_s(), heap.top_number(), heap.top_slot())
        heap.pop()
        popped.append(got)
        assert got == heapq.heappop(reference)
    return popped


@pytest.mark.parametrize("seed", range(4))
def test_random_pushes_and_pops_come_out_as_from_heapq(seed: int) -> None:
    rng = np.random.default_rng(seed)
    heap, reference = LruHeap(), []
    for _ in range(300):
        for _ in range(int(rng.integers(0, 6))):  # many ties in time, some in number: the slot decides
            entry = (float(rng.integers(0, 8)) * 0.25, int(rng.integers(0, 5)), int(rng.integers(0, 50)))
            heap.push(*entry)
            heapq.heappush(reference, entry)
            probe = (float(rng.integers(0, 8)) * 0.25, int(rng.integers(0, 5)), int(rng.integers(0, 50)))
            assert heap.before_top(*probe) == (probe < reference[0])
        _drain_some(heap, reference, int(rng.integers(0, 5)))
        assert len(heap) == len(reference)
    _drain_some(heap, reference, len(reference))
    assert len(heap) == 0


def test_a_hand_made_order() -> None:
    heap = LruHeap()
    for entry in [(2.0, 1, 7), (1.0, 9, 3), (1.0, 2, 8), (1.0, 2, 4), (0.5, 30, 1)]:
        heap.push(*entry)
    assert _drain_some(heap, sorted([(2.0, 1, 7), (1.0, 9, 3), (1.0, 2, 8), (1.0, 2, 4), (0.5, 30, 1)]), 5) == [
        (0.5, 30, 1), (1.0, 2, 4), (1.0, 2, 8), (1.0, 9, 3), (2.0, 1, 7)]
