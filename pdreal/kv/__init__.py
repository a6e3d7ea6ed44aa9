"""Paged KV memory: the page allocator (pure Python) and the pool buffer (torch)."""

from pdreal.kv.allocator import (
    OutOfPagesError,
    PageAllocator,
    PageRun,
    coalesce_runs,
)

__all__ = ["OutOfPagesError", "PageAllocator", "PageRun", "coalesce_runs"]
