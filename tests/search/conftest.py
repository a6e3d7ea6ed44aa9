"""Compose configs from scenarios/ the way the CLI does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hydra import compose, initialize_config_dir

from pdsim.config import Config, register_configs, to_config
from pdsim.paths import SCENARIOS_DIR


@pytest.fixture(scope="session")
def compose_config() -> Callable[..., Config]:
    register_configs()

    def build(*overrides: str) -> Config:
        with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
            return to_config(compose("config", overrides=list(overrides)))

    return build
