"""Step-latency models and model/GPU derived quantities (see base.py for the interface).

Kinds (`perf.kind`): linear (hand-set constants), roofline (specs x efficiencies, roofline.py),
fitted (DistServe's formula from a profile JSON, fitted.py), table (interpolated measurements,
table.py; CSV formats in profile.py), measured (public per-operator tables composed into steps,
measured.py / optables.py; roofline fallback for hardware without tables). `pdsim calibrate` (calibrate.py) fits roofline or fitted
parameters to a measured table.
"""

from __future__ import annotations

from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.parallel import MOE_A2A, Parallel
from pdsim.paths import resolve_data_path
from pdsim.perf.base import LatencyModel, PrefillItem, prefill_ranks_time_s
from pdsim.perf.capacity import instance_kv_capacity_tokens
from pdsim.perf.deepep import DeepEpMoe, load_deepep
from pdsim.perf.dp_attention import DataParallelModel
from pdsim.perf.fitted import FittedModel, load_fitted
from pdsim.perf.linear import LinearModel
from pdsim.perf.measured import MeasuredModel, build_measured
from pdsim.perf.overhead import PREFILL_HOST_MODES, StepOverheadModel
from pdsim.perf.roofline import RooflineModel
from pdsim.perf.spec import (
    active_param_count,
    kv_bytes_per_token,
    kv_bytes_per_token_per_rank,
    kv_capacity_tokens,
    num_moe_layers,
    param_count,
    weight_bytes,
)
from pdsim.perf.speculative import SpeculativeModel, accepted_tokens
from pdsim.perf.table import TableModel, load_table

PERF_KINDS = ("linear", "roofline", "fitted", "table", "measured")


def _require_path(perf: PerfConfig) -> None:
    if not perf.path:
        raise ValueError(
            f"perf: kind {perf.kind!r} needs field 'path' (a profile file under data_dir)"
        )


def build_latency_model(
    perf: PerfConfig, model: ModelConfig, hardware: HardwareConfig, tp: int | Parallel, data_dir: str = ""
) -> LatencyModel:
    """The latency model for one instance: `tp` GPUs, or a Parallel layout (attention DP and
    expert parallelism: perf.kind=measured only); relative paths resolve against data_dir. Plus
    the engine's per-step overhead when perf.*_step_overhead_s are set (overhead.py)."""
    parallel = tp if isinstance(tp, Parallel) else Parallel(tp)
    if not parallel.plain_tp and not (perf.kind == "measured" and hardware.op_tables):
        raise ValueError(f"perf: kind {perf.kind!r} models tensor parallelism only; layout {parallel.text} "
                         f"(attention DP / expert parallelism) needs perf.kind=measured on hardware with op_tables")
    if perf.moe_a2a not in MOE_A2A:
        raise ValueError(f"perf: field 'moe_a2a' must be one of {list(MOE_A2A)}, got {perf.moe_a2a!r}")
    inner = _step_model(perf, model, hardware, parallel, data_dir)
    if perf.prefill_host_s_per_moe_layer < 0:
        raise ValueError(
            f"perf: field 'prefill_host_s_per_moe_layer' must be >= 0, got {perf.prefill_host_s_per_moe_layer}")
    if perf.prefill_host_mode not in PREFILL_HOST_MODES:
        raise ValueError(f"perf: field 'prefill_host_mode' must be one of {list(PREFILL_HOST_MODES)}, "
                         f"got {perf.prefill_host_mode!r}")
    for name in ("prefill_graph_max_tokens", "prefill_graph_host_s_per_moe_layer"):
        if getattr(perf, name) < 0:
            raise ValueError(f"perf: field '{name}' must be >= 0, got {getattr(perf, name)}")
    prefill_floor_s = perf.prefill_host_s_per_moe_layer * num_moe_layers(model)
    graph_floor_s = perf.prefill_graph_host_s_per_moe_layer * num_moe_layers(model)
    host_s = prefill_floor_s + graph_floor_s
    if (perf.prefill_step_overhead_s, perf.decode_step_overhead_s) != (0, 0) or (
        perf.prefill_step_scale, perf.decode_step_scale) != (1, 1) or (
            perf.step_overhead_per_context_token_s, perf.decode_context_offset_tokens, host_s) != (0, 0, 0):
        inner = StepOverheadModel(inner, perf.prefill_step_overhead_s, perf.decode_step_overhead_s,
                                  perf.prefill_step_scale, perf.decode_step_scale,
                                  perf.step_overhead_per_context_token_s, perf.decode_context_offset_tokens,
                                  prefill_floor_s, perf.prefill_host_mode == "serial", perf.prefill_graph_max_tokens,
                                  graph_floor_s)
    accepted = accepted_tokens(perf.mtp_draft_tokens, perf.mtp_accepted_tokens)
    if perf.mtp_draft_tokens == 0:
        if perf.mtp_accepted_tokens != 0:
            raise ValueError(f"perf: field 'mtp_accepted_tokens' = {perf.mtp_accepted_tokens} needs mtp_draft_tokens >= 1")
        return inner
    if not 1 <= perf.mtp_draft_layers <= model.num_layers:
        raise ValueError(f"perf: field 'mtp_draft_layers' must be in [1, {model.num_layers}], got {perf.mtp_draft_layers}")
    return SpeculativeModel(inner, perf.mtp_draft_tokens, accepted, perf.mtp_draft_layers / model.num_layers)


