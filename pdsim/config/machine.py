"""What runs: the `model` (transformer shape, precision, layer kinds) and the `hardware` (one GPU
kind and its node)."""

from __future__ import annotations

from dataclasses import dataclass

from pdsim.config.missing import MISSING


@dataclass
class ModelConfig:
    """Transformer shape; see pdsim.perf for derived FLOPs, bytes and KV sizes."""

    name: str = MISSING
    num_layers: int = MISSING
    hidden_size: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    ffn_size: int = MISSING  # dense FFN intermediate size (per expert for MoE)
    vocab_size: int = MISSING
    num_experts: int = 0  # 0 = dense
    num_active_experts: int = 0
    num_shared_experts: int = 0
    moe_ffn_size: int = 0
    num_dense_layers: int = 0  # leading dense layers in an MoE model
    kv_lora_rank: int = 0  # MLA latent (0 = not MLA)
    qk_rope_head_dim: int = 0
    q_lora_rank: int = 0
    v_head_dim: int = 0
    tied_embeddings: bool = False
    gated_ffn: bool = True  # SwiGLU (3 matrices) vs GELU MLP (2 matrices, OPT)
    dtype: str = "bf16"  # weights and KV: fp32 | bf16 | fp16 | fp8
    hf_name: str = ""
    kv_dtype: str = ""  # KV cache dtype; "" = same as dtype
    # GEMM (linear layer) quantization, AIConfigurator's names: bf16 | fp8 (per-tensor) |
    # fp8_block | nvfp4 | int4_wo (weight-only); "" = the checkpoint's dtype (docs/PRECISION.md)
    gemm_quant: str = ""
    # routed-expert quantization (MoE models), AIConfigurator's names: bf16 | fp8 | fp8_block |
    # nvfp4 | int4_wo | w4a16_mxfp4 | w4a8_mxfp4_mxfp8; "" = as gemm_quant
    moe_quant: str = ""
    max_position_embeddings: int = 0  # learned positional table rows (OPT); 0 = RoPE, no table
    # Layer kinds (pdsim/perf/spec.py): num_layers minus the two kinds below are full attention.
    # Sliding-window attention layers (gpt-oss): each query sees the last sliding_window_tokens
    num_sliding_layers: int = 0
    sliding_window_tokens: int = 0
    attention_sinks: bool = False  # a learned sink logit per head (gpt-oss): no KV, ~no weights
    attn_output_gate: bool = False  # sigmoid gate on attention's output (q_proj emits 2x; Qwen3.5)
    # q/k RMSNorm over all of a layer's heads (MiniMax-M2's qk_norm_type per_layer), not per head:
    # under TP the ranks all-reduce its statistics in every attention layer (spec.tp_all_reduces)
    qk_norm_across_heads: bool = False
    # Linear-attention layers (Qwen3.5's Gated DeltaNet): no per-token KV, a fixed state per request
    num_linear_attention_layers: int = 0
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    linear_state_dtype: str = ""  # recurrent state (config's mamba_ssm_dtype); "" = dtype
    # sparse attention (DeepSeek Sparse Attention: GLM-5's index_topk): keys each query attends
    # to, 0 = dense; not modelled, so a perf model can refuse it by name
    sparse_attention_topk: int = 0


@dataclass
class HardwareConfig:
    """One GPU kind and its node."""

    name: str = MISSING
    bf16_tflops: float = MISSING  # dense
    fp8_tflops: float = 0.0
    fp4_tflops: float = 0.0  # dense NVFP4 (Blackwell); 0 = none
    hbm_gbps: float = MISSING  # GB/s
    memory_gib: float = MISSING
    nvlink_gbps: float = 0.0  # GB/s per GPU, unidirectional
    gpus_per_node: int = 8
    nics_per_node: int = 8
    nic_gbps: float = 400.0  # Gb/s per NIC
    pcie_gbps: float = 64.0  # GB/s host<->device
    reserved_gib: float = 2.0  # per GPU, unavailable to weights and KV (CUDA context, activations)
    # perf=measured: the operator-table system (pdsim/perf/data/aic/<system>_<engine>_<version>)
    # and, when the tables were measured on another GPU, that GPU's hardware entry (scaled by
    # roofline ratios); "" = no tables (roofline fallback) / measured on this GPU
    op_tables: str = ""
    op_tables_hardware: str = ""
    # GPUs one NVLink domain joins (NVL72: 72 over nodes of 4); 0 = gpus_per_node
    nvlink_domain_gpus: int = 0
