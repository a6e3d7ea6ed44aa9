"""Page allocator (contiguous runs preferred), coalescing into transfer entries."""

from __future__ import annotations

import numpy as np
import pytest

from pdreal.kv.allocator import (
    OutOfPagesError,
    PageAllocator,
    PageRun,
    coalesce_runs,
)
from pdsim.policy.views import pages_for


def test_allocate_prefers_one_contiguous_run() -> None:
    alloc = PageAllocator(16)
    a, b, c = alloc.allocate(4), alloc.allocate(2), alloc.allocate(3)
    assert (a, b, c) == ([0, 1, 2, 3], [4, 5], [6, 7, 8])
    alloc.free(b)  # holes: [4, 6) and [9, 16)
    assert alloc.allocate(2) == [4, 5]  # best fit takes the small hole, keeps the big run whole
    alloc.free(a)
    assert alloc.allocate(6) == [9, 10, 11, 12, 13, 14]
    assert alloc.allocate(5) == [0, 1, 2, 3, 15]  # no run fits: largest runs first
    alloc.check_invariants(expected_used=16)


def test_free_merges_neighbours_and_rejects_double_free() -> None:
    alloc = PageAllocator(8)
    pages = alloc.allocate(8)
    alloc.free(pages[2:4])
    alloc.free(pages[6:])
    alloc.free(pages[4:6])
    assert alloc.free_runs() == [(2, 6)]
    with pytest.raises(ValueError, match="double free"):
        alloc.free([3])
    with pytest.raises(ValueError, match="outside"):
        alloc.free([8])
    with pytest.raises(ValueError, match="double free"):
        alloc.free([0, 7])  # page 0 is in use, page 7 is free: nothing may change
    with pytest.raises(OutOfPagesError, match="asked for 7 pages, 6 free"):
        alloc.allocate(7)
    alloc.check_invariants(expected_used=2)


def test_random_alloc_free_never_loses_a_page() -> None:
    rng = np.random.default_rng(0)
    alloc, held = PageAllocator(64), []
    for _ in range(500):
        if held and (rng.random() < 0.45 or not alloc.can_allocate(8)):
            alloc.free(held.pop(int(rng.integers(len(held)))))
        else:
            held.append(alloc.allocate(int(rng.integers(1, 9))))
        alloc.check_invariants(expected_used=sum(map(len, held)))
    assert len({p for pages in held for p in pages}) == alloc.num_used


def test_leak_is_reported() -> None:
    alloc = PageAllocator(4)
    alloc.allocate(1)
    with pytest.raises(AssertionError, match="leak"):
        alloc.check_invariants(expected_used=0)


def test_coalesce_runs_needs_contiguity_on_both_sides() -> None:
    assert coalesce_runs([3, 4, 5, 9, 10], [0, 1, 2, 3, 7]) == [PageRun(3, 0, 3), PageRun(9, 3, 1), PageRun(10, 7, 1)]
    assert coalesce_runs([], []) == []
    with pytest.raises(ValueError, match="2 source pages but 1"):
        coalesce_runs([1, 2], [1])
    assert pages_for(0, 16) == 0 and pages_for(17, 16) == 2
