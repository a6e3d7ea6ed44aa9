"""Step latency composed from measured per-operator tables (optables.py).

One forward step over T tokens (prefill chunks plus one token per decoding sequence) costs, per
layer: the GEMMs at m = T (QKV, output projection, FFN up/gate and down, each split over the TP
ranks; MoE layers use the fused-MoE table where it has the model's shape, else per-expert GEMMs),
causal attention over the prefill chunks (context table), attention of the decoding sequences
(generation table; the fp8-KV table for an fp8 cache), the elementwise kernels (norms, RoPE,
activation, residual adds: Vidur's table) and, with TP > 1, two all-reduces of T x hidden bf16
elements (the engine's custom all-reduce table inside one NVLink domain; NCCL's table past it,
where the custom kernels cannot reach). Then the LM head for one token per sequence, plus a
per-step CPU overhead `overhead_s + overhead_per_seq_s * sequences` (the only fitted part: no
public table measures an engine's scheduler; see the preset).

Precision (docs/PRECISION.md): GEMMs use the table of the model's `gemm_quant` (fp8, fp8_block,
nvfp4; bf16 otherwise; int4 weight-only = the bf16 table times the roofline ratio of its weight
bytes); the set is the one that has those tables (optables.resolve_set's `needs`). Which
tables a model reads is table_keys.py's; collectives past the NCCL tables, collectives.py's.

Ragged batches: prefill chunks enter the context table as B prompts of the equal length that
has the same causal (query, key) pairs (a chunk of n after c cached tokens has nc + n(n+1)/2);
decodes enter the generation table at their mean KV length (decode attention is linear in KV).
A mixed step is one forward: both attention terms, everything else at the combined T.

Hardware without its own tables uses the tables of `hardware.op_tables` measured on
`hardware.op_tables_hardware` and scales every operator by the ratio of the two GPUs' rooflines
for that operator's shape: the measured efficiency (MFU/MBU as a function of shape) is carried
over, the peaks are the target's (A800 = A100 compute with slower NVLink; L40S, H800 likewise).
MLA attention uses the MLA tables (DeepSeek-V3's shape) where the set has them; without them
(A100 under SGLang) it falls back to the roofline operator at `mfu`/`mbu`, as does any other
attention a set lacks. MLA's projections are the engines' kernels (mla.py): the replicated
down-projection, the query up- and output projections at every token, kv_b over prompt tokens
and the absorbed BMMs (`mla_bmm` rows) for decode tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.parallel import Parallel
from pdsim.perf import cost, spec
from pdsim.perf.base import PrefillItem, PrefillTimer
from pdsim.perf.collectives import beyond_table_s, nvlink_domain_gpus
from pdsim.perf.layer_kinds import linear_attention_layer_s, window_pairs
from pdsim.perf.loggrid import HeadTables, Row
from pdsim.perf.mla import MlaProjections, load_bmm
from pdsim.perf.optables import (
    AIC_DIR,
    VIDUR_HBM_GBPS,
    VIDUR_HIDDEN,
    OpTables,
    elementwise_grid,
    load_kv_generation,
    load_mla,
    load_tables,
    moe_fallback_of,
    resolve_set,
    table_file,
    with_moe_of,
)
from pdsim.perf.steps.decode import CallStep, DecodeStep, TableStep
from pdsim.perf.table_keys import (
    gemm_table,
    kv_cache_dtype,
    moe_grid_for,
    moe_shape,
    moe_table_dtype,
    needed_tables,
    weight_only_ratio,
)

COMM_LATENCY_S = 1.0e-5  # fixed all-reduce cost in the roofline ratio (small messages)
_MEMO_ENTRIES = 1 << 16


@dataclass(frozen=True)
class Scaling:
    """Roofline ratios target / reference (1.0 when the tables were measured on the target)."""

    target: HardwareConfig
    reference: HardwareConfig

    same: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "same", self.target == self.reference)

    def compute_memory(self, flops: float, nbytes: float) -> float:
        if self.same:
            return 1.0
        def t(hw: HardwareConfig) -> float:
            return max(flops / (hw.bf16_tflops * 1e12), nbytes / (hw.hbm_gbps * 1e9))
        return t(self.target) / t(self.reference)

    def link(self, nbytes: float) -> float:
        if self.same:
            return 1.0
        def t(hw: HardwareConfig) -> float:
            return COMM_LATENCY_S + nbytes / ((hw.nvlink_gbps or hw.pcie_gbps) * 1e9)
        return t(self.target) / t(self.reference)

    def memory(self, reference_hbm_gbps: float) -> float:
        return reference_hbm_gbps / self.target.hbm_gbps


@dataclass(frozen=True, eq=False)
class MeasuredModel:
    """Operator tables composed into prefill, decode and mixed steps for one TP instance."""

    model: ModelConfig
    tp: int
    tables: OpTables
    scaling: Scaling
    elementwise_gpu: str  # Vidur GPU whose elementwise table applies ("a100" | "h100")
    elementwise_hbm_gbps: float  # that GPU's HBM bandwidth (for scaling)
    overhead_s: float = 0.0
    overhead_per_seq_s: float = 0.0
    mfu: float = 0.5  # MLA attention fallback only
    mbu: float = 0.7
    name: str = "measured"
    # expert parallelism and routing of the MoE layers (parallel.py); the MoE layers run over
    # moe_gpus GPUs (tp here; tp x dp under attention DP, dp_attention.py)
    moe_ep: int = 1
    moe_gpus: int = 0  # 0 = tp
    moe_distribution: str = "balanced"
    # the kernel the engine runs for MoE layers of fewer than moe_fallback_below_tokens tokens
    # (optables.moe_fallback_of; None: the tables' own rows at every size)
    moe_fallback: OpTables | None = None
    moe_fallback_below_tokens: int = 0
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.tp < 1:
            raise ValueError(f"tensor parallel size must be >= 1, got {self.tp}")
        if not self.moe_gpus:
            object.__setattr__(self, "moe_gpus", self.tp)
        if self.moe_fallback_below_tokens < 0 or (self.moe_fallback is None) != (self.moe_fallback_below_tokens == 0):
            raise ValueError(f"perf: field 'moe_fallback_below_tokens' must be > 0 with a fallback MoE table "
                             f"and 0 without one, got {self.moe_fallback_below_tokens}")
        if self.moe_gpus % self.moe_ep:
            raise ValueError(f"perf: moe_ep={self.moe_ep} does not divide the {self.moe_gpus} GPUs of the MoE layers")
        if self.tp > 1 and not self.tables.allreduce:
            raise ValueError(f"perf: {self.tables.source} has no all-reduce rows (tp={self.tp})")
        context: HeadTables | None = self.tables.context_attention  # None: the set lacks MLA's, roofline
        generation: HeadTables | None = self.tables.generation_attention
        if kv_cache_dtype(self.model) == "fp8" and not spec.is_mla(self.model):
            generation = load_kv_generation(self.tables.source, "fp8")
        if self.model.sparse_attention_topk:
            raise ValueError(f"perf: model {self.model.name} uses sparse attention (sparse_attention_topk="
                             f"{self.model.sparse_attention_topk}), which the measured perf model does not express")
        object.__setattr__(self, "_mixed_layers", bool(self.model.num_sliding_layers or self.model.num_linear_attention_layers))
        object.__setattr__(self, "_gemm", gemm_table(self.tables, self.model))
        object.__setattr__(self, "_weight_ratio", weight_only_ratio(self.model, self.scaling.target))
        heads, kv = self._heads()
        object.__setattr__(self, "_mla", None)  # MLA's projection kernels (mla.py), MLA models only
        if spec.is_mla(self.model):  # MLA tables where the set has them, else the roofline
            context, generation = self.tables.mla_context, self.tables.mla_generation
            if kv_cache_dtype(self.model) == "fp8" and table_file(AIC_DIR / self.tables.source, "mla_generation_fp8"):
                generation = load_mla(self.tables.source, "generation", "fp8")
            heads, kv = self.model.num_heads / self.tp, 1.0
            object.__setattr__(self, "_mla", MlaProjections(
                self.model, self.tp, self.gemm_s, load_bmm(self.tables.source, self.model),
                None if self.scaling.same else self.scaling.compute_memory))
        object.__setattr__(self, "_context", context.fixed_heads(heads, kv) if context else None)
        object.__setattr__(self, "_generation",
                           generation.fixed_heads(heads, kv) if generation else None)

    # -- operators (seconds, one layer unless stated) --------------------------------------
    def gemm_s(self, m: float, n: float, k: float) -> float:
        ratio = self.scaling.compute_memory(2 * m * n * k, 2 * (m * k + k * n + m * n))
        if self._weight_ratio is not None:  # type: ignore[attr-defined]
            ratio *= self._weight_ratio(m, n, k)  # type: ignore[attr-defined]
        return self._gemm(m, n, k) * ratio / 1e3  # type: ignore[attr-defined]

    def _projections_s(self, tokens: float) -> float:
        """Attention projections of one layer (the mean over layer kinds in a hybrid model)."""
        m, h, tp = self.model, self.model.hidden_size, self.tp
        # MLA: the kernels every token runs (mla.py); kv_b and the absorbed BMMs are mla_split_s
        if self._mla is not None:  # type: ignore[attr-defined]
            return self._mla.common_s(tokens)  # type: ignore[attr-defined, no-any-return]
        q = m.num_heads * m.head_dim / tp
        kv = math.ceil(m.num_kv_heads / tp) * m.head_dim
        q_out = 2 * q if m.attn_output_gate else q  # the output gate comes out of q_proj
        softmax = self.gemm_s(tokens, q_out + 2 * kv, h) + self.gemm_s(tokens, h, q)
        if not spec.is_hybrid_linear(m):
            return softmax
        linear = self.gemm_s(tokens, spec.linear_attention_params_per_layer(m) / (h * tp), h)
        return (spec.num_kv_layers(m) * softmax + m.num_linear_attention_layers * linear) / m.num_layers

    def _ffn_s(self, tokens: float, moe: bool) -> float:
        m, h, tp = self.model, self.model.hidden_size, self.tp
        mats = 2 if m.gated_ffn else 1
        if not moe:
            ffn = m.ffn_size / tp
            return self.gemm_s(tokens, mats * ffn, h) + self.gemm_s(tokens, h, ffn)
        return self._router_shared_s(tokens) + self._experts_s(tokens)

    def _router_shared_s(self, tokens: float) -> float:
        """An MoE layer's router GEMM and shared experts (split over this instance's TP ranks)."""
        m, h, tp = self.model, self.model.hidden_size, self.tp
        mats = 2 if m.gated_ffn else 1
        inter = m.moe_ffn_size or m.ffn_size
        router = self.gemm_s(tokens, m.num_experts, h)
        shared = 0.0
        if m.num_shared_experts:
            width = inter * m.num_shared_experts / tp
            shared = self.gemm_s(tokens, mats * width, h) + self.gemm_s(tokens, h, width)
        return router + shared

    def _experts_s(self, tokens: float) -> float:
        """Routed experts of one MoE layer over `tokens` tokens (all the tokens the layer's GPUs
        take), experts split moe_ep ways and each expert moe_tp ways."""
        m, h = self.model, self.model.hidden_size
        inter = m.moe_ffn_size or m.ffn_size
        ep, moe_tp = self.moe_ep, self.moe_gpus // self.moe_ep
        grid = None
        if self.moe_fallback is not None and tokens < self.moe_fallback_below_tokens:
            grid = self.moe_fallback.moe_grid(moe_table_dtype(m), moe_shape(m), moe_tp, ep, self.moe_distribution)
        if grid is None:
            grid = moe_grid_for(self.tables, moe_table_dtype(m), moe_shape(m), moe_tp, ep, self.moe_distribution)
        if grid is not None:
            gpus = self.moe_gpus
            flops = 2 * 3 * h * inter * m.num_active_experts * tokens / gpus
            touched = cost.experts_touched(m, tokens)
            ratio = self.scaling.compute_memory(flops, 3 * h * inter * touched * 2 / gpus)
            return grid(tokens) * ratio / 1e3
        # no fused-MoE rows: each touched expert of this GPU as a GEMM of its share of the tokens
        touched = max(cost.experts_touched(m, tokens), 1.0)
        per_expert = tokens * m.num_active_experts / touched
        width = inter / moe_tp
        mats = 2 if m.gated_ffn else 1
        return touched / ep * (self.gemm_s(per_expert, mats * width, h) + self.gemm_s(per_expert, h, width))

    def _elementwise_s(self, tokens: float) -> float:
        grids = elementwise_grid(self.elementwise_gpu)
        tp = min(grids, key=lambda t: (abs(math.log(t / self.tp)), t))
        equivalent = tokens * self.model.hidden_size / VIDUR_HIDDEN
        return grids[tp](equivalent) * self.scaling.memory(self.elementwise_hbm_gbps) / 1e3

    def _allreduce_s(self, tokens: float) -> float:
        """One TP all-reduce of `tokens` tokens' activations."""
        return self._allreduce_elements_s(tokens * self.model.hidden_size)

    def _qk_norm_stats_s(self, tokens: float) -> float:
        """Every layer's all-reduce of its q/k-norm statistics (spec.tp_all_reduces), all layers."""
        calls = spec.tp_all_reduces(self.model, self.tp)[1]
        if not calls:
            return 0.0
        return calls * self._allreduce_elements_s(tokens * spec.QK_NORM_STAT_BYTES_PER_TOKEN / cost.ACTIVATION_BYTES)

    def _allreduce_elements_s(self, elements: float) -> float:
        """One TP all-reduce of `elements` bf16 values (the tables' unit)."""
        if self.tp == 1:
            return 0.0
        nbytes = elements * cost.ACTIVATION_BYTES
        ratio = self.scaling.link(2 * (self.tp - 1) / self.tp * nbytes)
        nccl = self.tables.collective("all_reduce") if self.tp > nvlink_domain_gpus(self.scaling.target) else {}
        if nccl:  # the engines' custom all-reduce joins one NVLink domain: past it NCCL runs it
            grids, size = nccl, nbytes
        else:
            grids, size = self.tables.allreduce, elements
        if self.tp in grids:
            return grids[self.tp](size) * ratio / 1e3
        top = max(grids)  # more GPUs than measured: the measured collective plus beyond_table_s
        return grids[top](size) * ratio / 1e3 + beyond_table_s(self.scaling.target, top, self.tp, nbytes, 2)

    def _heads(self) -> tuple[float, float]:
        """Per-rank (query, KV) heads in units of 128-wide heads (the tables' head_dim)."""
        m = self.model
        scale = m.head_dim / 128
        return m.num_heads / self.tp * scale, math.ceil(m.num_kv_heads / self.tp) * scale

    def _prefill_attention_s(self, items: Sequence[PrefillItem]) -> float:
        if not items:
            return 0.0
        if self._context is None:  # type: ignore[attr-defined]
            return self._roofline_attention_s(items, 0, 0)
        batch = len(items)
        isl = (math.sqrt(1 + 8 * cost.attention_pairs(items) / batch) - 1) / 2  # s(s+1)/2 = pairs
        ms = self._context(batch, isl)  # type: ignore[attr-defined]
        return ms * self._attention_ratio(items, 0, 0) / 1e3

    def _attention_ratio(self, items: Sequence[PrefillItem], seqs: int, ctx: int) -> float:
        """Target / reference roofline of the step's attention (1.0 on the tables' own GPU)."""
        if self.scaling.same:
            return 1.0
        ops = [op for op in cost.step_cost(self.model, items, seqs, ctx, self.tp).ops
               if op.name.startswith("attention")]
        return self.scaling.compute_memory(sum(o.flops for o in ops), sum(o.bytes for o in ops))

    def _decode_attention_s(self, num_seqs: int, context_tokens: int) -> float:
        """Decode attention of one layer (s): the generation table at the mean KV length."""
        if num_seqs <= 0:
            return 0.0
        if self._generation is None:  # type: ignore[attr-defined]
            return self._roofline_attention_s((), num_seqs, context_tokens)
        ms = self._generation.at_second(num_seqs, max(context_tokens / num_seqs, 1.0))  # type: ignore[attr-defined]
        if not self.scaling.same:
            ms = ms * self._attention_ratio((), num_seqs, context_tokens)
        return ms / 1e3

    def _roofline_attention_s(self, items: Sequence[PrefillItem], seqs: int, ctx: int) -> float:
        hw = self.scaling.target
        step = cost.step_cost(self.model, items, seqs, ctx, self.tp)
        ops = [op for op in step.ops if op.name.startswith("attention")]
        total = sum(max(op.flops / (hw.bf16_tflops * 1e12 * self.mfu),
                        op.bytes / (hw.hbm_gbps * 1e9 * self.mbu)) for op in ops)
        return total / self.model.num_layers

    def _per_token_s(self, tokens: int) -> float:
        """Everything in a step that depends only on its token count (all layers)."""
        key = ("tokens", tokens)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        m = self.model
        moe_layers = spec.num_moe_layers(m)
        dense_layers = m.num_layers - moe_layers
        per_layer_common = (self._projections_s(tokens) + self._elementwise_s(tokens)
                            + spec.ACTIVATION_ALL_REDUCES_PER_LAYER * self._allreduce_s(tokens))
        total = (m.num_layers * per_layer_common + dense_layers * self._ffn_s(tokens, False)
                 + self._qk_norm_stats_s(tokens))
        if moe_layers:
            total += moe_layers * self._ffn_s(tokens, True)
        self._remember(key, total)
        return total

    # -- attention DP (dp_attention.py): one DP rank's part of a step, the MoE experts apart --
    def rank_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        """One DP rank's share of a step (its own prompts and decodes): every layer's
        projections, norms, attention and TP all-reduce, the dense layers' FFN (and its
        all-reduce), the MoE layers' router and shared experts, the LM head. Not the routed
        experts (moe_experts_s) nor the exchange around them, nor the per-step overhead."""
        tokens = sum(n for n, _ in items) + num_seqs
        if tokens <= 0:
            return 0.0
        return self.rank_fixed_s(tokens, len(items) + num_seqs) + self._attention_layers_s(items, num_seqs, context_tokens)

    def rank_fixed_s(self, tokens: int, seqs: int) -> float:
        """rank_s without attention: what depends on the rank's token and sequence counts only."""
        key = ("rank", tokens, seqs)
        fixed = self._memo.get(key)
        if fixed is None:
            m = self.model
            moe_layers = spec.num_moe_layers(m)
            dense_layers = m.num_layers - moe_layers
            common = self._projections_s(tokens) + self._elementwise_s(tokens) + self._allreduce_s(tokens)
            dense = self._ffn_s(tokens, False) + self._allreduce_s(tokens) if dense_layers else 0.0
            moe = self._router_shared_s(tokens) if moe_layers else 0.0
            fixed = (m.num_layers * common + dense_layers * dense + moe_layers * moe + self._lm_head_s(seqs)
                     + self._qk_norm_stats_s(tokens))
            self._remember(key, fixed)
        return fixed

    @property
    def table_decode(self) -> bool:
        """Decode attention is one generation-table lookup at the mean KV length (the compiled
        TableStep's formula): own tables, full-attention layers only."""
        return self._generation is not None and self.scaling.same and not self._mixed_layers  # type: ignore[attr-defined]

    def generation_ms(self, seqs: int, mean_context: float) -> float:
        """One layer's decode attention (ms) of `seqs` sequences at a mean KV length."""
        return self._generation.at_second(seqs, max(mean_context, 1.0))  # type: ignore[attr-defined, no-any-return]

    def generation_row(self, seqs: int) -> Row:
        return self._generation.second_row(seqs)  # type: ignore[attr-defined, no-any-return]

    def _attention_layers_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        """Attention of every layer: full layers from the tables, sliding-window layers at the
        window (layer_kinds.window_pairs), linear-attention layers by their roofline."""
        m = self.model
        attention = self._prefill_attention_s(items) + self._decode_attention_s(num_seqs, context_tokens)
        mla = 0.0 if self._mla is None else self.mla_split_s(sum(n + c for n, c in items), num_seqs)  # type: ignore[attr-defined]
        if not self._mixed_layers:  # type: ignore[attr-defined]
            return m.num_layers * attention + mla
        total = spec.num_full_attention_layers(m) * attention
        if m.num_sliding_layers:
            window = m.sliding_window_tokens
            prefill = (self._prefill_attention_s(items) * window_pairs(items, window) / cost.attention_pairs(items)
                       if items else 0.0)
            total += m.num_sliding_layers * (prefill + self._decode_attention_s(num_seqs, min(context_tokens, window * num_seqs)))
        if m.num_linear_attention_layers:
            total += m.num_linear_attention_layers * linear_attention_layer_s(
                m, self.scaling.target, self.tp, items, num_seqs, self.mfu, self.mbu)
        return total + mla

    def mla_split_s(self, prompt_kv_tokens: int, decode_seqs: int) -> float:
        """Every MLA layer's phase-specific projections: kv_b over the prompt tokens, the
        absorbed BMMs of the decode tokens (mla.py); 0 for other attention."""
        if self._mla is None or prompt_kv_tokens + decode_seqs <= 0:  # type: ignore[attr-defined]
            return 0.0
        key = ("mla", prompt_kv_tokens, decode_seqs)
        hit = self._memo.get(key)
        if hit is None:
            hit = self.model.num_layers * self._mla.split_s(prompt_kv_tokens, decode_seqs)  # type: ignore[attr-defined]
            self._remember(key, hit)
        return hit

    def moe_experts_s(self, tokens: int) -> float:
        """The routed experts of every MoE layer over all `tokens` tokens of the instance."""
        if tokens <= 0:
            return 0.0
        key = ("experts", tokens)
        hit = self._memo.get(key)
        if hit is None:
            hit = spec.num_moe_layers(self.model) * self._experts_s(tokens)
            self._remember(key, hit)
        return hit

    def _lm_head_s(self, seqs: int) -> float:
        key = ("lm_head", seqs)
        hit = self._memo.get(key)
        if hit is None:
            hit = self.gemm_s(seqs, self.model.vocab_size / self.tp, self.model.hidden_size)
            self._remember(key, hit)
        return hit

    def _remember(self, key: tuple, value: float) -> None:
        if len(self._memo) >= _MEMO_ENTRIES:
            self._memo.clear()
        self._memo[key] = value

    # -- LatencyModel ----------------------------------------------------------------------
    def step_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        tokens = sum(n for n, _ in items) + num_seqs
        if tokens <= 0:
            return 0.0
        seqs = len(items) + num_seqs
        attention = self._attention_layers_s(items, num_seqs, context_tokens)
        lm_head = self._lm_head_s(seqs)
        return (self._per_token_s(tokens) + attention + lm_head
                + self.overhead_s + self.overhead_per_seq_s * seqs)

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        key = ("prefill", tuple(items))
        hit = self._memo.get(key)
        if hit is None:
            hit = self.step_time_s(items, 0, 0)
            self._remember(key, hit)
        return hit

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        if self._generation is None or self._mixed_layers:  # type: ignore[attr-defined]
            return self.step_time_s((), num_seqs, context_tokens)
        return self._decode_fixed_s(num_seqs) + self.model.num_layers * self._decode_attention_s(num_seqs, context_tokens)

    def _decode_fixed_s(self, num_seqs: int) -> float:
        """The part of a decode step that does not depend on the context."""
        return (self._per_token_s(num_seqs) + self._lm_head_s(num_seqs) + self.mla_split_s(0, num_seqs)
                + self.overhead_s + self.overhead_per_seq_s * num_seqs)

    def decode_step(self, num_seqs: int) -> DecodeStep:
        """decode_time_s(num_seqs, ctx) as a compiled function of ctx: the context-free part, the
        layer count and the generation table's row at this batch size (LogGrid.second_row), which
        TableStep interpolates as at_second does. Called once a step where the step is not that
        (no generation table, or tables scaled from another GPU: a ratio per context)."""
        if self._generation is None or not self.scaling.same or self._mixed_layers:  # type: ignore[attr-defined]
            return CallStep(num_seqs, self.decode_time_s)
        return TableStep(num_seqs, self._decode_fixed_s(num_seqs), self.model.num_layers,
                         *self._generation.second_row(num_seqs))  # type: ignore[attr-defined]

    def prefill_timer(self) -> PrefillTimer:
        return self.prefill_time_s

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        if not items:
            return self.decode_time_s(num_seqs, context_tokens)
        return self.step_time_s(items, num_seqs, context_tokens)


