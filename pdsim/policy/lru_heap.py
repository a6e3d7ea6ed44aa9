"""The prefix cache's LRU order: a min-heap of (last use, creation number, slot) entries.

heapq over tuples compares two entries through Python's rich comparison of tuples, one item at a
time (~300 instructions a comparison), and builds a tuple and a float per entry; eviction pops
about two entries per request-sized block run. This heap keeps its entries in three unboxed
arrays (librt vecs, as the cache's own) and compares their fields natively. It pops entries in
exactly heapq's order: the smallest (last use, creation number, slot) first, and entries equal in
all three are the same block's, indistinguishable.
"""

from __future__ import annotations

from librt.vecs import append, vec
from mypy_extensions import i64


class LruHeap:
    """Min-heap of (time_s, number, slot); `top_*` read the smallest entry, `pop` removes it."""

    def __init__(self) -> None:
        self._time_s: vec[float] = vec[float]()
        self._number: vec[i64] = vec[i64]()
        self._slot: vec[i64] = vec[i64]()
        self.size: i64 = 0

    def __len__(self) -> int:
        return self.size

    def top_time_s(self) -> float:
        return self._time_s[0]

    def top_number(self) -> i64:
        return self._number[0]

    def top_slot(self) -> i64:
        return self._slot[0]

    def before_top(self, time_s: float, number: i64, slot: i64) -> bool:
        """(time_s, number, slot) sorts before the smallest entry (the heap is not empty)."""
        return _less(time_s, number, slot, self._time_s[0], self._number[0], self._slot[0])

    def push(self, time_s: float, number: i64, slot: i64) -> None:
        i = self.size
        if i == len(self._slot):  # (grow the arrays; afterwards the freed tail is reused)
            self._time_s = append(self._time_s, 0.0)
            self._number = append(self._number, 0)
            self._slot = append(self._slot, 0)
        self.size = i + 1
        times, numbers, slots = self._time_s, self._number, self._slot
        while i > 0:  # sift up
            parent = (i - 1) >> 1
            if not _less(time_s, number, slot, times[parent], numbers[parent], slots[parent]):
                break
            times[i], numbers[i], slots[i] = times[parent], numbers[parent], slots[parent]
            i = parent
        times[i], numbers[i], slots[i] = time_s, number, slot

    def pop(self) -> None:
        """Remove the smallest entry (the heap is not empty)."""
        n = self.size - 1
        self.size = n
        if n == 0:
            return
        times, numbers, slots = self._time_s, self._number, self._slot
        time_s, number, slot = times[n], numbers[n], slots[n]  # the last entry, sifted down from the root
        i: i64 = 0
        child: i64 = 1
        while child < n:
            right = child + 1
            if right < n and _less(times[right], numbers[right], slots[right], times[child], numbers[child], slots[child]):
                child = right
            if not _less(times[child], numbers[child], slots[child], time_s, number, slot):
                break
            times[i], numbers[i], slots[i] = times[child], numbers[child], slots[child]
            i = child
            child = 2 * i + 1
        times[i], numbers[i], slots[i] = time_s, number, slot


def _less(a_s: float, a_number: i64, a_slot: i64, b_s: float, b_number: i64, b_slot: i64) -> bool:
    """(a_s, a_number, a_slot) < (b_s, b_number, b_slot), as tuples compare."""
    if a_s != b_s:
        return a_s < b_s
    if a_number != b_number:
        return a_number < b_number
    return a_slot < b_slot
