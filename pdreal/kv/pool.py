"""The paged KV pool: one buffer per instance, registered once with the transfer engine.

Layout `[num_layers, 2, num_pages, page_size_tokens, num_kv_heads, head_dim]` (2 = K, V).
For a fixed (layer, K/V) "plane" the pages are contiguous, so a run of n contiguous pages is one
contiguous byte range per plane: a transfer of one run is `2 * num_layers` entries.
`slot = page * page_size_tokens + offset` addresses one token's K/V within a plane.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pdreal.kv.allocator import PageAllocator, PageRun


@dataclass(frozen=True, slots=True)
class KVLayout:
    """Byte geometry of a pool, exchanged with peers so they can address its pages."""

    num_layers: int
    num_pages: int
    page_size_tokens: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int

    @property
    def page_bytes(self) -> int:
        """Bytes of one page in one (layer, K/V) plane."""
        return self.page_size_tokens * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def plane_bytes(self) -> int:
        return self.num_pages * self.page_bytes

    @property
    def total_bytes(self) -> int:
        return 2 * self.num_layers * self.plane_bytes

    def page_offset_bytes(self, layer: int, kv: int, page: int) -> int:
        return ((layer * 2 + kv) * self.num_pages + page) * self.page_bytes

    def compatible_with(self, other: KVLayout) -> str:
        """Empty string when pages can be copied between the two pools, else the reason."""
        for name in ("num_layers", "page_size_tokens", "num_kv_heads", "head_dim", "dtype_bytes"):
            if getattr(self, name) != getattr(other, name):
                return f"KV layout mismatch: {name} {getattr(self, name)} != {getattr(other, name)}"
        return ""


def transfer_entries(
    runs: list[PageRun], src: KVLayout, src_base: int, dst: KVLayout, dst_base: int
) -> tuple[list[int], list[int], list[int]]:
    """(src_ptrs, dst_ptrs, lengths_bytes) for moving `runs` over all layers' K and V planes."""
    src_ptrs: list[int] = []
    dst_ptrs: list[int] = []
    lengths: list[int] = []
    for layer in range(src.num_layers):
        for kv in (0, 1):
            for run in runs:
                src_ptrs.append(src_base + src.page_offset_bytes(layer, kv, run.src_page))
                dst_ptrs.append(dst_base + dst.page_offset_bytes(layer, kv, run.dst_page))
                lengths.append(run.num_pages * src.page_bytes)
    return src_ptrs, dst_ptrs, lengths


class KVPool:
    """The KV buffer plus its page allocator."""

    def __init__(self, layout: KVLayout, dtype: torch.dtype, device: torch.device | str = "cpu") -> None:
        element = torch.empty((), dtype=dtype).element_size()
        if element != layout.dtype_bytes:
            raise ValueError(f"dtype {dtype} has {element} bytes, layout says {layout.dtype_bytes}")
        self.layout = layout
        shape = (layout.num_layers, 2, layout.num_pages, layout.page_size_tokens,
                 layout.num_kv_heads, layout.head_dim)
        self.buffer = torch.zeros(shape, dtype=dtype, device=device)
        self.allocator = PageAllocator(layout.num_pages)

    @property
    def page_size_tokens(self) -> int:
        return self.layout.page_size_tokens

    @property
    def data_ptr(self) -> int:
        return self.buffer.data_ptr()

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def k_cache(self, layer: int) -> torch.Tensor:
        """[num_pages, page_size, kv_heads, head_dim] view of one layer's keys."""
        return self.buffer[layer, 0]

    def v_cache(self, layer: int) -> torch.Tensor:
        return self.buffer[layer, 1]

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store new tokens' K/V ([tokens, kv_heads, head_dim]) at flat `slots`."""
        flat = (-1, self.layout.num_kv_heads, self.layout.head_dim)
        self.buffer[layer, 0].view(flat)[slots] = k.to(self.buffer.dtype)
        self.buffer[layer, 1].view(flat)[slots] = v.to(self.buffer.dtype)

    def read_pages(self, pages: list[int]) -> torch.Tensor:
        """A host copy of `pages` (all layers, K and V): a retracted request's KV offload."""
        index = torch.tensor(pages, dtype=torch.long, device=self.buffer.device)
        return self.buffer.index_select(2, index).to("cpu", copy=True)

    def write_pages(self, pages: list[int], data: torch.Tensor) -> None:
        """Put a host copy made by `read_pages` back into (other) pages: the reload on resume."""
        if data.shape[2] != len(pages):
            raise ValueError(f"reload of {data.shape[2]} pages into {len(pages)} pages")
        index = torch.tensor(pages, dtype=torch.long, device=self.buffer.device)
        self.buffer.index_copy_(2, index, data.to(self.buffer.device))

    def copy_pages_from(self, src: KVPool, runs: list[PageRun]) -> None:
        """Copy pages from another pool (in-process transfer; all layers, K and V)."""
        for run in runs:
            s, d, n = run.src_page, run.dst_page, run.num_pages
            self.buffer[:, :, d:d + n].copy_(src.buffer[:, :, s:s + n])


def slots_for(pages: list[int], start_token: int, num_tokens: int, page_size_tokens: int) -> list[int]:
    """Flat slots of tokens [start_token, start_token + num_tokens) of a sequence with page table `pages`."""
    return [pages[t // page_size_tokens] * page_size_tokens + t % page_size_tokens
            for t in range(start_token, start_token + num_tokens)]
