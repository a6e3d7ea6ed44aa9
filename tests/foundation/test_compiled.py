"""The compiled simulator core (setup.py, mypyc) and its pure-Python sources (pdsim/compiled.py).

CI installs with PDSIM_REQUIRE_COMPILED=1 (scripts/dev.sh test): there the core must be compiled
and give byte-identical outputs to its sources; elsewhere the compiled-only checks are skipped.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdsim.compiled import PACKAGES, SourceFirst, stale_modules

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = os.environ.get("PDSIM_REQUIRE_COMPILED") == "1"
PROBE = "import pdsim, pdsim.compiled as c, pdsim.policy.router_policy as r; print(c.core_compiled(), r.__file__)"


def probe(pure: bool) -> tuple[bool, str]:
    env = {k: v for k, v in os.environ.items() if k != "PDSIM_PURE_PYTHON"}
    if pure:
        env["PDSIM_PURE_PYTHON"] = "1"
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True, capture_output=True, text=True)
    compiled, where = out.stdout.split()
    return compiled == "True", where


def compiled_here() -> bool:
    return probe(pure=False)[0]


def test_pure_python_imports_the_sources() -> None:
    compiled, where = probe(pure=True)
    assert not compiled
    assert where.endswith("pdsim/policy/router_policy.py")


def test_ci_runs_the_compiled_core() -> None:
    if not REQUIRED:
        pytest.skip("PDSIM_REQUIRE_COMPILED is not set (only CI requires the compiled core)")
    compiled, where = probe(pure=False)
    assert compiled, f"pdsim.policy.router_policy came from {where}"
    assert not stale_modules(ROOT / "pdsim")


def test_compiled_and_pure_outputs_are_byte_identical() -> None:
    """Every small case of benchmarks/sim_outputs.py (all scenarios, policies, perf models, KV
    tiers, faults, rebalancing, colocated) run by the compiled core and by its sources."""
    if not compiled_here():
        if REQUIRED:
            pytest.fail("PDSIM_REQUIRE_COMPILED=1 but the simulator core is not compiled")
        pytest.skip("the simulator core is not compiled here")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sim_outputs.py"), "--pure", "--quick"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "all outputs identical" in out.stdout
    assert "(compiled core)" in out.stdout and "(pure Python core)" in out.stdout


def test_white_box_tests_on_the_sources() -> None:
    """The tests that patch the core's functions (marked source_core; conftest.py skips them where
    the core is compiled) pass on its sources."""
    if not compiled_here():
        pytest.skip("the core is not compiled: the source_core tests ran in this process")
    env = {**os.environ, "PDSIM_PURE_PYTHON": "1"}
    out = subprocess.run([sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-p", "no:cacheprovider", "-m", "source_core",
                          str(ROOT / "tests" / "sim")], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    passed = [line for line in out.stdout.splitlines() if " passed" in line]
    assert passed and int(passed[-1].split()[0]) >= 9, out.stdout[-1000:]


def test_an_edited_source_is_stale(tmp_path: Path) -> None:
    """A source newer than its compiled module (by over a second) is reported; an older one or one
    with no compiled module is not."""
    folder = tmp_path / "sim"
    folder.mkdir()
    (tmp_path / "policy").mkdir()
    for name, source_age_s, built_age_s in (("fresh", 100, 50), ("edited", 10, 50), ("plain", 10, None)):
        source = folder / f"{name}.py"
        source.write_text("")
        os.utime(source, (1e9 - source_age_s, 1e9 - source_age_s))
        if built_age_s is not None:
            built = folder / f"{name}.cpython-311-x86_64-linux-gnu.so"
            built.write_bytes(b"")
            os.utime(built, (1e9 - built_age_s, 1e9 - built_age_s))
    assert stale_modules(tmp_path) == ["pdsim.sim.edited"]


def test_source_first_finds_only_the_core_packages() -> None:
    finder = SourceFirst()
    assert finder.find_spec("pdsim.trace", [str(ROOT / "pdsim")]) is None
    assert finder.find_spec("pdsim.simulation", [str(ROOT / "pdsim")]) is None
    spec = finder.find_spec("pdsim.sim.span", [str(ROOT / "pdsim" / "sim")])
    assert spec is not None and spec.origin == str(ROOT / "pdsim" / "sim" / "span.py")
    package = finder.find_spec("pdsim.policy", [str(ROOT / "pdsim")])
    assert package is not None and package.origin == str(ROOT / "pdsim" / "policy" / "__init__.py")
    steps = finder.find_spec("pdsim.perf.steps.decode", [str(ROOT / "pdsim" / "perf" / "steps")])
    assert steps is not None and steps.origin == str(ROOT / "pdsim" / "perf" / "steps" / "decode.py")
    assert finder.find_spec("pdsim.perf.roofline", [str(ROOT / "pdsim" / "perf")]) is None
    assert PACKAGES == ("pdsim.sim", "pdsim.policy", "pdsim.perf.steps")


def test_a_source_that_differs_from_the_build_is_stale_whatever_its_time(tmp_path: Path) -> None:
    """With the build's manifest of source hashes, content decides: a source edited while the build
    ran (its compiled module newer than the edit) is stale; an untouched one with a newer time is not."""
    import hashlib
    import json

    folder = tmp_path / "sim"
    folder.mkdir()
    (tmp_path / "policy").mkdir()
    recorded = {}
    for name, built_content, now_content in (("same", "a = 1\n", "a = 1\n"), ("edited", "a = 1\n", "a = 2\n")):
        recorded[f"pdsim/sim/{name}.py"] = hashlib.sha256(built_content.encode()).hexdigest()
        source = folder / f"{name}.py"
        source.write_text(now_content)
        os.utime(source, (1e9, 1e9))  # (older than the build for "edited", newer for "same")
        built = folder / f"{name}.cpython-311-x86_64-linux-gnu.so"
        built.write_bytes(b"")
        os.utime(built, (1e9 + (100 if name == "edited" else -100),) * 2)
    (folder / "added.py").write_text("")  # a source the build never saw
    (folder / "added.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    steps = tmp_path / "perf" / "steps"  # (a compiled package inside a pure one: its path as the key)
    steps.mkdir(parents=True)
    recorded["pdsim/perf/steps/decode.py"] = hashlib.sha256(b"b = 1\n").hexdigest()
    for name, content in (("decode", "b = 1\n"), ("prefill", "b = 2\n")):
        (steps / f"{name}.py").write_text(content)
        (steps / f"{name}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (tmp_path / "_core_build.json").write_text(json.dumps(recorded))
    assert stale_modules(tmp_path) == ["pdsim.sim.added", "pdsim.sim.edited", "pdsim.perf.steps.prefill"]
