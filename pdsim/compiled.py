"""Which simulator core runs: the mypyc-compiled one (built by setup.py) or the pure-Python sources.

The compiled extension modules of pdsim/sim, pdsim/policy and pdsim/perf/steps sit next to their
sources and Python's import system prefers them. pdsim imports the sources instead when

- PDSIM_PURE_PYTHON=1: to profile with cProfile (it cannot see inside compiled functions), to
  debug, or to compare the two (CI checks that both give byte-identical outputs);
- a source differs from what the last build compiled: its hash is not the one setup.py recorded
  in `pdsim/_core_build.json` when the build read the sources (without that file: it is newer
  than its compiled module by over a second). The compiled code is not what is on disk, so it
  is not used, and a warning says to rebuild (`pip install -e .`, or `bash scripts/dev.sh
  test`). Hashes, not file times, because a build takes minutes: an edit made while it ran left
  a compiled module newer than the source it did not contain.

`select_core` runs once, when `pdsim` is first imported, before any of those modules is.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import logging
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGES = ("pdsim.sim", "pdsim.policy", "pdsim.perf.steps")
PURE_ENV = "PDSIM_PURE_PYTHON"
STALE_AFTER_S = 1.0  # a wheel unpacks sources and extensions within this of each other
MANIFEST = "_core_build.json"  # written by setup.py: {"pdsim/sim/x.py": sha256, ...}


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
    """Sources of PACKAGES under `root` (the pdsim package folder) that differ from what their
    compiled module was built from; [] when nothing is compiled."""
    manifest = _manifest(root / MANIFEST)
    stale = []
    for package in PACKAGES:
        parts = package.split(".")[1:]
        folder = root.joinpath(*parts)
        for source in sorted(folder.glob("*.py")):
            built = [p for p in folder.glob(source.stem + ".*") if p.suffix in (".so", ".pyd")]
            if built and _differs(source, built, manifest, "/".join(("pdsim", *parts, source.name))):
                stale.append(f"{package}.{source.stem}")
    return stale


def _manifest(path: Path) -> dict[str, str] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def _differs(source: Path, built: list[Path], manifest: dict[str, str] | None, key: str) -> bool:
    """Whether `source` is not what `built` was compiled from: by the build's recorded hash (a
    source the build did not record differs), else by file times."""
    if manifest is not None:
        return manifest.get(key) != hashlib.sha256(source.read_bytes()).hexdigest()
    return source.stat().st_mtime > min(p.stat().st_mtime for p in built) + STALE_AFTER_S


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
