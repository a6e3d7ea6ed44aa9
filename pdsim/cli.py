"""The `pdsim` command: a thin dispatcher over subcommands.

    pdsim run [overrides...]        simulate one configuration (hydra; --help lists the groups)
    pdsim plan [overrides...]       P:D split and TP per side for plan.gpus GPUs (planner)
    pdsim frontier [overrides...]   tokens/s/GPU vs tokens/s/user per deployment (hydra multirun)
    pdsim report TRACE [TRACE2]     run report, or sim-vs-real comparison report
    pdsim calibrate ...             fit a latency model to a profiled table
    pdsim fidelity [options]        profile + serve + replay pdreal, simulate the same requests, compare

Hydra-backed subcommands are checked first with hydra's compose API so that a typo, a wrong
type or an unknown scenario ends in one line on stderr and a non-zero exit, before hydra
creates any output directory.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pdsim.errors import one_line
from pdsim.hydra_task import run_once
from pdsim.plugins import plugin_commands

if TYPE_CHECKING:
    from pdsim.config import Config

USAGE = """usage: pdsim <command> [args]

commands:
  run         simulate one configuration:  pdsim run scenario=rag cluster.prefill=3 cluster.decode=5
              (pdsim run --help lists the config groups and their options)
  goodput     highest arrival rate meeting the SLOs (bisection):  pdsim goodput scenario=chat slo=strict
  sweep       goodput per grid point (hydra multirun):  pdsim sweep cluster.prefill=1,2,3 cluster.decode=1,2,3
              add hydra/launcher=joblib for local parallelism (or +sweep=<file> from scenarios/sweep/)
  plan        recommend the P:D split and TP per side for a GPU budget, vs the best colocated fleet:
              pdsim plan scenario=rag model=llama3_70b hardware=a800 perf=roofline plan.gpus=16
  frontier    output tokens/s per GPU against tokens/s per user for every colocated fleet and P:D split
              of frontier.gpus GPUs (closed-loop concurrency ladders, hydra multirun; PNG, CSV, HTML):
              pdsim frontier model=llama3_70b hardware=h100 frontier.gpus=16
  report      pdsim report TRACE.parquet [OTHER.parquet] -o report/   (run or comparison report;
              provided by the analysis package)
  calibrate   fit roofline efficiencies / fitted coefficients to a profiled latency table
  fidelity    sim vs real on this machine: pdreal profile -> serve -> replay; pdsim on the same
              requests with the measured engine facts; comparison report + error table
              (pdsim fidelity --help; docs/FIDELITY.md; provided by the analysis package)

