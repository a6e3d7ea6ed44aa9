"""The attention-backend contract.

`plan(batch, ...)` is called once per forward with the batch's page tables; `forward(layer, q,
k, v, pool)` is called once per layer: it first writes the new tokens' K/V into the pool at
`batch.slots`, then returns causal attention of each chunk's queries over the chunk's whole
context (cached prefix + new tokens). Shapes: q [tokens, heads, head_dim], k/v
[tokens, kv_heads, head_dim]; the output has q's shape. Scale is 1/sqrt(head_dim).
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
