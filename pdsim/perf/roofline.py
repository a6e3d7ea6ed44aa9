"""Roofline step latency from model shape and GPU specs.

time = overhead_s + overhead_per_seq_s * sequences in the step (scheduling, sampling)
     + Σ_op max(flops_op / (peak * mfu), bytes_op / (hbm_bw * mbu))   (per rank, see cost.py)
     + num_allreduces * (comm_latency_s + ring_bytes / link_bw)   (+ the q/k-norm statistics' all-reduces)

GEMMs run at the peak of their quant mode (`gemm_tflops`: FP8 for fp8 / fp8_block, FP4 for nvfp4,
BF16 for bf16 and int4 weight-only) when the GPU has it, else at the BF16 peak; weights are read
at the quant mode's bytes (spec.gemm_weight_bytes); attention runs at the BF16 peak. The all-reduce link is NVLink, or PCIe when the GPU has none.
A ring all-reduce moves 2 (tp - 1) / tp of the payload through each rank's link.

One formula per step: `step_cost` (cost.py) priced by `terms` is the general step (a mixed batch,
a mixture-of-experts prefill, and the context-free parts of a decode step). A decode step is
`decode_step(n)`, its context-dependent attention term inline around those parts; a dense prefill
is `prefill_step`, its batch sums inline around per-model factors (both compiled:
pdsim/perf/steps). decode_time_s and prefill_time_s call them, as the simulator does, so each
kind of step has one formula; tests/perf/test_steps.py holds them to the general step bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.perf import cost, spec
from pdsim.perf.base import PrefillItem, PrefillTimer
from pdsim.perf.steps.decode import RooflineRates, RooflineStep
from pdsim.perf.steps.prefill import RooflinePrefill, ring_allreduces_s

_PREFILL_MEMO_ENTRIES = 1 << 16  # bound on a model's memo of prefill batch shapes (~10 MB)


def gemm_tflops(model: ModelConfig, hw: HardwareConfig) -> float:
    """The dense peak a model's GEMMs run at: fp8 modes at the FP8 peak, nvfp4 at the FP4 peak
    (else FP8, else BF16: a GPU without the format emulates it no faster), int4 weight-only and
    bf16 at the BF16 peak; without gemm_quant, the FP8 peak for an fp8 checkpoint."""
    quant = model.gemm_quant or ("fp8" if model.dtype == "fp8" else "bf16")
    if quant == "nvfp4" and hw.fp4_tflops > 0:
        return hw.fp4_tflops
    if quant in ("fp8", "fp8_block", "nvfp4") and hw.fp8_tflops > 0:
        return hw.fp8_tflops
    return hw.bf16_tflops


@dataclass(frozen=True, slots=True)
class RooflineTerms:
    """A step's time at 100% efficiency: per-op (compute_s, memory_s), communication, sequences."""

    ops: tuple[tuple[float, float], ...]
    comm_s: float
    num_seqs: int

    def time_s(
        self, mfu: float, mbu: float, overhead_s: float, overhead_per_seq_s: float = 0.0
    ) -> float:
        busy = sum(max(c / mfu, m / mbu) for c, m in self.ops)
        return overhead_s + overhead_per_seq_s * self.num_seqs + busy + self.comm_s


