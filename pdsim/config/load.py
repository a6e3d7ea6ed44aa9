"""The root `Config`, its registration with hydra's ConfigStore, and the one conversion of a composed
config into the dataclass tree with the range checks a schema type cannot express."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pdsim.config.cluster import ClusterConfig, KVTiersConfig
from pdsim.config.engine import FaultConfig, PerfConfig, PolicyConfig, SloConfig
from pdsim.config.machine import HardwareConfig, ModelConfig
from pdsim.config.missing import MISSING
from pdsim.config.search import FrontierConfig, PlanConfig, SearchConfig
from pdsim.config.workload import ScenarioConfig
from pdsim.policy.dp_dispatch import check_dispatch

if TYPE_CHECKING:
    from omegaconf import DictConfig


@dataclass
class Config:
    scenario: ScenarioConfig = MISSING
    model: ModelConfig = MISSING
    hardware: HardwareConfig = MISSING
    cluster: ClusterConfig = MISSING
    policy: PolicyConfig = MISSING
    slo: SloConfig = MISSING
    perf: PerfConfig = MISSING
    kv_tiers: KVTiersConfig = field(default_factory=KVTiersConfig)
    faults: FaultConfig = field(default_factory=FaultConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    plan: PlanConfig = field(default_factory=PlanConfig)
    frontier: FrontierConfig = field(default_factory=FrontierConfig)
    seed: int = 0
    data_dir: str = ""  # where relative trace/calibration paths resolve; "" = auto (../shared/data)
    progress: bool = True
    record_token_times: bool = False
    # advance a decode batch several iterations per event while its membership cannot change
    # (identical results; false = one event per iteration, the reference path)
    skip_ahead: bool = True
    timeseries_interval_s: float = 1.0
    max_sim_time_s: float = 0.0  # 0 = run until every request is done
    report: bool = False  # also write an HTML/markdown run report into the output dir

GROUPS: dict[str, type] = {
    "scenario": ScenarioConfig,
    "model": ModelConfig,
    "hardware": HardwareConfig,
    "cluster": ClusterConfig,
    "policy": PolicyConfig,
    "slo": SloConfig,
    "perf": PerfConfig,
    "kv_tiers": KVTiersConfig,
}


def register_configs() -> None:
    """Register the schemas with hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schema in GROUPS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)


