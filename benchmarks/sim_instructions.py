"""Instructions per simulated request: the simulator's cost without the machine's noise.

    .venv/bin/python benchmarks/sim_instructions.py --cases mooncake_8p8d --perf linear
    .venv/bin/python benchmarks/sim_instructions.py --baseline main --cases mooncake_8p8d --perf linear,measured
    .venv/bin/python benchmarks/sim_instructions.py --instances 2,128 --instance-requests 5000
    .venv/bin/python benchmarks/sim_instructions.py --cache --cases mooncake_8p8d --perf linear

CPU seconds on a shared VM move 1.5x for the same code within an hour (docs/PERFORMANCE.md), so a
before/after difference of 10% needs many alternating pairs. Instructions do not move: each case
runs once under valgrind's callgrind, counting only inside the compiled `simulate`
(`--toggle-collect`: no imports, no workload building, no outputs), and the table gives
instructions per request, before and after. What instructions miss is the memory system (the
same instructions over a larger working set take longer): read it next to sim_speed.py's CPU
times. The same run counts bare simpy (one process yielding timeouts, as sim_speed.py's normaliser,
at two sizes: the difference over the extra timeouts), and the table also gives each request's
instructions in bare simpy timeouts: the issue's simpy-normalised cost, without the machine's
noise (CPU time also pays for cache misses that a tight simpy loop does not have, so it reads
higher). `--cache` simulates the caches too (`--cache-sim=yes`, ~1.5x slower) and counts
estimated cycles instead: instructions + 10 per first-level cache miss + 100 per last-level miss
(the estimate KCachegrind shows), for the case and for bare simpy alike: a noise-free stand-in
for CPU time that sees the memory system. Needs valgrind (`apt-get install valgrind`) and the compiled core (mypyc; a pure-Python
run has no `simulate` symbol to count in and is reported as such). About 60x slower than a
plain run: Mooncake 8P8D takes ~5 minutes per tree.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sim_outputs import export_tree, tree_env
from sim_speed import CASES, instance_scaling, simpy_timeouts_per_cpu_s

ROOT = Path(__file__).resolve().parent.parent
SIMULATE_SYMBOL = "CPyDef_run___simulate"  # the compiled simulate (pdsim/sim/run.py)
_REQUESTS = "requests="
SIMPY_SIZES = (10_000, 110_000)  # bare simpy timeouts of the two runs whose difference is counted


def run_child(overrides: list[str]) -> None:
    """Child process (under valgrind): simulate one configuration, print its request count."""
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR
    from pdsim.sim import simulate
    from pdsim.workload import build_workload

    register_configs()
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=[*overrides, "progress=false"]))
    workload = build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    simulate(cfg, workload)
    print(f"{_REQUESTS}{len(workload)}")


def count(tree: Path, overrides: list[str], cache: bool = False) -> tuple[int, int]:
    """(instructions, or estimated cycles with `cache`, inside simulate; requests) of one case
    run with `tree`'s pdsim."""
    total, stdout = _callgrind_total(
        [f"--toggle-collect={SIMULATE_SYMBOL}", sys.executable, str(Path(__file__).resolve()), "--child", "--",
         *overrides], env=tree_env(tree), cwd=tree, cache=cache)
    requests = [int(line[len(_REQUESTS):]) for line in stdout.splitlines() if line.startswith(_REQUESTS)]
    if not requests:
        sys.exit(f"sim_instructions: no request count for {' '.join(overrides)}")
    return total, requests[0]


