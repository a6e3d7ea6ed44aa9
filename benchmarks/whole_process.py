"""Whole-process cost of a small `pdsim run` (start-up included), against DistServe's simulator.

    .venv/bin/python benchmarks/whole_process.py                                  # pdsim only
    .venv/bin/python benchmarks/whole_process.py --distserve /work/peers/DistServe --repeat 3
    .venv/bin/python benchmarks/whole_process.py --baseline main --distserve /work/peers/DistServe

Sweeps are made of small runs, so what a user waits for is the whole process: interpreter,
imports, config composition, simulation and outputs. Every process here is timed from the
outside (`os.wait4`: its own user + system CPU, wall time, peak RSS). The work: `--requests`
ShareGPT length pairs with Poisson arrivals at `--rate` (the requests of
benchmarks/distserve_compare.py, written once as pdsim's plain CSV and simdistserve's
custom-workload JSON), OPT-13B on simdistserve's A100 fits, 1 prefill TP2 + 1 decode TP1.
pdsim runs with `compat=distserve` (simdistserve's semantics; docs/VALIDATION.md) and writes
its usual outputs (trace.parquet, trace.summary.json, timeseries.parquet); simdistserve runs its
own single-run driver (`simulate_dist.main`) and writes its per-request latency CSV.

Rows: `python -c pass` (the interpreter alone), `import pdsim.run` (what every run imports),
`pdsim run` and `simdistserve`. Processes are interleaved round by round (pdsim trees and
simdistserve alternate), and each row keeps its lowest CPU time over `--repeat` rounds.
`--baseline REV` adds REV's pdsim (exported with `git archive`): before/after in one run.
simdistserve is not part of this repository: pass a checkout of LLMServe/DistServe.
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
from pathlib import Path

from distserve_peer import PEER_RUNNER, PLACEMENTS
from sim_outputs import ROOT, export_tree, tree_env

PDSIM_RUN = "import sys; from pdsim.cli import main; sys.exit(main())"


def child_usage(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """Run `python ARGS` to completion; its own CPU s (user + system), wall s, peak RSS MB."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *args], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall_s = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"whole_process: {' '.join(args[:4])} failed:\n{err[-2000:]}")
    return usage.ru_utime + usage.ru_stime, wall_s, usage.ru_maxrss / 1024


def write_workload(args: argparse.Namespace, into: Path) -> None:
    """The requests as pdsim's CSV and simdistserve's JSON (in a child process: importing pandas
    here would count in every later child's peak RSS, which includes the parent's at fork)."""
    from distserve_compare import make_workload

    wl = make_workload(args.requests, args.rate, args.seed, args.data_dir)
    wl.to_csv(into / "wl.csv", index=False)
    (into / "wl.json").write_text(json.dumps([{"start_time": float(a), "prompt_len": int(i), "output_len": int(o)}
                                              for a, i, o in wl.itertuples(index=False)]))


def pdsim_steps(csv: Path, out_dir: Path) -> list[tuple[str, list[str]]]:
    overrides = ["compat=distserve", "model=opt_13b", "hardware=a100_80g", "scenario=sharegpt",
                 "scenario.source=csv", f"scenario.path={csv}", "scenario.num_requests=0",
                 *PLACEMENTS["disaggregated"][3], f"hydra.run.dir={out_dir}"]
    return [("python -c pass", ["-c", "pass"]), ("import pdsim.run", ["-c", "import pdsim.run"]),
            ("pdsim run", ["-c", PDSIM_RUN, "run", *overrides])]


def measure(args: argparse.Namespace, trees: dict[str, Path], tmp: Path) -> dict[tuple[str, str], tuple[float, ...]]:
    """Interleaved rounds; per (process, code) the run with the lowest CPU time."""
    csv, wl_json = tmp / "wl.csv", tmp / "wl.json"
    subprocess.run([sys.executable, __file__, "--write-workload", str(tmp), "--requests", str(args.requests),
                    "--rate", str(args.rate), "--seed", str(args.seed), "--data-dir", str(args.data_dir)], check=True)
    best: dict[tuple[str, str], tuple[float, ...]] = {}

    def keep(key: tuple[str, str], got: tuple[float, float, float]) -> None:
        if key not in best or got[0] < best[key][0]:
            best[key] = got

    for i in range(args.repeat):
        for label, tree in trees.items():
            for step, argv in pdsim_steps(csv, tmp / f"{label}{i}"):
                keep((step, label), child_usage(argv, tree_env(tree), tree))
        if args.distserve is not None:
            backend, tpp, tpd, _ = PLACEMENTS["disaggregated"]
            argv = ["-c", PEER_RUNNER, str(args.distserve), str(wl_json), backend, tpp, tpd, str(tmp / "sds.csv")]
            keep(("simdistserve", "peer"), child_usage(argv, dict(os.environ), tmp))
    return best


def print_table(best: dict[tuple[str, str], tuple[float, ...]], markdown: bool) -> None:
    peer = best.get(("simdistserve", "peer"))
    heads = ["process", "code", "cpu s", "wall s", "peak RSS MB", "simdistserve cpu / this"]
    cells = [[step, label, f"{cpu:.2f}", f"{wall:.2f}", f"{rss:.0f}",
              f"{peer[0] / cpu:.1f}x" if peer is not None and step == "pdsim run" else ""]
             for (step, label), (cpu, wall, rss) in best.items()]
    if markdown:
        print("| " + " | ".join(heads) + " |\n|---|---|---:|---:|---:|---:|")
        print("\n".join("| " + " | ".join(line) + " |" for line in cells))
        return
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(heads)]
    for line in (heads, *cells):
        print("  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000, help="requests per run (default 2000)")
    parser.add_argument("--rate", type=float, default=0.5, help="Poisson arrival rate, req/s (default 0.5)")
    parser.add_argument("--seed", type=int, default=18, help="seed of the length sample and arrivals")
    parser.add_argument("--distserve", type=Path, default=None, help="a LLMServe/DistServe checkout")
    parser.add_argument("--baseline", default="", help="git revision to measure too, interleaved")
    parser.add_argument("--compiled-baseline", action="store_true", help="build the baseline's compiled core first")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each row keeps its lowest CPU time")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    parser.add_argument("--write-workload", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.write_workload is not None:
        write_workload(args, args.write_workload)
        return 0
    if args.distserve is not None and not (args.distserve / "simdistserve").is_dir():
        parser.error(f"--distserve {args.distserve}: no simdistserve/ folder there")
    with tempfile.TemporaryDirectory(prefix="whole_process_") as tmp_dir:
        tmp = Path(tmp_dir)
        trees = {"before": export_tree(args.baseline, tmp / "tree", args.compiled_baseline)} if args.baseline else {}
        trees["after" if args.baseline else "this"] = ROOT
        best = measure(args, trees, tmp)
    print(f"whole process: {args.requests:,} ShareGPT requests at {args.rate:g} req/s, OPT-13B, 1P (TP2) + 1D (TP1);"
          f" lowest CPU of {args.repeat} interleaved rounds; own peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB")
    print_table(best, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