def to_config(cfg: DictConfig | dict[str, Any]) -> Config:
    """Convert a composed config into the dataclass tree (done once, at the boundary)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigKeyError

    # a key the schema does not have (`+unknown.key=1`) is an error, not ignored
    if isinstance(cfg, DictConfig):  # composed against the schema: only `+` keys can be unknown
        unknown = _unknown_key(cfg, Config, "")
        if unknown:
            raise ValueError(f"unknown config key {unknown!r} (not in the schema, pdsim/config/)")
        obj = OmegaConf.to_object(cfg)
    else:
        try:
            obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), cfg))
        except ConfigKeyError as exc:
            raise ValueError(f"unknown config key {exc.full_key!r} (not in the schema, pdsim/config/)") from None
    if not isinstance(obj, Config):
        raise TypeError(f"composed config is {type(obj).__name__}, expected Config")
    _apply_total_instances(obj.cluster)
    if not obj.cluster.token_delivery_s >= 0:
        raise ValueError(f"cluster.token_delivery_s must be >= 0, got {obj.cluster.token_delivery_s}")
    validate_values(obj)
    if obj.slo.tpot_definition == "tbt_mooncake":
        obj.record_token_times = True  # Mooncake's TBT is computed from the token times
    return obj


def _unknown_key(node: DictConfig, schema: type, prefix: str) -> str:
    """The first key of `node` (dotted, from the root) that dataclass `schema` has no field for;
    "" when none. A walk over the keys: a structured merge would cost ~25 ms per run."""
    from omegaconf import DictConfig

    hints = typing.get_type_hints(schema)
    for key in node:
        name = f"{prefix}{str(key)}"
        if key not in hints:
            return name
        child = node._get_node(key)
        if dataclasses.is_dataclass(hints[key]) and isinstance(child, DictConfig) and not child._is_none():
            unknown = _unknown_key(child, hints[key], f"{name}.")
            if unknown:
                return unknown
    return ""


def validate_values(cfg: Config) -> None:
    """Range checks a schema type cannot express (one-line errors naming group, field, value)."""
    for name in ("tokenize_s_per_token", "tokenize_threads"):
        if not getattr(cfg.cluster, name) >= 0:
            raise ValueError(f"cluster: field {name!r} must be >= 0, got {getattr(cfg.cluster, name)}")
    s = cfg.slo
    for name in ("ttft_s", "tpot_s"):
        if not getattr(s, name) > 0:
            raise ValueError(f"slo: field {name!r} must be > 0, got {getattr(s, name)}")
    if not 0 < s.attainment_target <= 1:
        raise ValueError(f"slo: field 'attainment_target' must be in (0, 1], got {s.attainment_target}")
    choices = {"ttft_definition": ("standard", "prefill_end"), "criterion": ("joint", "percentiles"),
               "tpot_definition": ("standard", "distserve", "tbt_mooncake")}
    for name, allowed in choices.items():
        if getattr(s, name) not in allowed:
            raise ValueError(f"slo: field {name!r} has unknown value {getattr(s, name)!r} (choose from {allowed})")
    c = cfg.cluster
    _validate_moe_table_set(cfg, "perf", "moe_table_set", cfg.perf.moe_table_set)
    for side in ("colocated",) if c.mode == "colocated" else ("prefill", "decode"):
        c.parallel(side).validate(cfg.model.num_heads, cfg.model.num_experts, cfg.model.name, f"{side}_")
        _validate_moe_table_set(cfg, "cluster", f"{side}_moe_table_set", getattr(c, f"{side}_moe_table_set"))
    if c.prefix_cache_tokens < 0:
        raise ValueError(f"cluster: field 'prefix_cache_tokens' must be >= 0, got {c.prefix_cache_tokens}")
    check_dispatch(c.prefill_dp_dispatch)
    _validate_precision(cfg.model)
    _validate_layer_kinds(cfg.model)
    if cfg.search.max_probes < 2:
        raise ValueError(f"search: field 'max_probes' must be >= 2, got {cfg.search.max_probes}")


def _validate_moe_table_set(cfg: Config, group: str, field_name: str, name: str) -> None:
    """An MoE table set (perf.moe_table_set, or a side's own) is a measured set of the hardware's
    GPU (its op_tables)."""
    if not name:
        return
    from pdsim.perf.optables import sets_of_system  # the tables' index: no config import, no cycle

    have = sets_of_system(cfg.hardware.op_tables)
    if name not in have:
        raise ValueError(f"{group}: field '{field_name}' has unknown value {name!r} for hardware "
                         f"{cfg.hardware.name} (its table sets: {have})")

GEMM_QUANTS = ("", "bf16", "fp8", "fp8_block", "nvfp4", "int4_wo")
MOE_QUANTS = (*GEMM_QUANTS, "w4a16_mxfp4", "w4a8_mxfp4_mxfp8")
KV_DTYPES = ("", "bf16", "fp16", "fp8")


def _validate_precision(model: ModelConfig) -> None:
    for name, allowed in (("gemm_quant", GEMM_QUANTS), ("moe_quant", MOE_QUANTS), ("kv_dtype", KV_DTYPES)):
        if getattr(model, name) not in allowed:
            raise ValueError(f"model: field {name!r} has unknown value {getattr(model, name)!r} "
                             f"(choose from {allowed})")


def _validate_layer_kinds(model: ModelConfig) -> None:
    """Sliding and linear-attention layers fit in num_layers and carry the shape they need."""
    m = model
    if not 0 <= m.num_sliding_layers + m.num_linear_attention_layers <= m.num_layers:
        raise ValueError(f"model: num_sliding_layers ({m.num_sliding_layers}) + num_linear_attention_layers "
                         f"({m.num_linear_attention_layers}) must be in [0, num_layers={m.num_layers}]")
    if m.num_sliding_layers and m.sliding_window_tokens < 1:
        raise ValueError(f"model: num_sliding_layers={m.num_sliding_layers} needs sliding_window_tokens >= 1, "
                         f"got {m.sliding_window_tokens}")
    shape = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
             "linear_conv_kernel_dim")
    bad = [name for name in shape if getattr(m, name) < 1]
    if m.num_linear_attention_layers and bad:
        raise ValueError(f"model: num_linear_attention_layers={m.num_linear_attention_layers} needs {bad} >= 1")
    if m.linear_state_dtype not in KV_DTYPES + ("fp32",):
        raise ValueError(f"model: field 'linear_state_dtype' has unknown value {m.linear_state_dtype!r} "
                         f"(choose from {KV_DTYPES + ('fp32',)})")
    if m.sparse_attention_topk < 0:
        raise ValueError(f"model: field 'sparse_attention_topk' must be >= 0, got {m.sparse_attention_topk}")


def _apply_total_instances(cluster: ClusterConfig) -> None:
    if cluster.total_instances <= 0:
        return
    decode = cluster.total_instances - cluster.prefill
    if decode < 1:
        raise ValueError(
            f"cluster.total_instances={cluster.total_instances} leaves no decode instance "
            f"for cluster.prefill={cluster.prefill}"
        )
    cluster.decode = decode
