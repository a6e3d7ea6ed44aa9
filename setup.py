"""Builds pdsim's simulator core (pdsim/sim, pdsim/policy, pdsim/perf/steps) as C extensions with mypyc.

The same modules run unchanged as pure Python: when the build cannot compile (no C compiler, no
Python headers, PDSIM_PURE_PYTHON=1) the install goes on without the extensions and says so;
PDSIM_REQUIRE_COMPILED=1 (CI) makes that an error. pdsim/compiled.py decides at import time
which of the two runs. Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
COMPILED_PACKAGES = ("pdsim/sim", "pdsim/policy", "pdsim/perf/steps")  # (steps: the perf models' hot paths)
MANIFEST = ROOT / "pdsim" / "_core_build.json"  # the sources' hashes as compiled (pdsim/compiled.py)


def _require() -> bool:
    return os.environ.get("PDSIM_REQUIRE_COMPILED") == "1"


def _skip(reason: str) -> list:
    if _require():
        sys.exit(f"pdsim: PDSIM_REQUIRE_COMPILED=1 but the simulator core cannot be compiled: {reason}")
    print(f"pdsim: building without the compiled simulator core ({reason}); pdsim runs as pure Python",
          file=sys.stderr)
    return []


def core_extensions() -> list:
    if os.environ.get("PDSIM_PURE_PYTHON") == "1":
        return _skip("PDSIM_PURE_PYTHON=1")
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        return _skip(f"mypyc is not installed: {exc}")
    sources = sorted(str(p.relative_to(ROOT)) for pkg in COMPILED_PACKAGES for p in (ROOT / pkg).glob("*.py"))
    _write_manifest(sources)
    try:  # mypy checks the types first (config: [tool.mypy] in pyproject.toml)
        return mypycify(sources, opt_level="3")
    except (SystemExit, Exception) as exc:  # mypy reports type errors by exiting
        MANIFEST.unlink(missing_ok=True)  # the hashes name sources no extension was built from
        return _skip(f"mypyc failed: {exc}")


def _write_manifest(sources: list[str]) -> None:
    """The hash of every source as the build reads it: an edit made while the build runs (minutes)
    leaves its compiled module older than the source by content, whatever the files' times say."""
    hashes = {src: hashlib.sha256((ROOT / src).read_bytes()).hexdigest() for src in sources}
    MANIFEST.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python (removing partial outputs) when compiling fails."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # noqa: BLE001 (any compiler failure means: no extensions)
            for ext in self.extensions:
                Path(self.get_ext_fullpath(ext.name)).unlink(missing_ok=True)
            MANIFEST.unlink(missing_ok=True)  # else older extensions would pass for these sources
            _skip(f"compiling failed: {exc}")


setup(ext_modules=core_extensions(), cmdclass={"build_ext": OptionalBuildExt})
