"""Attention of the layer kinds beside full softmax attention (pdsim/perf/spec.py counts them).

- Sliding-window layers (gpt-oss: every other layer, window 128): a query sees at most the last
  `sliding_window_tokens` keys, so a prefill computes `window_pairs` (query, key) pairs instead of
  the causal ones and a decode reads at most the window. The measured model prices them with the
  same attention tables (prefill scaled by the pairs ratio, decode at the capped context).
- Linear-attention layers (Qwen3.5's Gated DeltaNet): no per-token KV; each request keeps a
  fixed state (spec.linear_state_elements_per_layer) that a step reads and writes once, and each
  token updates it (the delta rule: a key_dim x value_dim outer product per value head, plus the
  chunked form's intra-chunk products in prefill). No public table of these kernels is shipped,
  so `linear_attention_layer_s` is their roofline at the perf preset's mfu / mbu.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.perf import spec
from pdsim.perf.base import PrefillItem

GDN_CHUNK_TOKENS = 64  # the chunk of the chunked delta-rule kernels (flash-linear-attention's default)


def window_pairs(items: Sequence[PrefillItem], window_tokens: int) -> float:
    """(query, key) pairs a prefill batch computes when each query sees at most `window_tokens`
    keys (itself included): query at position p (1-based) sees min(p, window) keys."""
    total = 0.0
    for n, c in items:
        inside = max(0, min(c + n, window_tokens) - c)  # queries at positions c+1 .. window
        total += inside * c + inside * (inside + 1) / 2 + (n - inside) * window_tokens
    return total


def linear_attention_layer_s(model: ModelConfig, hw: HardwareConfig, tp: int, items: Sequence[PrefillItem],
                             num_seqs: int, mfu: float, mbu: float) -> float:
    """One linear-attention layer's kernels on one of tp ranks (s), roofline at mfu / mbu: every
    request's state read and written once, the delta-rule updates and readouts of every token."""
    tokens = sum(n for n, _ in items) + num_seqs
    if tokens <= 0:
        return 0.0
    requests = len(items) + num_seqs
    state_bytes = spec.state_bytes_per_request_per_rank(model, tp) / model.num_linear_attention_layers
    value_heads = math.ceil(model.linear_num_value_heads / tp)
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    per_token_flops = value_heads * (6 * dk * dv + (4 * GDN_CHUNK_TOKENS * (dk + dv) if items else 0))
    flops = tokens * per_token_flops
    nbytes = 2 * requests * state_bytes
    return max(flops / (hw.bf16_tflops * 1e12 * mfu), nbytes / (hw.hbm_gbps * 1e9 * mbu))