def _step_model(
    perf: PerfConfig, model: ModelConfig, hardware: HardwareConfig, parallel: Parallel, data_dir: str
) -> LatencyModel:
    tp = parallel.tp
    if perf.kind == "linear":
        return LinearModel(
            prefill_base_s=perf.prefill_base_s,
            prefill_per_token_s=perf.prefill_per_token_s,
            decode_base_s=perf.decode_base_s,
            decode_per_seq_s=perf.decode_per_seq_s,
            decode_per_ctx_token_s=perf.decode_per_ctx_token_s,
        )
    if perf.kind == "measured" and hardware.op_tables:
        measured = build_measured(perf, model, hardware, parallel)
        if parallel.dp == 1:
            return measured
        deepep = None
        if parallel.moe_exchange and (parallel.moe_a2a or perf.moe_a2a) == "deepep":
            deepep = DeepEpMoe(load_deepep(measured.tables.source), measured.tables, model, parallel.moe_ep, hardware,
                               perf.moe_distribution)
        return DataParallelModel(measured, parallel.dp, hardware, deepep=deepep)
    if perf.kind in ("roofline", "measured"):  # measured without tables: the roofline fallback
        return RooflineModel(
            model,
            hardware,
            tp,
            mfu=perf.mfu,
            mbu=perf.mbu,
            overhead_s=perf.overhead_s,
            overhead_per_seq_s=perf.overhead_per_seq_s,
            comm_latency_s=perf.comm_latency_s,
        )
    if perf.kind == "fitted":
        _require_path(perf)
        return load_fitted(resolve_data_path(perf.path, data_dir), model.hf_name or model.name, tp,
                           batch_floor=perf.fitted_batch_floor)
    if perf.kind == "table":
        _require_path(perf)
        path = resolve_data_path(perf.path, data_dir)
        return load_table(
            path, perf.table_model or model.name, perf.table_hardware or hardware.name, tp
        )
    raise ValueError(
        f"perf: field 'kind' has unknown value {perf.kind!r} (choose from {PERF_KINDS})"
    )


__all__ = [
    "PERF_KINDS",
    "FittedModel",
    "LatencyModel",
    "LinearModel",
    "MeasuredModel",
    "PrefillItem",
    "RooflineModel",
    "StepOverheadModel",
    "TableModel",
    "active_param_count",
    "build_latency_model",
    "instance_kv_capacity_tokens",
    "kv_bytes_per_token",
    "kv_bytes_per_token_per_rank",
    "kv_capacity_tokens",
    "param_count",
    "prefill_ranks_time_s",
    "weight_bytes",
]
