"""Attention backends over the paged KV pool: `torch` (reference, CPU) and `flashinfer` (GPU)."""

from __future__ import annotations

from pdreal.attention.base import AttentionBackend


def make_backend(name: str, device: str = "cpu") -> AttentionBackend:
    """`torch` or `flashinfer`; flashinfer is imported only here, on first use."""
    if name == "torch":
        from pdreal.attention.torch_ref import TorchAttention, gather_budget_for

        return TorchAttention(gather_budget_for(device))
    if name == "flashinfer":
        from pdreal.attention.flashinfer import FlashInferAttention

        return FlashInferAttention(device)
    raise ValueError(f"attention backend {name!r} unknown; use 'torch' or 'flashinfer'")


__all__ = ["AttentionBackend", "make_backend"]
