"""The GPU check's carried wheels (benchmarks/gpu/fetch_wheels.py) against pyproject.toml: the
GPU machine has no network, so a core dependency neither in its image nor carried fails every
check at import (as `mypy_extensions>=1.2`, which librt needs, did on the first GPU run)."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path
from types import ModuleType

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def fetch_wheels() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fetch_wheels", REPO / "benchmarks" / "gpu" / "fetch_wheels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def core_requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {canonicalize_name(r.name): r for r in map(Requirement, project["dependencies"])}


def test_every_core_dependency_is_in_the_image_or_carried() -> None:
    module = fetch_wheels()
    carried = {canonicalize_name(Requirement(pin).name) for pin in module.CORE}
    image = {canonicalize_name(name) for name in module.GPU_IMAGE_HAS}
    missing = sorted(set(core_requirements()) - carried - image)
    assert missing == [], f"core dependencies neither carried nor in the GPU image: {missing}"
    assert not carried & image, "a package is both carried and said to be in the image"


def test_carried_versions_satisfy_pyproject() -> None:
    core = core_requirements()
    for pin in fetch_wheels().CORE:
        carried = Requirement(pin)
        (version,) = [s.version for s in carried.specifier]
        wanted = core.get(canonicalize_name(carried.name))
        if wanted is not None:
            assert wanted.specifier.contains(version), f"{pin} does not satisfy pyproject's {wanted}"