Outputs go to outputs/<scenario>/<time>/ (trace.parquet, trace.summary.json, timeseries.parquet).
"""

FRONTIER_SCENARIO = "frontier_1k1k"  # pdsim frontier's workload unless scenario= is given
_HYDRA_FLAGS = ("--help", "-h", "--hydra-help", "--cfg", "-c", "--info", "-i", "--multirun", "-m",
                "--shell-completion", "-sc", "--resolve", "--package", "-p", "--config-name", "-cn",
                "--config-dir", "-cd", "--version", "--run", "-r", "--experimental-rerun")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    handlers: dict[str, Callable[[list[str]], int]] = {
        "run": _run,
        "goodput": _goodput,
        "sweep": _sweep,
        "plan": _plan,
        "frontier": _frontier,
        "calibrate": _calibrate,
    }
    if command in handlers:
        return handlers[command](rest)
    plugins = plugin_commands()  # report, fidelity: provided by the analysis package
    if command in plugins:
        return int(plugins[command].load()(rest) or 0)
    names = ", ".join([*handlers, *sorted(plugins)])
    print(f"pdsim: error: unknown command {command!r} (choose from {names})", file=sys.stderr)
    return 2


def _run(rest: list[str]) -> int:
    from pdsim.run import hydra_run

    return _hydra("run", hydra_run, rest)


def _goodput(rest: list[str]) -> int:
    from pdsim.search.task import hydra_goodput

    return _hydra("goodput", hydra_goodput, rest)


def _sweep(rest: list[str]) -> int:
    from pdsim.search.task import hydra_goodput

    flags = [] if any(a in ("-m", "--multirun") for a in rest) else ["--multirun"]
    return _hydra("sweep", hydra_goodput, flags + rest)


def _plan(rest: list[str]) -> int:
    from pdsim.search.plan_task import hydra_plan

    return _hydra("plan", hydra_plan, rest)


def _frontier(rest: list[str]) -> int:
    """Enumerate the deployments, then one hydra job per deployment (multirun) and a gathering
    callback that draws the frontier (pdsim.search.frontier_task)."""
    from pdsim.search.frontier_task import hydra_frontier

    if any(a.split("=")[0] in _HYDRA_FLAGS for a in rest):
        sys.argv = ["pdsim frontier", *_with_override(rest, "hydra/help=frontier")]
        hydra_frontier()
        return 0
    user = rest if any(a.startswith("scenario=") for a in rest) else [f"scenario={FRONTIER_SCENARIO}", *rest]
    try:
        cfg = compose_config(user)
        labels = frontier_labels(cfg)
    except Exception as exc:  # noqa: BLE001 - any composition error ends in one line
        print(f"pdsim: error: {one_line(exc)}", file=sys.stderr)
        return 2
    print(f"pdsim frontier: {len(labels)} deployments of {cfg.frontier.gpus} x {cfg.hardware.name} for "
          f"{cfg.model.name}, scenario {cfg.scenario.name}: {' '.join(labels)}", flush=True)
    sys.argv = ["pdsim frontier", *_with_override(_frontier_overrides(user, labels, cfg), "hydra/help=frontier")]
    hydra_frontier()
    return 0


def _frontier_overrides(user: list[str], labels: list[str], cfg: Config) -> list[str]:
    """The user's overrides plus the multirun over deployments, the gathering callback, and a
    local joblib launcher and a sweep directory unless the user chose them."""
    out = ["--multirun", *user, f"frontier.deployment={','.join(labels)}", f"frontier.deployments=[{','.join(labels)}]",
           "hydra.callbacks.gather_results._target_=pdsim.search.frontier_task.GatherFrontier"]
    if not any(a.lstrip("+").startswith(("hydra/launcher=", "sweep=")) for a in user):
        out.append("hydra/launcher=joblib")
    if not any(a.startswith("hydra.sweep.dir=") for a in user):
        stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        out.append(f"hydra.sweep.dir=multirun/frontier/{cfg.model.name}_{cfg.hardware.name}_{cfg.frontier.gpus}gpu/{stamp}")
    return out


def frontier_labels(cfg: Config) -> list[str]:
    """Labels of frontier.deployments as given (checked), or of every deployment of the budget."""
    from pdsim.search.deployments import frontier_deployments
    from pdsim.search.frontier import check_frontier

    check_frontier(cfg.frontier)
    return [d.label for d in frontier_deployments(cfg)]


def _hydra(name: str, task: Callable[..., object], rest: list[str]) -> int:
    """A plain run composes once (hydra_task.run_once); hydra flags and multiruns go through
    @hydra.main, after the overrides are checked up front (one-line errors)."""
    flagged = any(a.split("=")[0] in _HYDRA_FLAGS for a in rest)
    if not flagged:
        status = run_once(task, rest, job_name=task.__module__.rsplit(".", 1)[-1])
        if status is not None:
            return status
        error = check_overrides(rest)
        if error:
            print(f"pdsim: error: {error}", file=sys.stderr)
            return 2
    sys.argv = [f"pdsim {name}", *_with_override(rest, f"hydra/help={name}")]  # its own --help header
    task()
    return 0


def _with_override(args: list[str], override: str) -> list[str]:
    """`args` with `override` placed next to the other overrides (hydra wants them contiguous)."""
    first = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), len(args))
    return [*args[:first], override, *args[first:]]


def check_overrides(overrides: list[str]) -> str | None:
    """Compose the config with these overrides; return a one-line error or None."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        compose_config(overrides)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        return one_line(exc)
    return None


def compose_config(overrides: list[str]) -> Config:
    """The Config these overrides compose to (hydra's own keys left out); raises on a bad one."""
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR

    register_configs()
    user = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        return to_config(compose("config", overrides=user))


def _calibrate(rest: list[str]) -> int:
    from pdsim.perf.calibrate import main as calibrate_main

    return calibrate_main(rest)


if __name__ == "__main__":
    sys.exit(main())
