"""Load catalog entries (scenarios/model, scenarios/hardware, scenarios/perf) without hydra.

For tools outside a hydra run (`pdsim calibrate`, benchmarks, tests): each YAML is merged into
its schema dataclass, so the same type checks apply as at compose time.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from omegaconf import DictConfig, OmegaConf

from pdsim.config import HardwareConfig, ModelConfig, PerfConfig
from pdsim.paths import SCENARIOS_DIR

T = TypeVar("T")


def catalog_names(group: str, scenarios_dir: Path = SCENARIOS_DIR) -> list[str]:
    """Entry names in one group, sorted."""
    return sorted(p.stem for p in (scenarios_dir / group).glob("*.yaml"))


def _load(group: str, name: str, schema: type[T], scenarios_dir: Path) -> T:
    path = scenarios_dir / group / f"{name}.yaml"
    if not path.is_file():
        raise FileNotFoundError(
            f"no {group} named {name!r} ({path}); have {catalog_names(group, scenarios_dir)}"
        )
    raw = OmegaConf.load(path)
    if not isinstance(raw, DictConfig):
        raise ValueError(f"{path}: a {group} entry must be a mapping, got a list")
    if "defaults" in raw:
        raw.pop("defaults")
    merged = OmegaConf.merge(OmegaConf.structured(schema), raw)
    obj = OmegaConf.to_object(merged)
    if not isinstance(obj, schema):
        raise TypeError(f"{path}: converted to {type(obj).__name__}, expected {schema.__name__}")
    return obj


def load_model(name: str, scenarios_dir: Path = SCENARIOS_DIR) -> ModelConfig:
    return _load("model", name, ModelConfig, scenarios_dir)


def load_hardware(name: str, scenarios_dir: Path = SCENARIOS_DIR) -> HardwareConfig:
    return _load("hardware", name, HardwareConfig, scenarios_dir)


def load_perf(name: str, scenarios_dir: Path = SCENARIOS_DIR) -> PerfConfig:
    return _load("perf", name, PerfConfig, scenarios_dir)
