"""A Llama-family decoder in plain torch: RMSNorm, RoPE (rotate-half), GQA attention, SwiGLU.

`forward(batch, pool, attention)` runs a ragged batch over the paged KV pool and returns the
logits of each chunk's last token (of every token of a chunk that asks: `ForwardBatch.last_rows`). `forward_dense(token_ids)` runs one sequence with no cache at
all (full causal SDPA): the reference the paged path is tested against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from pdreal.attention.base import AttentionBackend
from pdreal.kv.pool import KVPool
from pdreal.model.batch import ForwardBatch
from pdreal.model.spec import LlamaSpec

Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
Reduce = Callable[[torch.Tensor], torch.Tensor]  # sum of a row-parallel matmul's partials over TP ranks
RopeTables = tuple[torch.Tensor, torch.Tensor]


def _param(*shape: int) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape), requires_grad=False)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight


class Rope(nn.Module):
    """cos/sin tables grown on demand; `tables(positions)` once per forward, `rotate` per layer
    to [tokens, heads, head_dim]."""

    inv_freq: torch.Tensor  # (buffers, registered in __init__)
    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.register_buffer("cos", torch.empty(0), persistent=False)
        self.register_buffer("sin", torch.empty(0), persistent=False)

    def _grow(self, max_position: int) -> None:
        size = max(4096, 1 << (max_position - 1).bit_length())
        freqs = torch.outer(torch.arange(size, dtype=torch.float64, device=self.inv_freq.device), self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos, self.sin = emb.cos().float(), emb.sin().float()

    def tables(self, positions: torch.Tensor, dtype: torch.dtype) -> RopeTables:
        """cos, sin [tokens, 1, head_dim] of `positions`, shared by every layer of a forward."""
        if self.cos.shape[0] <= int(positions.max()):
            self._grow(int(positions.max()) + 1)
        return self.cos[positions][:, None, :].to(dtype), self.sin[positions][:, None, :].to(dtype)

    @staticmethod
    def rotate(x: torch.Tensor, tables: RopeTables) -> torch.Tensor:
        cos, sin = tables
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


class DecoderLayer(nn.Module):
    def __init__(self, spec: LlamaSpec) -> None:
        super().__init__()
        h = spec.hidden_size
        self.spec = spec
        self.attn_norm = _param(h)
        self.q_proj = _param(spec.q_size, h)
        self.k_proj = _param(spec.kv_size, h)
        self.v_proj = _param(spec.kv_size, h)
        self.o_proj = _param(h, spec.q_size)
        self.ffn_norm = _param(h)
        self.gate_proj = _param(spec.ffn_size, h)
        self.up_proj = _param(spec.ffn_size, h)
        self.down_proj = _param(h, spec.ffn_size)

    def forward(self, index: int, x: torch.Tensor, rope: RopeTables, attend: Attend,
                reduce: Reduce | None = None) -> torch.Tensor:
        """One layer; under tensor parallelism (pdreal/model/tp.py) this rank holds a slice of the
        heads and FFN columns and `reduce` sums the partial o_proj / down_proj outputs."""
        s = self.spec
        total = reduce or _identity
        hidden = rms_norm(x, self.attn_norm, s.rms_eps)
        q = F.linear(hidden, self.q_proj).view(-1, s.num_heads, s.head_dim)
        k = F.linear(hidden, self.k_proj).view(-1, s.num_kv_heads, s.head_dim)
        v = F.linear(hidden, self.v_proj).view(-1, s.num_kv_heads, s.head_dim)
        attn = attend(index, Rope.rotate(q, rope), Rope.rotate(k, rope), v)
        x = x + total(F.linear(attn.reshape(-1, s.q_size), self.o_proj))
        hidden = rms_norm(x, self.ffn_norm, s.rms_eps)
        ffn = F.silu(F.linear(hidden, self.gate_proj)) * F.linear(hidden, self.up_proj)
        return x + total(F.linear(ffn, self.down_proj))


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class LlamaModel(nn.Module):
    """The whole model, or one tensor-parallel rank's shard of it (`spec` then holds this rank's
    heads and FFN columns, `reduce` is the all-reduce over the ranks: pdreal/model/tp.py)."""

    def __init__(self, spec: LlamaSpec, reduce: Reduce | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.reduce = reduce
        self.embed = _param(spec.vocab_size, spec.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(spec) for _ in range(spec.num_layers))
        self.final_norm = _param(spec.hidden_size)
        self.lm_head = None if spec.tied_embeddings else _param(spec.vocab_size, spec.hidden_size)
        self.rope = Rope(spec.head_dim, spec.rope_theta)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def _run(self, input_ids: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        x = F.embedding(input_ids, self.embed)
        rope = self.rope.tables(positions, x.dtype)
        for index, layer in enumerate(self.layers):
            x = layer(index, x, rope, attend, self.reduce)
        return x

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = rms_norm(hidden, self.final_norm, self.spec.rms_eps)
        head = self.embed if self.lm_head is None else self.lm_head
        return F.linear(hidden, head).float()

    @torch.inference_mode()
    def forward(self, batch: ForwardBatch, pool: KVPool, attention: AttentionBackend) -> torch.Tensor:
        """Logits [rows, vocab] (fp32) of `batch.logits_indices`: each chunk's last new token, every
        new token of an `all_logits` chunk."""
        s = self.spec
        attention.plan(batch, s.num_heads, s.num_kv_heads, s.head_dim, self.dtype)

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return attention.forward(index, q, k, v, pool)

        hidden = self._run(batch.input_ids, batch.positions, attend)
        return self._logits(hidden.index_select(0, batch.logits_indices))

    @torch.inference_mode()
    def forward_dense(self, token_ids: list[int]) -> torch.Tensor:
        """Logits [len(token_ids), vocab] of one sequence, no KV cache (reference path)."""
        s = self.spec
        ids = torch.tensor(token_ids, dtype=torch.long, device=self.device)

        def attend(index: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            group = s.num_heads // s.num_kv_heads
            keys = k.transpose(0, 1).repeat_interleave(group, dim=0)
            values = v.transpose(0, 1).repeat_interleave(group, dim=0)
            out = F.scaled_dot_product_attention(q.transpose(0, 1), keys, values, is_causal=True)
            return out.transpose(0, 1)

        return self._logits(self._run(ids, torch.arange(len(token_ids), device=self.device), attend))
