"""Pure-torch paged attention: the reference path, and the CPU path.

Per chunk it gathers the context's K/V from the pool by slot and calls SDPA with a causal mask
aligned to the end of the context (query j sits at position start + j).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pdreal.attention.base import AttentionBackend
from pdreal.kv.pool import KVPool
from pdreal.model.batch import ForwardBatch


class TorchAttention(AttentionBackend):
    name = "torch"

    def __init__(self) -> None:
        self._batch: ForwardBatch | None = None
        self._kv_slots: list[torch.Tensor] = []
        self._masks: list[torch.Tensor | None] = []
        self._group = 1

    def plan(self, batch: ForwardBatch, num_heads: int, num_kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> None:
        device = batch.input_ids.device
        page_size = batch.page_size_tokens
        self._batch, self._group = batch, num_heads // num_kv_heads
        self._kv_slots, self._masks = [], []
        offsets = torch.arange(page_size, device=device)
        for q_len, kv_len, table in zip(batch.q_lens, batch.kv_lens, batch.page_tables, strict=True):
            pages = torch.tensor(table, dtype=torch.long, device=device)
            self._kv_slots.append((pages[:, None] * page_size + offsets).reshape(-1)[:kv_len])
            if q_len == 1:
                self._masks.append(None)
            else:
                q_pos = torch.arange(kv_len - q_len, kv_len, device=device)
                self._masks.append(torch.arange(kv_len, device=device)[None, :] <= q_pos[:, None])

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                pool: KVPool) -> torch.Tensor:
        batch = self._batch
        if batch is None:
            raise RuntimeError("TorchAttention.forward called before plan()")
        pool.write(layer, batch.slots, k, v)
        kv_shape = (-1, pool.layout.num_kv_heads, pool.layout.head_dim)
        k_flat = pool.k_cache(layer).reshape(kv_shape)
        v_flat = pool.v_cache(layer).reshape(kv_shape)
        out = torch.empty_like(q)
        start = 0
        for i, q_len in enumerate(batch.q_lens):
            slots = self._kv_slots[i]
            keys = k_flat.index_select(0, slots).to(q.dtype).transpose(0, 1)  # [kvh, kv, d]
            values = v_flat.index_select(0, slots).to(q.dtype).transpose(0, 1)
            if self._group > 1:
                keys = keys.repeat_interleave(self._group, dim=0)
                values = values.repeat_interleave(self._group, dim=0)
            query = q[start:start + q_len].transpose(0, 1)  # [h, q, d]
            attn = F.scaled_dot_product_attention(query, keys, values, attn_mask=self._masks[i])
            out[start:start + q_len] = attn.transpose(0, 1)
            start += q_len
        return out
