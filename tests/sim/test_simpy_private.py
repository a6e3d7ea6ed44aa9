"""Only pdsim.sim.events, the simpy adapter, uses simpy's internals: no other module of pdsim,
pdreal or analysis reads a private simpy attribute, imports from a simpy submodule or calls an
unbound simpy method. The check reads the sources (ast), so it holds for the compiled core too.

What counts as a use (`simpy_internals`):
- `x._name` where `_name` is one of simpy 4.1.2's private attributes (PRIVATE; a test checks it
  covers every one simpy's own source uses), or `getattr(x, "_name")` and its kin. `self._name`
  inside a class that does not subclass a simpy class is the class's own attribute, not simpy's.
- `from simpy.core import ...`, `import simpy.events`, `simpy.core.X`: simpy's public API is the
  `simpy` namespace (`simpy.__all__`); StopSimulation, EmptySchedule, NORMAL live in submodules.
- `Environment.step` (or any simpy class's `step`) unbound, `StopSimulation.callback`.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import simpy

ROOT = pathlib.Path(__file__).resolve().parents[2]
ADAPTER = ROOT / "pdsim" / "sim" / "events.py"
CHECKED = ("pdsim", "pdreal", "analysis")

PRIVATE = frozenset({
    # Environment
    "_queue", "_eid", "_now", "_active_proc",
    # Event, Timeout, Process, Condition, Initialize, Interruption
    "_ok", "_value", "_defused", "_delay", "_generator", "_resume", "_target", "_interrupt",
    "_events", "_count", "_evaluate", "_check", "_build_value", "_populate_value",
    "_remove_check_callbacks", "_desc",
    # resources, RealtimeEnvironment
    "_env", "_capacity", "_level", "_do_put", "_do_get", "_trigger_put", "_trigger_get", "_factor", "_strict",
    # module functions
    "_describe_frame", "_compile_toc",
})
UNBOUND = frozenset({"step", "callback"})  # Environment.step(env), StopSimulation.callback
SIMPY_CLASSES = frozenset(simpy.__all__) | {"StopSimulation", "EmptySchedule", "SimEnvironment"}
REFLECTION = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def simpy_internals(source: str) -> list[str]:
    """Each use of a simpy internal in `source`, as 'line: what'."""
    tree = ast.parse(source)
    own = _own_attributes(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        what = _internal(node, own)
        if what:
            found.append(f"{node.lineno}: {what}")
    return sorted(found, key=lambda s: int(s.split(":")[0]))


def _internal(node: ast.AST, own: set[int]) -> str | None:
    if isinstance(node, ast.Attribute):
        if node.attr in PRIVATE and id(node) not in own:
            return f"{ast.unparse(node)}"
        if node.attr in UNBOUND and _simpy_class(node.value):
            return f"unbound {ast.unparse(node)}"
        if isinstance(node.value, ast.Name) and node.value.id == "simpy" and node.attr.islower():
            return f"simpy submodule {ast.unparse(node)}"
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("simpy."):
        return f"from {node.module} import"
    if isinstance(node, ast.Import) and any(alias.name.startswith("simpy.") for alias in node.names):
        return "import of a simpy submodule"
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REFLECTION
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in PRIVATE):
        return f"{node.func.id}(..., {node.args[1].value!r})"
    return None


def _simpy_class(node: ast.expr) -> bool:
    """`node` names a simpy class: `Environment`, `simpy.Environment`, `StopSimulation` ..."""
    if isinstance(node, ast.Name):
        return node.id in SIMPY_CLASSES
    return isinstance(node, ast.Attribute) and node.attr in SIMPY_CLASSES


def _own_attributes(tree: ast.Module) -> set[int]:
    """The ids of `self._x` / `cls._x` nodes inside classes that do not subclass a simpy class."""
    own: set[int] = set()
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if any("simpy" in ast.unparse(base) or _simpy_class(base) for base in cls.bases):
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(id(node))
    return own


def _checked_sources() -> list[pathlib.Path]:
    return sorted(p for pkg in CHECKED for p in (ROOT / pkg).rglob("*.py") if p != ADAPTER)


def test_no_module_but_the_adapter_uses_simpy_internals() -> None:
    sources = _checked_sources()
    assert len(sources) > 100, f"found only {len(sources)} sources under {CHECKED} in {ROOT}"
    uses = {str(p.relative_to(ROOT)): simpy_internals(p.read_text()) for p in sources}
    assert {path: found for path, found in uses.items() if found} == {}, (
        "simpy's internals belong in pdsim/sim/events.py only: add a name of its own there")


# Each use the core had before the adapter (pdsim/sim/clock.py, process.py, span.py, run.py at d632975)
KNOWN_USES = [
    "self.simpy_heap = env._queue",
    "ids = env._eid",
    "self.clock_s = float(env._now)",
    "self.env._now = tick.time_s",
    "env._active_proc = process",
    "if self.env._active_proc is not process: pass",
    "generator = process._generator",
    "process._resume = resume",
    "process._target.callbacks.remove(process._resume)",
    "process._ok = True",
    "value = event._value",
    "event._defused = True",
    "counter = getattr(env, '_eid', None)",
    "ok = isinstance(getattr(env, '_queue', None), list)",
    "from simpy.core import EmptySchedule, Environment, SimTime, StopSimulation",
    "import simpy.events",
    "NORMAL = simpy.events.NORMAL",
    "Environment.step(self.env)",
    "simpy.Environment.step(env)",
    "callbacks.append(StopSimulation.callback)",
    "class Env(simpy.Environment):\n    def f(self):\n        return self._queue",
]


@pytest.mark.parametrize("snippet", KNOWN_USES)
def test_the_check_catches_each_known_use(snippet: str) -> None:
    assert simpy_internals(snippet), f"not caught: {snippet!r}"


@pytest.mark.parametrize("snippet", [
    "class Pool:\n    def __init__(self):\n        self._count = 0\n        self._events = []",
    "import simpy\nenv = simpy.Environment()\nenv.run(until=env.timeout(1.0))",
    "from simpy import Environment, Process\nproc: Process",
    "x = env.step()",
])
def test_the_check_leaves_own_attributes_and_simpys_public_api_alone(snippet: str) -> None:
    assert simpy_internals(snippet) == []


def test_the_adapter_holds_every_known_use() -> None:
    found = " ".join(simpy_internals(ADAPTER.read_text()))
    for name in ("_queue", "_eid", "_now", "_active_proc", "_generator", "_resume", "_target", "_ok", "_value",
                 "_defused", "from simpy.core import", "unbound Environment.step", "unbound StopSimulation.callback"):
        assert name in found, f"{name} is no longer used in {ADAPTER.name}: update its docstring and this test"


def test_the_private_names_cover_every_one_simpy_uses() -> None:
    simpy_dir = pathlib.Path(simpy.__file__).parent
    used: set[str] = set()
    for path in simpy_dir.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            elif isinstance(node, ast.FunctionDef):
                used.add(node.name)
    used = {name for name in used if name.startswith("_") and not name.startswith("__")}
    assert used - PRIVATE == set(), f"simpy {simpy.__version__} uses private names the check does not know"
