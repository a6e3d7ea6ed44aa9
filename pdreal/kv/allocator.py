"""Page allocator that prefers contiguous runs, and coalescing of page lists into runs.

Pages are integers in [0, num_pages). Free space is kept as a sorted list of disjoint runs
(start, length), merged on free. `allocate(n)` takes the smallest free run that holds all n
pages (best fit keeps large runs whole); when no single run is large enough it takes the
largest runs first, so a request's pages form as few runs as possible. Contiguous pages mean
fewer transfer entries: `coalesce_runs` turns a (src pages, dst pages) pair of lists into runs
that are contiguous on both sides.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass


class OutOfPagesError(RuntimeError):
    """Raised when an allocation asks for more pages than are free."""


@dataclass(frozen=True, slots=True)
class PageRun:
    """`num_pages` pages starting at `src_page` on the source and `dst_page` on the destination."""

    src_page: int
    dst_page: int
    num_pages: int


class PageAllocator:
    """Free-run list over `num_pages` pages; deterministic for a given call sequence."""

    def __init__(self, num_pages: int) -> None:
        if num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {num_pages}")
        self.num_pages = num_pages
        self._starts: list[int] = [0]  # sorted starts of free runs
        self._lengths: list[int] = [num_pages]
        self._num_free = num_pages

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def num_used(self) -> int:
        return self.num_pages - self._num_free

    def can_allocate(self, num_pages: int) -> bool:
        return 0 <= num_pages <= self._num_free

    def allocate(self, num_pages: int) -> list[int]:
        """Return `num_pages` page ids, as few contiguous runs as the free list allows."""
        if num_pages < 0:
            raise ValueError(f"num_pages must be >= 0, got {num_pages}")
        if num_pages > self._num_free:
            raise OutOfPagesError(f"asked for {num_pages} pages, {self._num_free} free")
        pages: list[int] = []
        while len(pages) < num_pages:
            need = num_pages - len(pages)
            index = self._pick_run(need)
            start, length = self._starts[index], self._lengths[index]
            take = min(need, length)
            pages.extend(range(start, start + take))
            if take == length:
                del self._starts[index], self._lengths[index]
            else:
                self._starts[index] = start + take
                self._lengths[index] = length - take
        self._num_free -= num_pages
        return pages

    def _pick_run(self, need: int) -> int:
        """Index of the smallest run holding `need` pages, else of the largest (lowest start on ties)."""
        fits = [(length, i) for i, length in enumerate(self._lengths) if length >= need]
        if fits:
            return min(fits)[1]
        return max(range(len(self._lengths)), key=lambda i: (self._lengths[i], -i))

    def free(self, pages: list[int]) -> None:
        """Return pages to the free list; nothing changes if any page is already free or out of range."""
        runs = _runs(sorted(pages))
        for start, length in runs:
            self._check_used(start, length)
        for start, length in runs:
            self._insert(start, length)
        self._num_free += len(pages)

    def _check_used(self, start: int, length: int) -> None:
        if start < 0 or start + length > self.num_pages:
            raise ValueError(f"pages [{start}, {start + length}) outside [0, {self.num_pages})")
        i = bisect.bisect_right(self._starts, start + length - 1) - 1  # last run starting inside or before
        if i >= 0 and self._starts[i] + self._lengths[i] > start:
            raise ValueError(f"double free of pages in [{start}, {start + length})")

    def _insert(self, start: int, length: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        if i > 0 and self._starts[i - 1] + self._lengths[i - 1] == start:  # merge with the previous run
            i -= 1
            self._lengths[i] += length
        else:
            self._starts.insert(i, start)
            self._lengths.insert(i, length)
        if i + 1 < len(self._starts) and self._starts[i] + self._lengths[i] == self._starts[i + 1]:
            self._lengths[i] += self._lengths[i + 1]
            del self._starts[i + 1], self._lengths[i + 1]

    def free_runs(self) -> list[tuple[int, int]]:
        return list(zip(self._starts, self._lengths, strict=True))

    def check_invariants(self, expected_used: int | None = None) -> None:
        """Runs sorted, disjoint, non-adjacent, in range; counts agree (and match `expected_used`)."""
        total, end = 0, -1
        for start, length in self.free_runs():
            if length <= 0 or start <= end or start + length > self.num_pages:
                raise AssertionError(f"bad free run ({start}, {length}) after end {end}")
            end = start + length
            total += length
        if total != self._num_free:
            raise AssertionError(f"free runs hold {total} pages, counter says {self._num_free}")
        if expected_used is not None and self.num_used != expected_used:
            raise AssertionError(f"{self.num_used} pages in use, expected {expected_used} (leak)")


def _runs(sorted_pages: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for page in sorted_pages:
        if runs and runs[-1][0] + runs[-1][1] == page:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        elif runs and runs[-1][0] + runs[-1][1] > page:
            raise ValueError(f"page {page} listed twice")
        else:
            runs.append((page, 1))
    return runs


def coalesce_runs(src_pages: list[int], dst_pages: list[int]) -> list[PageRun]:
    """Group page i of `src_pages` -> page i of `dst_pages` into runs contiguous on both sides."""
    if len(src_pages) != len(dst_pages):
        raise ValueError(f"{len(src_pages)} source pages but {len(dst_pages)} destination pages")
    runs: list[PageRun] = []
    for src, dst in zip(src_pages, dst_pages, strict=True):
        last = runs[-1] if runs else None
        if last and src == last.src_page + last.num_pages and dst == last.dst_page + last.num_pages:
            runs[-1] = PageRun(last.src_page, last.dst_page, last.num_pages + 1)
        else:
            runs.append(PageRun(src, dst, 1))
    return runs