def _callgrind_total(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None,
                     cache: bool = False) -> tuple[int, str]:
    """(instructions callgrind counted, or with `cache` its estimated cycles; stdout) of `cmd`."""
    with tempfile.TemporaryDirectory() as tmp:
        out_file = Path(tmp) / "callgrind.out"
        options = [c for c in cmd if c.startswith("--toggle-collect=")]  # (valgrind's own, before the program)
        options += ["--cache-sim=yes"] if cache else []
        program = [c for c in cmd if not c.startswith("--toggle-collect=")]
        proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *options, *program],
                              env=env, cwd=cwd, capture_output=True, text=True)
        if proc.returncode:
            sys.exit(f"sim_instructions: {' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
        text = out_file.read_text()
    events = re.search(r"^events:\s*(.+)$", text, re.MULTILINE)
    totals = re.search(r"^(?:summary|totals):\s*([\d ]+)$", text, re.MULTILINE)
    if events is None or totals is None:
        sys.exit(f"sim_instructions: no callgrind total for {' '.join(cmd)}")
    values = dict(zip(events.group(1).split(), (int(v) for v in totals.group(1).split()), strict=False))
    return (estimated_cycles(values) if cache else values["Ir"]), proc.stdout


def estimated_cycles(counts: dict[str, int]) -> int:
    """callgrind's cycle estimate (KCachegrind's, without branch simulation): instructions + 10 x
    first-level misses + 100 x last-level misses."""
    first = counts["I1mr"] + counts["D1mr"] + counts["D1mw"]
    last = counts["ILmr"] + counts["DLmr"] + counts["DLmw"]
    return counts["Ir"] + 10 * first + 100 * last


def simpy_instructions_per_timeout(cache: bool = False) -> float:
    """Instructions (estimated cycles with `cache`) of one bare simpy timeout (sim_speed.py's
    normaliser): two runs of different sizes, so start-up cancels out."""
    small, large = (_callgrind_total([sys.executable, str(Path(__file__).resolve()), "--simpy-child", str(n)],
                                     cache=cache)[0] for n in SIMPY_SIZES)
    return (large - small) / (SIMPY_SIZES[1] - SIMPY_SIZES[0])


def _cases(args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    out = [(f"{name} {perf}", [*CASES[name].overrides, f"perf={perf}"])
           for name in filter(None, args.cases.split(",")) for perf in args.perf.split(",")]
    if args.instances:
        by_size = {c.instances: c for c in instance_scaling(args.instance_requests)}
        for size in (int(s) for s in args.instances.split(",")):
            if size not in by_size:
                sys.exit(f"sim_instructions: --instances {size} is not in the instance table ({sorted(by_size)})")
            out.append((f"{size} instances", [*by_size[size].overrides, "perf=linear"]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default="mooncake_8p8d", help=f"comma-separated, of: {', '.join(CASES)}")
    parser.add_argument("--perf", default="linear", help="comma-separated perf models (default: linear)")
    parser.add_argument("--instances", default="", help="comma-separated sizes of the instance table, e.g. 2,128")
    parser.add_argument("--instance-requests", type=int, default=5_000, help="requests per instance-table case")
    parser.add_argument("--baseline", default="", help="git revision or an exported, built folder to count "
                        "too (built with its compiled core: needs mypy==2.4.1)")
    parser.add_argument("--cache", action="store_true", help="simulate the caches and count estimated cycles "
                        "(instructions + 10 x first-level + 100 x last-level misses) instead of instructions")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--simpy-child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        run_child(args.overrides)
        return 0
    if args.simpy_child:
        simpy_timeouts_per_cpu_s(args.simpy_child)
        return 0
    if shutil.which("valgrind") is None:
        sys.exit("sim_instructions: valgrind is not installed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"after": ROOT}
        if args.baseline:
            trees = {"before": export_tree(args.baseline, Path(tmp) / "baseline", compiled=True), **trees}
        unit = "cycles" if args.cache else "instr"
        per_timeout = simpy_instructions_per_timeout(args.cache)
        print(f"bare simpy: {per_timeout:,.0f} {'estimated cycles' if args.cache else 'instructions'} per timeout "
              f"(simpy/req below: {unit}/req / this)\n")
        print("| case | " + " | ".join(f"{label} {unit}/req" for label in trees) + " | "
              + " | ".join(f"{label} simpy/req" for label in trees) + " | requests |")
        print("|---|" + "---:|" * (2 * len(trees) + 1))
        for label, overrides in _cases(args):
            counts = {name: count(tree, overrides, args.cache) for name, tree in trees.items()}
            cells = [f"{ir / max(n, 1):,.0f}" for ir, n in counts.values()]
            if any(ir == 0 for ir, _ in counts.values()):
                cells = [c if c != "0" else "0 (pure Python: no compiled simulate)" for c in cells]
            cells += [f"{ir / max(n, 1) / per_timeout:,.1f}" for ir, n in counts.values()]
            print(f"| {label} | " + " | ".join(cells) + f" | {next(iter(counts.values()))[1]:,} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