@dataclass(frozen=True)
class RooflineModel:
    """Roofline latency for one instance of `tp` GPUs of `hardware` serving `model`."""

    model: ModelConfig
    hardware: HardwareConfig
    tp: int
    mfu: float = 0.5
    mbu: float = 0.7
    overhead_s: float = 0.003
    overhead_per_seq_s: float = 0.0
    comm_latency_s: float = 1.0e-5
    name: str = "roofline"

    def __post_init__(self) -> None:
        for field_name in ("mfu", "mbu"):
            value = getattr(self, field_name)
            if not 0.0 < value <= 1.0:
                raise ValueError(f"perf: field {field_name!r} must be in (0, 1], got {value}")
        if self.tp < 1:
            raise ValueError(f"tensor parallel size must be >= 1, got {self.tp}")
        # prefill_time_s by batch shape: a simulator asks for the same shapes again and again
        # (about half the calls on the Mooncake trace); the decode step of each batch size; the
        # dense prefill step, once asked for. Per instance, not fields (eq, repr).
        object.__setattr__(self, "_prefill_memo", {})
        object.__setattr__(self, "_decode_steps", {})
        object.__setattr__(self, "_prefill", None)

    def _gemm_flops_per_s(self) -> float:
        return gemm_tflops(self.model, self.hardware) * 1e12

    def _link_bytes_per_s(self) -> float:
        gbps = self.hardware.nvlink_gbps or self.hardware.pcie_gbps
        if gbps <= 0:
            raise ValueError(
                f"hardware {self.hardware.name}: no nvlink_gbps or pcie_gbps for TP all-reduce"
            )
        return gbps * 1e9

    def terms(self, step: cost.StepCost) -> RooflineTerms:
        """Split a step into per-op compute and memory times at peak, plus all-reduce time."""
        bf16 = self.hardware.bf16_tflops * 1e12
        gemm = self._gemm_flops_per_s()
        hbm = self.hardware.hbm_gbps * 1e9
        ops = tuple((op.flops / (gemm if op.gemm else bf16), op.bytes / hbm) for op in step.ops)
        comm_s = 0.0
        if step.num_allreduces:
            comm_s = self._allreduces_s(step.num_allreduces, step.allreduce_bytes)
        if step.num_stat_allreduces:
            comm_s = comm_s + self._allreduces_s(step.num_stat_allreduces, step.stat_allreduce_bytes)
        return RooflineTerms(ops, comm_s, step.num_seqs)

    def _allreduces_s(self, calls: int, payload_bytes: float) -> float:
        """`calls` ring all-reduces of `payload_bytes` each over the TP ranks."""
        return ring_allreduces_s(calls, payload_bytes, self.tp, self.comm_latency_s, self._link_bytes_per_s())

    def _time_s(self, step: cost.StepCost) -> float:
        if not step.ops:
            return 0.0
        return self.terms(step).time_s(self.mfu, self.mbu, self.overhead_s, self.overhead_per_seq_s)

    def rates(self) -> RooflineRates:
        """The rates and per-step costs the compiled steps take (no link needed at tp 1)."""
        hw = self.hardware
        return RooflineRates(
            self._gemm_flops_per_s(), hw.bf16_tflops * 1e12, hw.hbm_gbps * 1e9, self.mfu, self.mbu,
            self.overhead_s, self.overhead_per_seq_s, self.comm_latency_s,
            self._link_bytes_per_s() if self.tp > 1 else 0.0,
        )

    def decode_step(self, num_seqs: int) -> RooflineStep:
        """decode_time_s(num_seqs, ctx) as a compiled function of ctx: the operators other than
        decode attention priced once from the general step (summed in its order), attention
        inline (cost.attention_factors). num_seqs >= 1."""
        steps: dict[int, RooflineStep] = self._decode_steps  # type: ignore[attr-defined]
        step = steps.get(num_seqs)
        if step is None:
            fixed = cost.decode_cost(self.model, num_seqs, 0, self.tp)
            terms = self.terms(fixed)
            at = [op.name for op in fixed.ops].index("attention_decode")
            busy = [max(c / self.mfu, m / self.mbu) for c, m in terms.ops]
            head_s = 0.0
            for b in busy[:at]:
                head_s = head_s + b
            flops_per_pair, kv_bytes_per_token = cost.attention_factors(self.model, self.tp, True)
            step = RooflineStep(num_seqs, self.rates(), head_s, tuple(busy[at + 1:]), terms.comm_s,
                                float(flops_per_pair), kv_bytes_per_token, self.model.num_layers, self.tp)
            steps[num_seqs] = step
        return step

    def prefill_step(self) -> RooflinePrefill | None:
        """prefill_time_s of a dense model, compiled; None for a mixture of experts (its GEMM
        bytes depend on the tokens through the experts they touch: the general step prices it)."""
        if spec.num_moe_layers(self.model):
            return None
        step: RooflinePrefill | None = self._prefill  # type: ignore[attr-defined]
        if step is None:
            m, tp = self.model, self.tp
            ops = {op.name: op for op in cost.prefill_cost(m, [(1, 0)], tp).ops}  # (bytes: any batch's)
            gemm_flops = 2 * (spec.attention_params_per_layer(m) + spec.dense_ffn_params(m)) * m.num_layers
            step = RooflinePrefill(
                self.rates(), tp, (gemm_flops, ops["gemm_dense"].bytes),
                (2 * m.vocab_size * m.hidden_size, ops["lm_head"].bytes),
                cost.attention_factors(m, tp, False), m.num_layers, m.hidden_size, spec.tp_all_reduces(m, tp),
            )
            object.__setattr__(self, "_prefill", step)
        return step

    def prefill_timer(self) -> PrefillTimer:
        step = self.prefill_step()
        return self.prefill_time_s if step is None else step.time_s

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        key = tuple(items)
        memo: dict[tuple[PrefillItem, ...], float] = self._prefill_memo  # type: ignore[attr-defined]
        time_s = memo.get(key)
        if time_s is None:
            step = self.prefill_step()
            if step is None:
                time_s = self._time_s(cost.prefill_cost(self.model, key, self.tp))
            else:
                time_s = step.time_s(key)
            if len(memo) >= _PREFILL_MEMO_ENTRIES:
                memo.clear()
            memo[key] = time_s
        return time_s

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        return self.decode_step(num_seqs).time_s(context_tokens)

    def mixed_time_s(
        self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int
    ) -> float:
        return self._time_s(cost.step_cost(self.model, items, num_seqs, context_tokens, self.tp))
