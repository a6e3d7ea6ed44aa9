"""The attention-backend contract.

`plan(batch, ...)` is called once per forward with the batch's page tables; `forward(layer, q,
k, v, pool)` is called once per layer: it first writes the new tokens' K/V into the pool at
`batch.slots`, then returns causal attention of each chunk's queries over the chunk's whole
context (cached prefix + new tokens). Shapes: q [tokens, heads, head_dim], k/v
[tokens, kv_heads, head_dim], tokens in batch order (chunk after chunk); the output has q's
shape and order. Scale is 1/sqrt(head_dim); query head h reads KV head h // (heads / kv_heads).

The batch's page tables come in two equivalent forms (`ForwardBatch`): per-chunk tuples and the
int32 CSR arrays paged kernels take (`kv_indptr`, `kv_indices`, `kv_last_page_len`,
`qo_indptr`). Whatever a backend derives from them (masks, gather indices, kernel plans) it
derives in `plan`, once for all layers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from pdreal.kv.pool import KVPool
from pdreal.model.batch import ForwardBatch


class AttentionBackend(ABC):
    name: str = "base"

    @abstractmethod
    def plan(self, batch: ForwardBatch, num_heads: int, num_kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> None:
        """Prepare per-batch metadata shared by all layers."""

    @abstractmethod
    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                pool: KVPool) -> torch.Tensor:
        """Store k/v for the new tokens, then attend."""
