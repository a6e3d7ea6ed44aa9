"""FlashInfer paged attention (GPU only; `backend="fa2"`).

flashinfer is imported when this backend is constructed, never at `import pdreal`. New K/V are
written by slot (the same path as the torch backend); attention uses the batch-decode wrapper
when every chunk has one query token and the batch-prefill wrapper (causal, aligned to the end
of the context) otherwise. Both take the pool's per-layer (K, V) views in NHD layout.
"""

from __future__ import annotations

import math

import torch

from pdreal.attention.base import AttentionBackend
from pdreal.kv.pool import KVPool
from pdreal.model.batch import ForwardBatch

WORKSPACE_BYTES = 128 * 1024 * 1024


class FlashInferAttention(AttentionBackend):
    name = "flashinfer"

    def __init__(self, device: str = "cuda") -> None:
        if not torch.cuda.is_available():
            raise RuntimeError("the flashinfer attention backend needs CUDA; use backend 'torch' on CPU")
        import flashinfer  # heavy; JIT-compiles kernels on first use

        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self._prefill = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")
        self._decode = flashinfer.BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD", backend="fa2")
        self._batch: ForwardBatch | None = None
        self._is_decode = False

    def plan(self, batch: ForwardBatch, num_heads: int, num_kv_heads: int, head_dim: int,
             dtype: torch.dtype) -> None:
        self._batch, self._is_decode = batch, batch.is_decode
        common = dict(q_data_type=dtype, kv_data_type=dtype, sm_scale=1.0 / math.sqrt(head_dim))
        if self._is_decode:
            self._decode.plan(batch.kv_indptr, batch.kv_indices, batch.kv_last_page_len,
                              num_heads, num_kv_heads, head_dim, batch.page_size_tokens,
                              pos_encoding_mode="NONE", **common)
        else:
            self._prefill.plan(batch.qo_indptr, batch.kv_indptr, batch.kv_indices,
                               batch.kv_last_page_len, num_heads, num_kv_heads, head_dim,
                               batch.page_size_tokens, causal=True, pos_encoding_mode="NONE",
                               **common)

    def forward(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                pool: KVPool) -> torch.Tensor:
        if self._batch is None:
            raise RuntimeError("FlashInferAttention.forward called before plan()")
        pool.write(layer, self._batch.slots, k, v)
        cache = (pool.k_cache(layer), pool.v_cache(layer))
        wrapper = self._decode if self._is_decode else self._prefill
        return wrapper.run(q.contiguous(), cache)
