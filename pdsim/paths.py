"""Where bundled configs and external data live."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SCENARIOS_DIR = REPO_ROOT / "scenarios"


def default_data_dir() -> Path:
    """$PDSIM_DATA_DIR, else the `shared/data` folder beside the checkout."""
    env = os.environ.get("PDSIM_DATA_DIR")
    if env:
        return Path(env)
    return REPO_ROOT.parent / "shared" / "data"


def resolve_data_path(path: str, data_dir: str = "") -> Path:
    """Absolute paths stay; relative paths resolve against data_dir (or the default)."""
    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    base = Path(data_dir) if data_dir else default_data_dir()
    return base / p
