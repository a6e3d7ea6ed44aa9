"""Pure-torch paged attention: the reference path, and the CPU path.

`plan` splits the batch into *groups*, runs of consecutive chunks that one
`scaled_dot_product_attention` call can serve on PyTorch's fused (flash) kernel:

- a **decode group**: consecutive chunks of one new token each (decodes, however ragged their
  contexts): queries folded to [n, kv_heads, heads / kv_heads, d] over keys padded to the
  longest context, with an additive key-padding mask only when the contexts differ;
- a **fresh prefill group**: consecutive prompts of equal length with nothing cached: keys and
  values are this forward's own K/V (no read from the pool) and the mask is `is_causal`;
- a **prefix prefill group**: consecutive chunks of equal length after equal cached prefixes
  (chunked prefill): one [q_len, kv_len] additive mask aligned to the end of the context (query
  j sits at position start + j), shared by the group.

A pure decode batch and a batch of equal prompts are therefore one call per layer (or a few, see
below); a mixed or ragged prefill batch is one call per group. Every call passes 4-D tensors, an
additive mask or `is_causal` (never a boolean mask: that selects the reference "math" kernel), and
no K/V copies per grouped head: prefill groups pass `enable_gqa`; decode groups fold each KV
head's query heads into the query-length axis (queries [n, kv_heads, heads / kv_heads, d], one
query token per sequence, so every folded row sees the same keys), which reads each KV head once
per sequence instead of once per query head.

The K/V of a group that reads the pool are gathered from the pages right before its call (an
`index_select` per KV head for K and for V) into a head-major workspace the backend keeps.
Head-major, because the fused kernel reads each head's keys contiguously (keys left token-major,
as the pages hold them, made its decode calls ~1.8x slower); kept, because fresh multi-megabyte
buffers per layer cost a page fault per 4 KB, more than the copy itself; per group and bounded,
because a gathered group the kernel reads back from cache is cheaper than one it reads from
memory: a group whose gathered K/V would exceed `gather_budget_bytes` (8 MiB, about an L2 plus a
share of L3) is split into sub-groups of whole sequences that fit (at least one sequence each), so
a long-context decode batch is a few calls per layer over one cache-resident workspace. On a GPU
the budget is 1 GiB (`gather_budget_for`): there every split costs launches, not cache misses.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pdreal.attention.base import AttentionBackend
from pdreal.kv.pool import KVPool
from pdreal.model.batch import ForwardBatch

DEFAULT_GATHER_BUDGET_BYTES = 8 << 20
# On a GPU a split costs kernel launches (2 x kv_heads gathers and a call per group and layer), not
# cache misses: 8 MiB cut a 40-sequence decode batch of Llama-3.1-8B into one group per sequence,
# 2-3 s a step on an H200 (docs/GPU.md). There the budget only bounds the workspace.
GPU_GATHER_BUDGET_BYTES = 1 << 30


def gather_budget_for(device: str) -> int:
    """The gather budget for a device: CPU caches on `cpu`, the workspace's size elsewhere."""
    return DEFAULT_GATHER_BUDGET_BYTES if str(device).startswith("cpu") else GPU_GATHER_BUDGET_BYTES


@dataclass(frozen=True, slots=True)
class AttentionGroup:
    """Chunks [first_chunk, first_chunk + num_seqs) of a batch, attended by one SDPA call.

    Their new tokens are rows [token_start, token_start + num_seqs * q_len) of q. Keys come from
    the new tokens themselves when `fresh`, else from the pool at rows [gather_start,
    gather_start + num_seqs * kv_len) of the planned gather slots (each sequence's context padded
    to kv_len)."""

    first_chunk: int
    num_seqs: int
    q_len: int
    kv_len: int
    token_start: int
    fresh: bool
    gather_start: int = -1
    is_causal: bool = False
    mask: torch.Tensor | None = None  # additive, broadcast to [num_seqs, heads, q_len, kv_len]

    @property
    def token_end(self) -> int:
        return self.token_start + self.num_seqs * self.q_len

    @property
    def gather_rows(self) -> int:
        """Pool rows (tokens) this group gathers: 0 when fresh."""
        return 0 if self.fresh else self.num_seqs * self.kv_len


def _joins(batch: ForwardBatch, group_first: int, chunk: int) -> bool:
    """Whether `chunk` can share the SDPA call of the group starting at chunk `group_first`."""
    q_first, q_len = batch.q_lens[group_first], batch.q_lens[chunk]
    if q_first == 1 or q_len == 1:
        return q_first == q_len == 1
    return q_first == q_len and batch.kv_lens[group_first] == batch.kv_lens[chunk]


