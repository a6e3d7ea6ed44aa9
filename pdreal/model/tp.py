"""Tensor parallelism of the Llama model (Megatron's split, as SGLang shards Llama).

Rank r of `size` ranks holds query heads, KV heads and FFN columns
`[r * n / size, (r + 1) * n / size)` of each layer: q/k/v and gate/up are column-parallel (their
output rows sliced), o_proj and down_proj row-parallel (their input columns sliced), and the
partial outputs of the latter are summed over the ranks by an all-reduce (`LlamaModel.reduce`).
Embeddings, norms and the LM head are replicated, so every rank computes the same logits. A
rank's KV pool holds its KV heads only (`head_range`): the KV-transfer layer moves head slices
between pools of different TP sizes (pdreal/transfer/slices.py).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from pdreal.model.llama import LlamaModel, Reduce
from pdreal.model.spec import LlamaSpec


def check_tp(spec: LlamaSpec, tp_size: int) -> None:
    """ValueError naming the shape that `tp_size` ranks cannot split evenly."""
    if tp_size < 1:
        raise ValueError(f"tp_size must be >= 1, got {tp_size}")
    for name in ("num_heads", "num_kv_heads", "ffn_size"):
        if getattr(spec, name) % tp_size:
            raise ValueError(f"model {spec.name}: {name} {getattr(spec, name)} is not divisible by "
                             f"tp_size {tp_size}")


def head_range(total: int, rank: int, size: int) -> tuple[int, int]:
    """[first, end) of the `total` heads (or columns) that rank `rank` of `size` holds."""
    if total % size or not 0 <= rank < size:
        raise ValueError(f"{total} heads cannot be split into rank {rank} of {size}")
    per = total // size
    return rank * per, (rank + 1) * per


def shard_spec(spec: LlamaSpec, tp_size: int) -> LlamaSpec:
    """The shape one rank computes: its heads, KV heads and FFN columns."""
    check_tp(spec, tp_size)
    return replace(spec, num_heads=spec.num_heads // tp_size, num_kv_heads=spec.num_kv_heads // tp_size,
                   ffn_size=spec.ffn_size // tp_size)


def shard_model(model: LlamaModel, rank: int, tp_size: int, reduce: Reduce | None) -> LlamaModel:
    """Rank `rank`'s shard of `model` (a new module; `model` is left as it is)."""
    spec, local = model.spec, shard_spec(model.spec, tp_size)
    d = spec.head_dim
    q0, q1 = head_range(spec.num_heads, rank, tp_size)
    k0, k1 = head_range(spec.num_kv_heads, rank, tp_size)
    f0, f1 = head_range(spec.ffn_size, rank, tp_size)
    rows = {"q_proj": (q0 * d, q1 * d), "k_proj": (k0 * d, k1 * d), "v_proj": (k0 * d, k1 * d),
            "gate_proj": (f0, f1), "up_proj": (f0, f1)}
    cols = {"o_proj": (q0 * d, q1 * d), "down_proj": (f0, f1)}
    with torch.device(model.device):
        shard = LlamaModel(local, reduce)
    source = dict(model.named_parameters())
    for name, param in shard.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        full: torch.Tensor = source[name]
        if leaf in rows:
            full = full[rows[leaf][0]:rows[leaf][1]]
        elif leaf in cols:
            full = full[:, cols[leaf][0]:cols[leaf][1]]
        param.data = full.detach().clone().contiguous()
    return shard.to(model.dtype)
