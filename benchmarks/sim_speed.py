"""Simulator speed: CPU time per simulated request, normalised by bare simpy, events, peak RSS.

    .venv/bin/python benchmarks/sim_speed.py                 # every case, linear, roofline and measured
    .venv/bin/python benchmarks/sim_speed.py --quick         # Mooncake 8P8D and Azure 4P4D, linear
    .venv/bin/python benchmarks/sim_speed.py --cases mooncake_8p8d --perf roofline
    .venv/bin/python benchmarks/sim_speed.py --scaling       # also vs requests and vs instances (2..256)
    .venv/bin/python benchmarks/sim_speed.py --scaling-only --repeat 2
    .venv/bin/python benchmarks/sim_speed.py --startup       # also a 2,000-request `pdsim run`, whole process
    .venv/bin/python benchmarks/sim_speed.py --baseline main --cases mooncake_8p8d --instances --startup
    .venv/bin/python benchmarks/sim_speed.py --markdown      # tables as markdown (docs/PERFORMANCE.md)
    .venv/bin/python benchmarks/sim_speed.py --baseline main --pure   # before, after as pure Python, after

Each case runs in its own Python process (so one case's memory does not count against the next;
peak RSS is that process's ru_maxrss). "wall s" times `pdsim.sim.simulate` only; building the
workload (parsing a trace, generating a synthetic one) is reported apart as "load s"; "cpu s" is
the process CPU time of the same call (what wall time is on an otherwise idle core).

Machines differ about 2x in speed, and a shared machine's speed varies from run to run (on the
2-core VMs here by up to 1.5x within seconds), so every case process times bare simpy (an empty
process doing 200,000 timeouts, CPU time) just before and just after the simulation, and the
table reports the cost of one simulated request in those units: "simpy/req" = CPU seconds per
request x bare simpy timeouts per CPU second (the mean of the two). It is comparable across
machines and runs. With `--repeat N` each row is the median of N runs by simpy/req.

`--baseline REV` runs every case twice, interleaved (REV, this checkout, REV, ...), REV's pdsim
exported with `git archive` and imported in its own processes: before/after in one run on one
machine. `--startup` times the whole `pdsim run` process (interpreter, imports, config
composition, simulation, writing the outputs) on 2,000 ShareGPT requests (OPT-13B, 1 prefill TP2 +
1 decode TP1, DistServe's fitted A100 model: the work DistServe's simulator is compared on).
`--pure` also runs this checkout's simulator core as pure Python (PDSIM_PURE_PYTHON=1), interleaved
with its compiled build; the "core" column says which one each row ran (REVs from before the
compiled core are pure).
Defaults of the scenario tree apply otherwise (model llama3_8b, hardware h100, round-robin
routing, prefix cache on, time series every simulated second). Needs ../shared/data.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sim_outputs import ROOT, export_tree, tree_env

CHAT = ["scenario=chat", "scenario.arrival=poisson"]
SIMPY_TIMEOUTS = 200_000
STARTUP = ("scenario=sharegpt", "scenario.num_requests=2000", "model=opt_13b", "hardware=a100_80g",
           "perf=distserve_a100", "cluster=1p1d", "cluster.prefill_tp=2", "cluster.decode_tp=1")


DEEPSEEK_WIDE_EP = ["model=deepseek_v3", "hardware=b200", "perf.engine_version=0.5.14", "model.gemm_quant=fp8_block",
                    "model.moe_quant=fp8_block", "cluster.prefill_tp=8", "cluster.prefill_moe_ep=8",
                    "cluster.decode_tp=1", "cluster.decode_dp=16", "cluster.decode_moe_ep=16"]


@dataclass(frozen=True)
class Case:
    name: str
    overrides: tuple[str, ...]
    instances: int
    note: str
    perfs: tuple[str, ...] = ()  # the perf kinds the case runs under (() = any)


def _chat(n: int, rate_rps: float, cluster: list[str]) -> tuple[str, ...]:
    return (*CHAT, f"scenario.num_requests={n}", f"scenario.rate_rps={rate_rps}", *cluster)


def _pd(p: int) -> list[str]:
    return [f"cluster.prefill={p}", f"cluster.decode={p}"]


def _colocated(n: int) -> list[str]:
    return ["cluster=colocated4", f"cluster.colocated={n}"]


CASES: dict[str, Case] = {c.name: c for c in (
    Case("mooncake_8p8d", ("scenario=mooncake_conversation", "cluster=8p8d"), 16, "12,031 req, 1 h trace"),
    Case("mooncake_colocated16", ("scenario=mooncake_conversation", *_colocated(16)), 16, "same GPUs, colocated"),
    Case("azure_conv_4p4d", ("scenario=azure_conv", "cluster=4p4d"), 8, "19,366 req, 1 h trace"),
    Case("azure_conv_colocated8", ("scenario=azure_conv", *_colocated(8)), 8, "same GPUs, colocated"),
    Case("chat200k_32p32d", _chat(200_000, 160.0, ["cluster=32p32d"]), 64, "Poisson 160 req/s, sessions"),
    Case("chat200k_colocated64", _chat(200_000, 160.0, _colocated(64)), 64, "same GPUs, colocated"),
    # issue 40: DeepSeek-R1 (fp8 block) on B200, SGLang 0.5.14 tables; 2 prefill TP8/EP8, 1 decode
    # of 16 DP-attention ranks with EP16 over two nodes (measured perf only: DP/EP need its tables)
    Case("deepseek_wide_ep", _chat(5_000, 6.0, [*_pd(1), "cluster.prefill=2", *DEEPSEEK_WIDE_EP]), 3,
         "DeepSeek-R1 2P(TP8/EP8) 1D(TP1xDP16/EP16)", ("measured",)),
)}
QUICK = ("mooncake_8p8d", "azure_conv_4p4d")
# wall time vs requests (8P8D, 40 req/s) and vs instances (fixed requests, 2.5 req/s per instance)
REQUEST_SCALING = tuple(Case(f"chat{n // 1000}k_8p8d", _chat(n, 40.0, _pd(8)), 16, "")
                        for n in (1_000, 10_000, 50_000, 200_000))


def instance_scaling(requests: int) -> tuple[Case, ...]:
    return tuple(Case(f"chat{requests // 1000}k_{p}p{p}d", _chat(requests, 2.5 * 2 * p, _pd(p)), 2 * p, "")
                 for p in (1, 2, 4, 8, 16, 32, 64, 128))


def simpy_timeouts_per_cpu_s(n: int = SIMPY_TIMEOUTS) -> float:
    """Bare simpy speed on this machine now: one process yielding `n` zero-delay timeouts."""
    import simpy

    env = simpy.Environment()

    def spin(env: simpy.Environment):  # noqa: ANN202 (a simpy generator)
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(spin(env))
    cpu0 = time.process_time()
    env.run()
    return n / (time.process_time() - cpu0)


def run_case(overrides: list[str]) -> dict[str, float | int | str]:
    """Child process: simulate one configuration, return its measurements. The libraries a run's
    outputs need (numpy, pandas, pyarrow) are imported before the clock starts, whichever module
    of the tree imports them first (start-up is measured apart: --startup, benchmarks/startup.py)."""
    import numpy  # noqa: F401
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR
    from pdsim.sim import simulate
    from pdsim.workload import build_workload

    try:
        from pdsim.compiled import core_compiled
        core = "compiled" if core_compiled() else "pure"
    except ImportError:  # a revision from before the compiled core
        core = "pure"
    register_configs()
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        cfg = to_config(compose("config", overrides=[*overrides, "progress=false"]))
    t0 = time.perf_counter()
    workload = build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    load_s = time.perf_counter() - t0
    rate_before = simpy_timeouts_per_cpu_s()  # (bracketing the run: this VM's speed drifts within seconds)
    cpu0 = time.process_time()
    result = simulate(cfg, workload)
    cpu_s = time.process_time() - cpu0
    simpy_rate = (rate_before + simpy_timeouts_per_cpu_s()) / 2
    n = len(workload)
    return {
        "core": core,
        "requests": n,
        "load_s": load_s,
        "wall_s": result.wall_s,
        "cpu_s": cpu_s,
        "simpy_rate": simpy_rate,
        "events": result.events,
        "sim_time_s": result.sim_time_s,
        "finished": int((result.trace["status"] == "finished").sum()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


Trees = dict[str, tuple[Path, bool]]  # label -> (checkout, run its sources as pure Python)


def _child(tree: Path, args: list[str], pure: bool = False) -> tuple[str, resource.struct_rusage, float]:
    """Run `python ARGS` importing pdsim from `tree`; its stdout, its own rusage, wall s."""
    with tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], env=tree_env(tree, pure), cwd=tree, text=True,
                                stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            sys.exit(f"sim_speed: {' '.join(args[:6])} failed:\n{err.read()[-2000:]}")
    return out, usage, wall_s


def measure(case: Case, perf: str, repeat: int, trees: Trees) -> list[dict[str, float | int | str]]:
    """Run `case` in fresh processes `repeat` times per tree, interleaved; keep each tree's median
    run by simpy-normalised cost (the lower middle one of an even count)."""
    runs: dict[str, list[dict[str, float | int | str]]] = {label: [] for label in trees}
    for _ in range(repeat):
        for label, (tree, pure) in trees.items():
            args = [str(Path(__file__).resolve()), "--child", "--", *case.overrides, f"perf={perf}"]
            out, _, _ = _child(tree, args, pure)
            runs[label].append(json.loads(out.strip().splitlines()[-1]))
    return [{"case": case.name, "code": label, "perf": perf, "instances": case.instances, "note": case.note,
             **sorted(rows, key=_cost)[(len(rows) - 1) // 2]} for label, rows in runs.items()]


def _cost(row: dict[str, float | int | str]) -> float:
    return float(row["cpu_s"]) * float(row["simpy_rate"])


COLUMNS = (("case", "case", "{}"), ("code", "code", "{}"), ("core", "core", "{}"), ("perf", "perf", "{}"), ("instances", "inst", "{}"),
           ("requests", "requests", "{:,}"), ("load_s", "load s", "{:.2f}"), ("wall_s", "wall s", "{:.2f}"),
           ("cpu_s", "cpu s", "{:.2f}"), ("cpu_rate", "req/cpu s", "{:,.0f}"),
           ("simpy_rate", "simpy/cpu s", "{:,.0f}"), ("simpy_per_request", "simpy/req", "{:.0f}"),
           ("events_per_request", "events/req", "{:.1f}"), ("peak_rss_mb", "peak RSS MB", "{:.0f}"),
           ("sim_time_s", "sim s", "{:,.0f}"), ("finished", "finished", "{:,}"))


def print_table(rows: list[dict[str, float | int | str]], markdown: bool) -> None:
    for row in rows:
        row["cpu_rate"] = float(row["requests"]) / float(row["cpu_s"])
        row["simpy_per_request"] = _cost(row) / float(row["requests"])
        row["events_per_request"] = float(row["events"]) / float(row["requests"])
    _print([[fmt.format(row[key]) for key, _, fmt in COLUMNS] for row in rows], [h for _, h, _ in COLUMNS],
           left=5, markdown=markdown)


def _print(cells: list[list[str]], heads: list[str], left: int, markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(heads) + " |")
        print("|" + "|".join("---" if i < left else "---:" for i in range(len(heads))) + "|")
        for line in cells:
            print("| " + " | ".join(line) + " |")
        return
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    for line in (heads, *cells):
        print("  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))))

STARTUP_STEPS = (("python -c pass", ["-c", "pass"]),
                 ("import pdsim.run", ["-c", "import pdsim.run"]),
                 ("pdsim run, 2,000 requests", ["-c", "import sys; from pdsim.cli import main; sys.exit(main())",
                                                "run", *STARTUP]))


def startup(repeat: int, trees: Trees, markdown: bool) -> None:
    """Whole-process CPU and wall time of the interpreter, the imports and a 2,000-request run."""
    best: dict[tuple[str, str], tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sim_speed_") as tmp:
        for i in range(repeat):
            for label, (tree, pure) in trees.items():
                for step, args in STARTUP_STEPS:
                    extra = [f"hydra.run.dir={tmp}/{label.replace(' ', '_')}{i}"] if "run" in args else []
                    _, usage, wall_s = _child(tree, [*args, *extra], pure)
                    cpu_s = usage.ru_utime + usage.ru_stime
                    if (step, label) not in best or cpu_s < best[step, label][0]:
                        best[step, label] = (cpu_s, wall_s, usage.ru_maxrss / 1024)
    print(f"\nwhole process ({' '.join(STARTUP)})")
    cells = [[step, label, f"{cpu:.2f}", f"{wall:.2f}", f"{rss:.0f}"]
             for (step, label), (cpu, wall, rss) in best.items()]
    _print(cells, ["process", "code", "cpu s", "wall s", "peak RSS MB"], left=2, markdown=markdown)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)} with perf=linear")
    parser.add_argument("--cases", default="", help=f"comma-separated subset of: {', '.join(CASES)} (none: '-')")
    parser.add_argument("--perf", default="linear,roofline,measured", help="comma-separated perf models "
                        "(measured: the scenario tree's default)")
    parser.add_argument("--scaling", action="store_true", help="also vs requests and vs instances (linear)")
    parser.add_argument("--scaling-only", action="store_true", help="only the scaling tables")
    parser.add_argument("--instances", action="store_true", help="also the instance table (2..256 instances)")
    parser.add_argument("--instance-requests", type=int, default=20_000, help="requests per instance-table case")
    parser.add_argument("--startup", action="store_true", help="also the whole-process 2,000-request run")
    parser.add_argument("--baseline", default="", help="git revision (or an exported, built folder) to measure "
                        "too, interleaved (before/after)")
    parser.add_argument("--compiled-baseline", action="store_true", help="build the baseline's compiled "
                        "core first (mypyc; its sources run as pure Python otherwise)")
    parser.add_argument("--pure", action="store_true", help="also this checkout's core as pure Python "
                        "(PDSIM_PURE_PYTHON=1), interleaved with the compiled one")
    parser.add_argument("--repeat", type=int, default=1, help="runs per case; the median by simpy/req is kept")
    parser.add_argument("--markdown", action="store_true", help="print markdown tables")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_case(args.overrides)))
        return 0
    names = QUICK if args.quick else tuple(n for n in args.cases.split(",") if n and n != "-") or tuple(CASES)
    if args.cases == "-":
        names = ()
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {list(CASES)}")
    perfs = ("linear",) if args.quick else tuple(p for p in args.perf.split(",") if p)
    with tempfile.TemporaryDirectory(prefix="sim_speed_base_") as tmp:
        trees: Trees = {"before": (export_tree(args.baseline, Path(tmp) / "tree", args.compiled_baseline), False)} if args.baseline else {}
        label = "after" if args.baseline else "this"
        if args.pure:
            trees[f"{label} (pure)"] = (ROOT, True)
        trees[label] = (ROOT, False)
        run_tables(args, names, perfs, trees)
    return 0


def run_tables(args: argparse.Namespace, names: tuple[str, ...], perfs: tuple[str, ...],
               trees: Trees) -> None:
    def table(cases: tuple[Case, ...], perfs: tuple[str, ...]) -> None:
        print_table([row for case in cases for perf in perfs if not case.perfs or perf in case.perfs
                     for row in measure(case, perf, args.repeat, trees)], args.markdown)

    if names and not args.scaling_only:
        table(tuple(CASES[name] for name in names), perfs)
    if args.scaling or args.scaling_only:
        print("\nvs requests (8P8D, chat 40 req/s)")
        table(REQUEST_SCALING, ("linear",))
    if args.scaling or args.scaling_only or args.instances:
        print(f"\nvs instances (chat {args.instance_requests:,} requests, 2.5 req/s per instance)")
        table(instance_scaling(args.instance_requests), ("linear",))
    if args.startup:
        startup(args.repeat, trees, args.markdown)


if __name__ == "__main__":
    sys.exit(main())
