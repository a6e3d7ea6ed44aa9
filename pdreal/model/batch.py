"""ForwardBatch: the inputs and attention metadata of one ragged forward over the paged cache.

A batch is a list of sequence chunks. Chunk i has `q_len` new tokens at positions
[start, start + q_len) and attends to all `kv_len = start + q_len` tokens of its sequence, whose
pages are `page_table`. Decode steps are chunks with q_len == 1; prefill chunks may continue a
cached prefix (chunked prefill, prefix reuse). A chunk with `all_logits` asks for the logits of
every new token (prompt logprobs), the others only for their last one: `logits_indices` lists
the token rows the model computes logits for, `last_rows` which of them is each chunk's last.
Page tables are also given in the CSR form that
paged-attention kernels take (`kv_indptr`, `kv_indices`, `kv_last_page_len`, int32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pdreal.kv.pool import slots_for
from pdsim.policy.views import pages_for


@dataclass(frozen=True, slots=True)
class SeqChunk:
    """`token_ids` are the new tokens; `start` tokens of the sequence are already in the cache."""

    token_ids: list[int]
    start: int
    page_table: list[int]
    all_logits: bool = False  # logits of every new token, not only the last (prompt logprobs)


@dataclass(frozen=True)
class ForwardBatch:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64
    slots: torch.Tensor  # [T] int64, where each new token's K/V is written
    q_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    page_tables: tuple[tuple[int, ...], ...]
    logits_indices: torch.Tensor  # [R] int64: the token rows logits are computed for (R = B without all_logits)
    qo_indptr: torch.Tensor  # [B+1] int32
    kv_indptr: torch.Tensor  # [B+1] int32
    kv_indices: torch.Tensor  # [sum pages] int32
    kv_last_page_len: torch.Tensor  # [B] int32
    page_size_tokens: int
    last_rows: tuple[int, ...] = ()  # per chunk: its last token's row among the logits rows

    @property
    def batch_size(self) -> int:
        return len(self.q_lens)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def is_decode(self) -> bool:
        return all(q == 1 for q in self.q_lens)

    @classmethod
    def build(cls, chunks: list[SeqChunk], page_size_tokens: int, device: torch.device | str) -> ForwardBatch:
        if not chunks:
            raise ValueError("a ForwardBatch needs at least one chunk")
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        q_lens: list[int] = []
        kv_lens: list[int] = []
        tables: list[tuple[int, ...]] = []
        logit_tokens: list[int] = []
        last_rows: list[int] = []
        last_page_len: list[int] = []
        for chunk in chunks:
            q_len, kv_len = len(chunk.token_ids), chunk.start + len(chunk.token_ids)
            if q_len < 1:
                raise ValueError("a chunk needs at least one new token")
            used = pages_for(kv_len, page_size_tokens)
            if used > len(chunk.page_table):
                raise ValueError(f"{kv_len} tokens need {used} pages, page table has {len(chunk.page_table)}")
            ids.extend(chunk.token_ids)
            positions.extend(range(chunk.start, kv_len))
            slots.extend(slots_for(chunk.page_table, chunk.start, q_len, page_size_tokens))
            q_lens.append(q_len)
            kv_lens.append(kv_len)
            tables.append(tuple(chunk.page_table[:used]))
            logit_tokens.extend(range(len(ids) - q_len, len(ids)) if chunk.all_logits else (len(ids) - 1,))
            last_rows.append(len(logit_tokens) - 1)
            last_page_len.append(kv_len - (used - 1) * page_size_tokens)
        qo_indptr = [0]
        kv_indptr = [0]
        for q_len, table in zip(q_lens, tables, strict=True):
            qo_indptr.append(qo_indptr[-1] + q_len)
            kv_indptr.append(kv_indptr[-1] + len(table))

        def as_tensor(values: list[int], dtype: torch.dtype) -> torch.Tensor:
            return torch.tensor(values, dtype=dtype, device=device)

        return cls(
            input_ids=as_tensor(ids, torch.long),
            positions=as_tensor(positions, torch.long),
            slots=as_tensor(slots, torch.long),
            q_lens=tuple(q_lens),
            kv_lens=tuple(kv_lens),
            page_tables=tuple(tables),
            logits_indices=as_tensor(logit_tokens, torch.long),
            qo_indptr=as_tensor(qo_indptr, torch.int32),
            kv_indptr=as_tensor(kv_indptr, torch.int32),
            kv_indices=as_tensor([p for table in tables for p in table], torch.int32),
            kv_last_page_len=as_tensor(last_page_len, torch.int32),
            page_size_tokens=page_size_tokens,
            last_rows=tuple(last_rows),
        )