def chunk_runs(batch: ForwardBatch) -> list[tuple[int, int]]:
    """(first chunk, number of chunks) of each group, in batch order."""
    runs: list[tuple[int, int]] = []
    for chunk in range(batch.batch_size):
        if runs and _joins(batch, runs[-1][0], chunk):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((chunk, 1))
    return runs


def split_run(first: int, count: int, max_seqs: int) -> list[tuple[int, int]]:
    """(first chunk, number of chunks) of a run cut into as few near-equal parts of at most
    `max_seqs` chunks as possible (at least one chunk each)."""
    parts = -(-count // max(1, max_seqs))
    size, extra = divmod(count, parts)
    cuts, start = [], first
    for part in range(parts):
        length = size + (part < extra)
        cuts.append((start, length))
        start += length
    return cuts


def padded_slots(batch: ForwardBatch, first: int, count: int, kv_len: int) -> torch.Tensor:
    """Flat pool slots of the contexts of chunks [first, first + count), each padded to kv_len
    tokens with its own first slot (padding keys are masked out): [count * kv_len] int64."""
    page = batch.page_size_tokens
    max_pages = -(-kv_len // page)
    tables = [list(t) + [t[0]] * (max_pages - len(t)) for t in batch.page_tables[first:first + count]]
    pages = torch.tensor(tables, dtype=torch.long, device=batch.input_ids.device)
    offsets = torch.arange(page, dtype=torch.long, device=pages.device)
    slots = (pages[:, :, None] * page + offsets).reshape(count, -1)[:, :kv_len]
    kv_lens = torch.tensor(batch.kv_lens[first:first + count], dtype=torch.long, device=pages.device)
    pad = torch.arange(kv_len, device=pages.device)[None, :] >= kv_lens[:, None]
    return torch.where(pad, slots[:, :1], slots).reshape(-1)


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """0 where attention is allowed, -inf elsewhere (SDPA's float mask: keeps the fused kernel)."""
    zeros = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zeros.masked_fill(~allowed, float("-inf"))


class TorchAttention(AttentionBackend):
    name = "torch"

    def __init__(self, gather_budget_bytes: int = DEFAULT_GATHER_BUDGET_BYTES) -> None:
        if gather_budget_bytes < 1:
            raise ValueError(f"gather_budget_bytes must be >= 1, got {gather_budget_bytes}")
        self.gather_budget_bytes = gather_budget_bytes
        self._batch: ForwardBatch | None = None
        self._groups: list[AttentionGroup] = []
        self._gather_slots: torch.Tensor | None = None
        self._gqa = False
        self._workspace: torch.Tensor | None = None  # [2 (K, V), kv_heads, rows, head_dim]

    @property
    def groups(self) -> list[AttentionGroup]:
        """The planned groups (one SDPA call per layer each)."""
        return list(self._groups)

    def plan(self, batch: ForwardBatch, num_heads: int, num_kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> None:
        self._batch, self._gqa = batch, num_heads != num_kv_heads
        self._groups, slots = [], []
        token, gathered = 0, 0
        seq_bytes_per_token = 2 * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        for run_first, run_count in chunk_runs(batch):
            longest = max(batch.kv_lens[run_first:run_first + run_count])
            fresh = batch.q_lens[run_first] == longest  # reads no pool: nothing to keep in cache
            max_seqs = run_count if fresh else self.gather_budget_bytes // (seq_bytes_per_token * longest)
            for first, count in split_run(run_first, run_count, max_seqs):
                group = self._plan_group(batch, first, count, token, gathered, dtype)
                if not group.fresh:
                    slots.append(padded_slots(batch, first, count, group.kv_len))
                    gathered += group.gather_rows
                self._groups.append(group)
                token = group.token_end
        self._gather_slots = torch.cat(slots) if slots else None

    @staticmethod
    def _plan_group(batch: ForwardBatch, first: int, count: int, token: int, gathered: int,
                    dtype: torch.dtype) -> AttentionGroup:
        q_len, kv_lens = batch.q_lens[first], batch.kv_lens[first:first + count]
        kv_len, device = max(kv_lens), batch.input_ids.device
        if q_len == kv_len:  # prompts with nothing cached (decode-like when q_len == 1)
            return AttentionGroup(first, count, q_len, kv_len, token, fresh=True, is_causal=q_len > 1)
        keys = torch.arange(kv_len, device=device)
        if q_len == 1:  # decodes: mask only the padding of shorter contexts
            lens = torch.tensor(kv_lens, device=device)
            mask = None if min(kv_lens) == kv_len else additive_mask(keys[None, :] < lens[:, None], dtype)
            mask = None if mask is None else mask[:, None, None, :]
        else:  # one chunk length, one prefix length: query j sees keys <= start + j
            queries = torch.arange(kv_len - q_len, kv_len, device=device)
            mask = additive_mask(keys[None, :] <= queries[:, None], dtype)
        return AttentionGroup(first, count, q_len, kv_len, token, fresh=False, gather_start=gathered, mask=mask)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                pool: KVPool) -> torch.Tensor:
        batch = self._batch
        if batch is None:
            raise RuntimeError("TorchAttention.forward called before plan()")
        pool.write(layer, batch.slots, k, v)
        outs = []
        for group in self._groups:
            if group.fresh:
                outs.append(self._attend(group, q, *self._fresh_kv(group, k, v)))
            else:
                keys, values = self._gather(layer, pool, group)
                outs.append(self._attend(group, q, keys.to(q.dtype), values.to(q.dtype)))
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    @staticmethod
    def _fresh_kv(g: AttentionGroup, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A fresh group's own K/V, token-major [n * kv_len, kv_heads, d] -> [n, kv_heads, kv_len, d]."""
        shape = (g.num_seqs, g.kv_len, k.shape[1], k.shape[2])
        rows = slice(g.token_start, g.token_end)
        return k[rows].view(shape).transpose(1, 2), v[rows].view(shape).transpose(1, 2)

    def _gather(self, layer: int, pool: KVPool, g: AttentionGroup) -> tuple[torch.Tensor, torch.Tensor]:
        """The group's K and V from the pool, [n, kv_heads, kv_len, d] views of the workspace,
        which holds them head-major ([kv_heads, rows, d]: each head's keys contiguous)."""
        assert self._gather_slots is not None
        rows, heads, head_dim = g.gather_rows, pool.layout.num_kv_heads, pool.layout.head_dim
        space = self._workspace_for(rows, pool)
        slots = self._gather_slots[g.gather_start:g.gather_start + rows]
        for plane, cache in enumerate((pool.k_cache(layer), pool.v_cache(layer))):
            by_slot = cache.view(-1, heads, head_dim)
            for head in range(heads):
                torch.index_select(by_slot[:, head], 0, slots, out=space[plane, head, :rows])
        shape = (heads, g.num_seqs, g.kv_len, head_dim)
        return space[0, :, :rows].view(shape).transpose(0, 1), space[1, :, :rows].view(shape).transpose(0, 1)

    def _workspace_for(self, rows: int, pool: KVPool) -> torch.Tensor:
        """The kept workspace, reallocated (grown by half again) when `rows` or the pool's
        geometry, dtype or device do not fit it."""
        space, source = self._workspace, pool.buffer
        heads, head_dim = pool.layout.num_kv_heads, pool.layout.head_dim
        if (space is None or space.shape[2] < rows or space.shape[1] != heads or space.shape[3] != head_dim
                or space.dtype != source.dtype or space.device != source.device):
            same_shape = space is not None and space.shape[1] == heads and space.shape[3] == head_dim
            kept_rows = space.shape[2] if space is not None and same_shape else 0
            capacity = max(rows, kept_rows * 3 // 2)
            space = self._workspace = torch.empty((2, heads, capacity, head_dim), dtype=source.dtype,
                                                  device=source.device)
        return space

    def _attend(self, g: AttentionGroup, q: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """One SDPA call: the group's queries over key/value [n, kv_heads, kv_len, d]."""
        n, heads, head_dim = g.num_seqs, q.shape[1], q.shape[2]
        rows = q[g.token_start:g.token_end]
        if g.q_len == 1 and not g.fresh:  # decode: a KV head's query heads as its query rows
            query = rows.view(n, key.shape[1], heads // key.shape[1], head_dim)
            out = F.scaled_dot_product_attention(query, key, value, attn_mask=g.mask)
            return out.reshape(n, heads, head_dim)
        query = rows.view(n, g.q_len, heads, head_dim).transpose(1, 2)
        out = F.scaled_dot_product_attention(query, key, value, attn_mask=g.mask, is_causal=g.is_causal,
                                             enable_gqa=self._gqa)
        return out.transpose(1, 2).reshape(n * g.q_len, heads, head_dim)
