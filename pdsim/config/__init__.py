"""Structured config schema for the `scenarios/` hydra tree.

Each hydra group has one dataclass here, registered in hydra's ConfigStore as
`base_<group>`; every YAML in `scenarios/<group>/` lists that schema first in its defaults, so
a misspelt key or a wrong type fails at compose time. Schema dataclasses are *not* frozen
(hydra merges into them); `to_config` converts the composed DictConfig once into these
objects and the domain code never sees a DictConfig.

One module per concern: workload (scenario), machine (model, hardware), cluster (cluster,
kv_tiers), engine (policy, slo, perf, faults), search (search, plan, frontier), load (the root
Config, registration, conversion and range checks).
"""

from pdsim.config.cluster import ClusterConfig, KVTiersConfig
from pdsim.config.engine import FaultConfig, PerfConfig, PolicyConfig, SloConfig
from pdsim.config.load import (
    GEMM_QUANTS,
    GROUPS,
    KV_DTYPES,
    MOE_QUANTS,
    Config,
    register_configs,
    to_config,
    validate_values,
)
from pdsim.config.machine import HardwareConfig, ModelConfig
from pdsim.config.missing import MISSING
from pdsim.config.search import FrontierConfig, PlanConfig, SearchConfig
from pdsim.config.workload import LengthDist, PrefixConfig, ScenarioConfig

__all__ = [
    "GEMM_QUANTS", "GROUPS", "KV_DTYPES", "MISSING", "MOE_QUANTS", "ClusterConfig", "Config", "FaultConfig",
    "FrontierConfig", "HardwareConfig", "KVTiersConfig", "LengthDist", "ModelConfig", "PerfConfig", "PlanConfig",
    "PolicyConfig", "PrefixConfig", "ScenarioConfig", "SearchConfig", "SloConfig", "register_configs", "to_config",
    "validate_values",
]
