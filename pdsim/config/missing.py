"""omegaconf.MISSING's value: the schema is read without importing omegaconf or hydra (they load
when a config is composed or converted; `import pdsim.run` stays light)."""

from __future__ import annotations

from typing import Any

MISSING: Any = "???"
