"""Shared fixtures: where ../shared/data is, and a skip when it is absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdsim.paths import default_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = default_data_dir()
    if not (path / "traces").is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path