def build_measured(
    perf: PerfConfig, model: ModelConfig, hardware: HardwareConfig, parallel: Parallel
) -> MeasuredModel:
    """The measured model of one instance (one DP rank's TP group when parallel.dp > 1:
    dp_attention.py composes the ranks) for `hardware` (its op_tables, scaled from
    op_tables_hardware)."""
    from pdsim.perf.catalog import load_hardware  # catalog imports config only; no cycle

    needs = needed_tables(model) + (("nccl",) if parallel.dp > 1 else ())  # DP ranks meet over NCCL
    name = resolve_set(hardware.op_tables, perf.engine, perf.engine_version, needs)
    tables = with_moe_of(load_tables(name), perf.moe_table_set)
    fallback = moe_fallback_of(load_tables(name), perf.moe_fallback_table)
    reference = load_hardware(hardware.op_tables_hardware) if hardware.op_tables_hardware else hardware
    gpu = "a100" if hardware.op_tables.startswith("a100") else "h100"
    return MeasuredModel(
        model, parallel.tp, tables, Scaling(hardware, reference), gpu, VIDUR_HBM_GBPS[gpu],
        overhead_s=perf.overhead_s, overhead_per_seq_s=perf.overhead_per_seq_s,
        mfu=perf.mfu, mbu=perf.mbu, moe_ep=parallel.moe_ep, moe_gpus=parallel.gpus,
        moe_distribution=perf.moe_distribution, moe_fallback=fallback,
        moe_fallback_below_tokens=perf.moe_fallback_below_tokens,
    )
