"""Which simulator core runs: the mypyc-compiled one (built by setup.py) or the pure-Python sources.

The compiled extension modules of pdsim/sim and pdsim/policy sit next to their sources and
Python's import system prefers them. pdsim imports the sources instead when

- PDSIM_PURE_PYTHON=1: to profile with cProfile (it cannot see inside compiled functions), to
  debug, or to compare the two (CI checks that both give byte-identical outputs);
- a source was edited after the last build (newer than its compiled module by over a second):
  the compiled code is not what is on disk, so it is not used, and a warning says to rebuild
  (`pip install -e .`, or `bash scripts/dev.sh test`).

`select_core` runs once, when `pdsim` is first imported, before any of those modules is.
"""

from __future__ import annotations

import importlib.machinery
import logging
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGES = ("pdsim.sim", "pdsim.policy")
PURE_ENV = "PDSIM_PURE_PYTHON"
STALE_AFTER_S = 1.0  # a wheel unpacks sources and extensions within this of each other


class SourceFirst(MetaPathFinder):
    """Finds the modules of PACKAGES as .py sources only (never their compiled extensions)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: object = None) -> ModuleSpec | None:
        if not any(fullname == p or fullname.startswith(p + ".") for p in PACKAGES):
            return None
        loaders = [(importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)]
        for entry in path or ():
            spec = importlib.machinery.FileFinder(entry, *loaders).find_spec(fullname)
            if spec is not None:
                return spec
        return None


def stale_modules(root: Path) -> list[str]:
    """Sources of PACKAGES under `root` (the pdsim package folder) edited after their compiled
    module was built; [] when nothing is compiled."""
    stale = []
    for package in PACKAGES:
        folder = root / package.split(".", 1)[1]
        for source in sorted(folder.glob("*.py")):
            built = [p for p in folder.glob(source.stem + ".*") if p.suffix in (".so", ".pyd")]
            if built and source.stat().st_mtime > min(p.stat().st_mtime for p in built) + STALE_AFTER_S:
                stale.append(f"{package}.{source.stem}")
    return stale


def select_core() -> None:
    """Import PACKAGES from their sources when asked to or when the compiled modules are stale."""
    if any(isinstance(f, SourceFirst) for f in sys.meta_path):
        return
    if os.environ.get(PURE_ENV) == "1":
        sys.meta_path.insert(0, SourceFirst())
        return
    stale = stale_modules(Path(__file__).resolve().parent)
    if stale:
        log.warning("pdsim: the compiled simulator core is older than its sources (%s%s); running the "
                    "sources as pure Python (slower). Rebuild with `pip install -e .`.",
                    ", ".join(stale[:3]), " ..." if len(stale) > 3 else "")
        sys.meta_path.insert(0, SourceFirst())


def core_compiled() -> bool:
    """Whether the simulator core that runs is the compiled one."""
    import pdsim.sim.span as span  # the loaded module's file says which one was imported

    return not str(span.__file__).endswith(".py")
