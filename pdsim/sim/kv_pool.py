"""Paged KV pool of one instance: exact page accounting per owner.

Owners are request ids (>= 0) and CACHE_OWNER for prefix-cache blocks. Pages are counted, not
indexed: the simulator needs occupancy, not addresses. `check_invariants` verifies that free plus
held pages equal the capacity and, at the end of a run, that no request still holds pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from mypy_extensions import mypyc_attr

CACHE_OWNER: Final = -1


@mypyc_attr(native_class=False)
class KVPoolError(RuntimeError):
    """An allocation or free that breaks the pool's accounting."""


@dataclass
class KVPool:
    name: str
    capacity_pages: int
    page_size_tokens: int
    free_pages: int = field(init=False)
    # owner -> pages (keyed by object: an owner id is made a Python int once per call, not per use)
    held: dict[object, int] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        if self.capacity_pages < 1:
            raise ValueError(f"{self.name}: KV capacity must be >= 1 page, got {self.capacity_pages}")
        if self.page_size_tokens < 1:
            raise ValueError(f"{self.name}: page_size_tokens must be >= 1, got {self.page_size_tokens}")
        self.free_pages = self.capacity_pages

    @property
    def capacity_tokens(self) -> int:
        return self.capacity_pages * self.page_size_tokens

    @property
    def used_pages(self) -> int:
        return self.capacity_pages - self.free_pages

    def pages_of(self, owner: int) -> int:
        return self.held.get(owner, 0)

    def can_allocate(self, pages: int) -> bool:
        return pages <= self.free_pages

    def allocate(self, owner: int, pages: int) -> None:
        if pages < 0:
            raise KVPoolError(f"{self.name}: owner {owner} asked for {pages} pages")
        if pages > self.free_pages:
            raise KVPoolError(f"{self.name}: owner {owner} asked for {pages} pages, {self.free_pages} free")
        if pages:
            self.free_pages -= pages
            key: object = owner
            held = self.held
            held[key] = held.get(key, 0) + pages

    def free(self, owner: int, pages: int | None = None) -> int:
        """Free `pages` of `owner` (all when None); returns the pages freed."""
        key: object = owner
        held = self.held
        have = held.get(key, 0)
        n = have if pages is None else pages
        if n < 0 or n > have:
            raise KVPoolError(f"{self.name}: owner {owner} frees {n} pages but holds {have}")
        if n == have:
            held.pop(key, None)
        else:
            held[key] = have - n
        self.free_pages += n
        return n

    def move(self, src: int, dst: int, pages: int) -> None:
        """Hand `pages` from one owner to another (a request's blocks joining the prefix cache)."""
        self.free(src, pages)
        self.allocate(dst, pages)

    def check_invariants(self, final: bool = False) -> None:
        held = sum(self.held.values())
        if held + self.free_pages != self.capacity_pages or self.free_pages < 0:
            raise KVPoolError(
                f"{self.name}: held {held} + free {self.free_pages} != capacity {self.capacity_pages}"
            )
        if final:
            leaked = sorted(o for o in self.held if isinstance(o, int) and o != CACHE_OWNER)
            if leaked:
                raise KVPoolError(f"{self.name}: requests {leaked[:10]} still hold KV pages at the end")
