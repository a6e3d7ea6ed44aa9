"""Fixtures for the perf tests: catalog entries and the calibration files (skipped when absent)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.paths import resolve_data_path
from pdsim.perf import catalog


def _calibration_file(name: str) -> Path:
    path = resolve_data_path(f"calibration/{name}")
    if not path.is_file():
        pytest.skip(f"calibration data not found: {path}")
    return path


@pytest.fixture(scope="session")
def calibration_file() -> Callable[[str], Path]:
    """`calibration_file(name)`: a file in the shared calibration data, or skip the test."""
    return _calibration_file


@pytest.fixture(scope="session")
def models() -> dict[str, ModelConfig]:
    return {name: catalog.load_model(name) for name in catalog.catalog_names("model")}


@pytest.fixture(scope="session")
def hardware() -> dict[str, HardwareConfig]:
    return {name: catalog.load_hardware(name) for name in catalog.catalog_names("hardware")}
