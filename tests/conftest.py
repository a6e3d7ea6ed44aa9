"""Shared fixtures: where ../shared/data is, and a skip when it is absent.

Tests marked `source_core` patch functions of the simulator core (pdsim/sim, pdsim/policy),
which its compiled build does not see: where the core runs compiled they are skipped here and
run on its pure-Python sources by tests/foundation/test_compiled.py, in one child pytest.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pdsim.compiled import core_compiled
from pdsim.paths import default_data_dir


@pytest.fixture(scope="session")
def data_dir() -> Path:
    path = default_data_dir()
    if not (path / "traces").is_dir():
        pytest.skip(f"shared data not found at {path}")
    return path


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "source_core: patches the simulator core's functions (runs on its sources)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not core_compiled():
        return
    skip = pytest.mark.skip(reason="patches the compiled core's functions: run on the sources by "
                                   "tests/foundation/test_compiled.py::test_white_box_tests_on_the_sources")
    for item in items:
        if "source_core" in item.keywords:
            item.add_marker(skip)
