"""Page growth of a decode batch over its next iterations, in O(1) per lookup (span.py)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from librt.vecs import vec
from mypy_extensions import i64


@dataclass(init=False, slots=True, eq=False)
class PageGrowth:
    """Pages a batch of `n` requests grows over its next iterations.

    A request whose KV length at iteration 0 is r modulo the page size grows one page at the
    start of iteration i when its length then, r + i, is a page multiple: floor((j + r) / page)
    times in iterations 1..j. Summed over the batch that is q * n + #{r >= page - s} with
    j = q * page + s, an O(1) lookup in `at_least` (at_least[x] = requests with r >= x; an
    unboxed array: a span's limit builds one, ~1.2 spans a request, and reads it natively).
    """

    n: Final[int]
    page: Final[int]
    at_least: Final[vec[i64]]

    def __init__(self, n: int, page: int, at_least: vec[i64]) -> None:
        self.n = n
        self.page = page
        self.at_least = at_least

    @classmethod
    def of(cls, kv_tokens: Iterable[int], page: int) -> PageGrowth:
        counts = vec[i64]([0] * (page + 1))
        for kv in kv_tokens:
            counts[kv % page] += 1
        return cls.from_residues(counts, page)

    @classmethod
    def from_residues(cls, counts: vec[i64], page: int) -> PageGrowth:
        """From counts[r] = requests whose KV length is r modulo page (page + 1 entries, the
        last 0); `counts` is summed in place (suffix sums: counts[0] is then n) and kept."""
        total: i64 = 0  # (PageGrowth by name: compiled, no generic call)
        x: i64 = page
        while x >= 0:
            total += counts[x]
            counts[x] = total
            x -= 1
        return PageGrowth(total, page, counts)

    def pages(self, j: int) -> int:
        """Pages grown at the boundaries 1..j."""
        if j <= 0:
            return 0
        page = self.page  # (// and %, not divmod: compiled, no tuple)
        return (j // page) * self.n + self.at_least[page - j % page]

    def first_over(self, free_pages: int, k: int) -> int:
        """The first boundary j in 1..k-1 whose growth exceeds free_pages (k if none)."""
        lo, hi = 1, k  # pages() is non-decreasing: bisect for the first j with pages(j) > free
        while lo < hi:
            mid = (lo + hi) // 2
            if self.pages(mid) > free_pages:
                hi = mid
            else:
                lo = mid + 1
        return lo
