"""Extension points: commands and run reports that packages above pdsim provide.

pdsim sits below pdreal and analysis and imports neither. `pdsim report` and `pdsim fidelity`
(analysis) and the HTML report of `pdsim run report=true` (analysis) are found through package
entry points, declared in pyproject.toml:

    [project.entry-points."pdsim.commands"]     name -> callable(argv: list[str]) -> int
    [project.entry-points."pdsim.run_reports"]  name -> callable(trace, summary, timeseries, out_dir) -> Path
    [project.entry-points."pdsim.frontier_reports"]  name -> callable(points, meta, out_dir) -> Path

Entry points are read only when a command or report is asked for (no start-up cost).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

COMMANDS = "pdsim.commands"
RUN_REPORTS = "pdsim.run_reports"
FRONTIER_REPORTS = "pdsim.frontier_reports"


def plugin_commands() -> dict[str, Any]:
    """Commands other installed packages add to `pdsim`, by name (entry points, not loaded)."""
    from importlib.metadata import entry_points  # ~20 ms: only when a plugin is asked for

    return {ep.name: ep for ep in entry_points(group=COMMANDS)}


def run_report_writer(name: str = "html") -> Callable[..., Any]:
    """The run-report writer `name`; ValueError naming the field when none is installed."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=RUN_REPORTS)}
    if name not in found:
        raise ValueError(f"report: no run report {name!r} is installed (entry point group {RUN_REPORTS!r}; "
                         f"install the project with `pip install -e .`)")
    return found[name].load()


def frontier_report_writer(name: str = "html") -> Callable[..., Any]:
    """The `pdsim frontier` chart and page writer `name`; ValueError when none is installed."""
    from importlib.metadata import entry_points

    found = {ep.name: ep for ep in entry_points(group=FRONTIER_REPORTS)}
    if name not in found:
        raise ValueError(f"frontier: no frontier report {name!r} is installed (entry point group "
                         f"{FRONTIER_REPORTS!r}; install the project with `pip install -e .`)")
    return found[name].load()
