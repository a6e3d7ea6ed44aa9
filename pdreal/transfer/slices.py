"""KV head slices between tensor-parallel ranks of different TP sizes (seed 003's heterogeneous
parallelism; SGLang's M:N KV slice transfer).

A TP rank's KV pool holds a contiguous range of the model's KV heads (pdreal/model/tp.py:
`head_range`). Decode rank d of an instance with TP = n needs the heads of its range from every
prefill rank of TP = m whose range overlaps it: one prefill rank when m == n (whole pages, the
ordinary transfer), several when m > n (N:1 gather), and a part of one when m < n (1:N split).
Decode rank d asks each of them (`source_ranks`) and each writes the overlap (`overlap`) into
d's pages at d's head offset. Whole-page runs stay one entry per (layer, K/V) plane; a head slice
is one entry per token and plane (the heads of one token are contiguous, a page's tokens are not).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdreal.kv.allocator import PageRun
from pdreal.kv.pool import KVLayout
from pdreal.model.tp import head_range as rank_heads


@dataclass(frozen=True, slots=True)
class HeadSlice:
    """KV heads [src_head, src_head + num_heads) of the source pool go to
    [dst_head, dst_head + num_heads) of the destination pool (pool-local head indices)."""

    src_head: int
    dst_head: int
    num_heads: int


def overlap(total_heads: int, src_rank: int, src_size: int, dst_rank: int, dst_size: int) -> HeadSlice | None:
    """The heads source rank `src_rank` (of TP `src_size`) owes destination rank `dst_rank` (of TP
    `dst_size`), in pool-local indices; None when their ranges do not overlap."""
    s0, s1 = rank_heads(total_heads, src_rank, src_size)
    d0, d1 = rank_heads(total_heads, dst_rank, dst_size)
    lo, hi = max(s0, d0), min(s1, d1)
    return HeadSlice(lo - s0, lo - d0, hi - lo) if lo < hi else None


def source_ranks(total_heads: int, dst_rank: int, dst_size: int, src_size: int) -> list[int]:
    """The source ranks whose heads destination rank `dst_rank` needs, in rank order."""
    return [r for r in range(src_size) if overlap(total_heads, r, src_size, dst_rank, dst_size)]


def dest_count(total_heads: int, src_rank: int, src_size: int, dst_size: int) -> int:
    """How many destination ranks need heads from source rank `src_rank`."""
    return sum(overlap(total_heads, src_rank, src_size, d, dst_size) is not None for d in range(dst_size))


def slice_compatible(src: KVLayout, src_tp: int, dst: KVLayout, dst_tp: int) -> str:
    """Empty when pages can move between the two pools as head slices, else the reason."""
    for name in ("num_layers", "page_size_tokens", "head_dim", "dtype_bytes"):
        if getattr(src, name) != getattr(dst, name):
            return f"KV layout mismatch: {name} {getattr(src, name)} != {getattr(dst, name)}"
    if src.num_kv_heads * src_tp != dst.num_kv_heads * dst_tp:
        return (f"KV layout mismatch: {src.num_kv_heads} heads x TP {src_tp} != "
                f"{dst.num_kv_heads} heads x TP {dst_tp}")
    return ""


def slice_entries(runs: list[PageRun], src: KVLayout, src_base: int, dst: KVLayout, dst_base: int,
                  heads: HeadSlice) -> tuple[list[int], list[int], list[int]]:
    """(src_ptrs, dst_ptrs, lengths_bytes) moving `heads` of every token of `runs`, all layers' K
    and V planes (the pool layout is [layers, 2, pages, page_size, kv_heads, head_dim])."""
    head_bytes = src.head_dim * src.dtype_bytes
    src_token, dst_token = src.num_kv_heads * head_bytes, dst.num_kv_heads * head_bytes
    length = heads.num_heads * head_bytes
    src_ptrs: list[int] = []
    dst_ptrs: list[int] = []
    for layer in range(src.num_layers):
        for kv in (0, 1):
            for run in runs:
                s = src_base + src.page_offset_bytes(layer, kv, run.src_page) + heads.src_head * head_bytes
                d = dst_base + dst.page_offset_bytes(layer, kv, run.dst_page) + heads.dst_head * head_bytes
                for token in range(run.num_pages * src.page_size_tokens):
                    src_ptrs.append(s + token * src_token)
                    dst_ptrs.append(d + token * dst_token)
    return src_ptrs, dst_ptrs, [length] * len(src_ptrs)
