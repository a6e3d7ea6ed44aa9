"""The policy seam must stay importable by pdreal without the simulator or engine stacks."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pdsim.policy

BANNED = ("simpy", "torch", "zmq", "random", "time", "pdsim.sim", "pdreal")
POLICY_DIR = Path(pdsim.policy.__file__).parent


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


def test_policy_modules_import_nothing_banned() -> None:
    offenders = [
        (path.name, name)
        for path in sorted(POLICY_DIR.glob("*.py"))
        for name in _imports(path)
        if any(name == b or name.startswith(b + ".") for b in BANNED)
    ]
    assert offenders == []


def test_importing_policy_loads_no_heavy_module() -> None:
    code = (
        "import sys, pdsim.policy\n"
        "bad = [m for m in ('simpy', 'torch', 'zmq') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
