"""The layers, checked by walking every import (lazy ones inside functions included):

    analysis            (sim-vs-real comparison, reports, the fidelity loop)
    pdsim.sim  pdreal   (the two executors, side by side)
    pdsim.policy, pdsim.trace   (the shared seam and schema, at the bottom)

pdsim imports neither pdreal nor analysis (pdsim's `report`/`fidelity` commands and run reports
come from analysis through entry points, pdsim/plugins.py); pdreal does not import analysis; the
bottom imports nothing heavy or I/O-bound; `import pdsim.run` and the `pdsim` command load no
pandas, pyarrow or hydra (start-up: benchmarks/startup.py). No module imports itself back through
a chain, type-only imports included: tests/test_import_graph.py.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pdsim", "pdreal", "analysis")
BOTTOM = ("pdsim.policy", "pdsim.trace")
BOTTOM_ALLOWED = ("__future__", "collections", "dataclasses", "enum", "typing", "functools", "bisect", "heapq",
                  "itertools", "math", "zlib", "numpy", "json", "pathlib", "importlib",
                  "mypy_extensions", "librt.vecs", *BOTTOM)
# (mypy_extensions: mypyc_attr and i64, librt.vecs: unboxed arrays; both for the compiled core, pure data)
# the trace schema's own file I/O (write_trace / read_trace) imports these inside its functions
TRACE_IO = ("pandas", "pyarrow")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """Every node except those under `if TYPE_CHECKING:` (annotations only, never executed)."""
    out: list[ast.AST] = []
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        out.append(node)
        todo.extend(ast.iter_child_nodes(node))
    return out


def imports(path: Path, name: str) -> set[str]:
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            found.add(base)
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def test_packages_import_only_downwards() -> None:
    bad = []
    for name, path in modules().items():
        for imp in imports(path, name):
            if within(name, ("pdsim",)) and within(imp, ("pdreal", "analysis")):
                bad.append((name, imp))
            if within(name, ("pdreal",)) and within(imp, ("analysis",)):
                bad.append((name, imp))
    assert bad == []


def test_the_bottom_imports_nothing_heavy() -> None:
    bad = []
    for name, path in modules().items():
        if not within(name, BOTTOM):
            continue
        allowed = BOTTOM_ALLOWED + (TRACE_IO if name == "pdsim.trace" else ())
        bad += [(name, imp) for imp in imports(path, name) if not within(imp, allowed)]
    assert bad == []


def test_engines_load_no_pandas_or_simulator() -> None:
    code = ("import sys, pdreal.engine.prefill, pdreal.engine.decode, pdreal.engine.colocated\n"
            "print(','.join(m for m in ('pandas', 'pyarrow', 'simpy', 'pdsim.sim', 'analysis') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_http_and_router_processes_load_no_torch() -> None:
    """Only scheduler processes run the model: an instance's HTTP process and the router start
    without torch (seconds of start-up and ~150 MB each)."""
    code = ("import sys, pdreal.cli, pdreal.serving.instance, pdreal.serving.api, pdreal.serving.launch\n"
            "print(','.join(m for m in ('torch', 'pandas', 'simpy') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_run_and_cli_import_no_pandas_pyarrow_or_hydra() -> None:
    """`import pdsim.run` (every run, every sweep job) and `pdsim --help` stay light: pandas,
    pyarrow, hydra and omegaconf load in the code paths that use them (a proxy for start-up CPU
    time, which benchmarks/startup.py measures)."""
    code = ("import sys, pdsim.run, pdsim.cli\n"
            "print(','.join(m for m in ('pandas', 'pyarrow', 'hydra', 'omegaconf') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""
