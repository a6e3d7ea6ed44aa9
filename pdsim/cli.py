"""The `pdsim` command: a thin dispatcher over subcommands.

    pdsim run [overrides...]        simulate one configuration (hydra; --help lists the groups)
    pdsim plan [overrides...]       P:D split and TP per side for plan.gpus GPUs (planner)
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

from pdsim.errors import one_line
from pdsim.hydra_task import run_once
from pdsim.plugins import plugin_commands

USAGE = """usage: pdsim <command> [args]

commands:
  run         simulate one configuration:  pdsim run scenario=rag cluster.prefill=3 cluster.decode=5
              (pdsim run --help lists the config groups and their options)
  goodput     highest arrival rate meeting the SLOs (bisection):  pdsim goodput scenario=chat slo=strict
  sweep       goodput per grid point (hydra multirun):  pdsim sweep cluster.prefill=1,2,3 cluster.decode=1,2,3
              add hydra/launcher=joblib for local parallelism (or +sweep=<file> from scenarios/sweep/)
  plan        recommend the P:D split and TP per side for a GPU budget, vs the best colocated fleet:
              pdsim plan scenario=rag model=llama3_70b hardware=a800 perf=roofline plan.gpus=16
  report      pdsim report TRACE.parquet [OTHER.parquet] -o report/   (run or comparison report;
              provided by the analysis package)
  calibrate   fit roofline efficiencies / fitted coefficients to a profiled latency table
  fidelity    sim vs real on this machine: pdreal profile -> serve -> replay; pdsim on the same
              requests with the measured engine facts; comparison report + error table
              (pdsim fidelity --help; docs/FIDELITY.md; provided by the analysis package)

Outputs go to outputs/<scenario>/<time>/ (trace.parquet, trace.summary.json, timeseries.parquet).
"""

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


def _hydra(name: str, task: Callable[[], object], rest: list[str]) -> int:
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
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR

    register_configs()
    user = [o for o in overrides if not o.lstrip("+~").startswith("hydra")]
    try:
        with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
            to_config(compose("config", overrides=user))
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        return one_line(exc)
    return None


def _calibrate(rest: list[str]) -> int:
    from pdsim.perf.calibrate import main as calibrate_main

    return calibrate_main(rest)


if __name__ == "__main__":
    sys.exit(main())
