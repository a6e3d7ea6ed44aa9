"""MLA's projections as the engines run them (DeepSeek-V3/R1, Kimi-K2.5), one layer at a time.

Multi-head latent attention projects the hidden state down to a query latent (q_lora_rank) and a
KV latent (kv_lora_rank plus the shared RoPE key), then up to the heads. The engines (SGLang,
TensorRT-LLM, vLLM) run it as separate kernels, and the two phases differ:

- every token: the fused down-projection (hidden -> q_lora + kv_lora + rope), **replicated on every
  TP rank** (SGLang's `ReplicatedLinear`; AIConfigurator prices it "on every gpu"), then the query
  up-projection (q_lora -> heads/tp x (nope + rope)) and the output projection (heads/tp x v -> hidden);
- prompt tokens (not absorbed): the KV up-projection kv_b (kv_lora -> heads/tp x (nope + v)) over the
  prompt's new and cached tokens, then attention over full heads;
- decode tokens (absorbed): kv_b's two halves fold into batched matmuls per head, q_nope x W_UK
  before attention and the attention output x W_UV after it (`mla_bmm`'s mla_gen_pre / post rows,
  by tokens and heads per rank), so attention reads only the latent KV.

Each GEMM is read from the set's GEMM table at its own shape, so a small decode batch pays each
kernel's floor (several us on Blackwell) instead of one flop-equivalent GEMM's. The BMMs run at
fp8 when the checkpoint's GEMMs are quantized, else bf16 (AIConfigurator's rule); a set without
`mla_bmm` rows prices them as the kv_b GEMM of the decode tokens (same FLOPs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pdsim.config import ModelConfig
from pdsim.perf.loggrid import LogGrid
from pdsim.perf.optables import AIC_DIR, load_mla_bmm, table_file

Gemm = Callable[[float, float, float], float]  # (m, n, k) -> s
Ratio = Callable[[float, float], float]  # (flops, bytes) -> target / reference time
BF16_BYTES = 2


@dataclass(frozen=True)
class MlaProjections:
    """One MLA layer's projection kernels on one rank of `tp` (attention kernels apart)."""

    model: ModelConfig
    tp: int
    gemm_s: Gemm
    bmm: tuple[LogGrid, LogGrid] | None = None  # (pre, post): ms over (tokens, heads per rank)
    bmm_ratio: Ratio | None = None  # scaling of the BMM tables to the target GPU (None = same GPU)

    @property
    def heads(self) -> float:
        return self.model.num_heads / self.tp

    def common_s(self, tokens: float) -> float:
        """Down-projections (replicated), query up-projection and output projection over `tokens`."""
        m, h = self.model, self.model.hidden_size
        qk_dim = m.head_dim + m.qk_rope_head_dim
        down = m.kv_lora_rank + m.qk_rope_head_dim
        if m.q_lora_rank > 0:
            down_s = self.gemm_s(tokens, m.q_lora_rank + down, h)
            q_up_s = self.gemm_s(tokens, self.heads * qk_dim, m.q_lora_rank)
        else:  # no query latent (DeepSeek-V2-Lite): the query straight from the hidden state
            down_s = self.gemm_s(tokens, down, h)
            q_up_s = self.gemm_s(tokens, self.heads * qk_dim, h)
        return down_s + q_up_s + self.gemm_s(tokens, h, self.heads * m.v_head_dim)

    def split_s(self, prompt_kv_tokens: float, decode_seqs: float) -> float:
        """kv_b over the prompt tokens (new + cached) and the absorbed BMMs of the decode tokens."""
        m = self.model
        kv_up = self.heads * (m.head_dim + m.v_head_dim)
        total = self.gemm_s(prompt_kv_tokens, kv_up, m.kv_lora_rank) if prompt_kv_tokens > 0 else 0.0
        if decode_seqs <= 0:
            return total
        if self.bmm is None:
            return total + self.gemm_s(decode_seqs, kv_up, m.kv_lora_rank)
        pre, post = self.bmm
        ms = pre(decode_seqs, self.heads) + post(decode_seqs, self.heads)
        if self.bmm_ratio is not None:
            flops = 2 * decode_seqs * self.heads * m.kv_lora_rank * (m.head_dim + m.v_head_dim)
            nbytes = BF16_BYTES * (self.heads * m.kv_lora_rank * (m.head_dim + m.v_head_dim)
                                   + decode_seqs * self.heads * (2 * m.kv_lora_rank + m.head_dim + m.v_head_dim))
            ms *= self.bmm_ratio(flops, nbytes)
        return total + ms / 1e3


def bmm_dtype(model: ModelConfig) -> str:
    """The absorbed BMMs' dtype: fp8 when the checkpoint's GEMMs are quantized, else bf16."""
    return "bfloat16" if model.gemm_quant in ("", "bf16") else "fp8"


def load_bmm(source: str, model: ModelConfig) -> tuple[LogGrid, LogGrid] | None:
    """The set's (pre, post) BMM grids at the model's BMM dtype (bf16 where the set lacks it),
    or None where the set has no mla_bmm table."""
    if table_file(AIC_DIR / source, "mla_bmm") is None:
        return None
    for dtype in dict.fromkeys((bmm_dtype(model), "bfloat16")):
        try:
            return load_mla_bmm(source, "mla_gen_pre", dtype), load_mla_bmm(source, "mla_gen_post", dtype)
        except ValueError:
            continue
    return None
