"""Start-up CPU time: `import pdsim.run` and `pdsim --help`, each in a fresh process.

    .venv/bin/python benchmarks/startup.py                       # this checkout
    .venv/bin/python benchmarks/startup.py --baseline d632975    # REV and this checkout, side by side
    .venv/bin/python benchmarks/startup.py --baseline A --against B --repeat 30

Every sample is one child process, timed from the outside (`os.wait4`: its own user + system
CPU). A sweep of small runs pays `import pdsim.run` once per job, so it is measured alone, and
`pdsim --help` as the console script runs it (`from pdsim.cli import main`). `python -c pass`
is the interpreter's own floor. The sides are interleaved round by round (load on the machine
falls on both alike); each cell is the median over `--repeat` rounds (min in brackets).

A revision is exported with `git archive` into a temporary folder and imported from there
(PYTHONPATH precedes the editable install); this checkout is imported from its work tree. Both
sides run with PDSIM_PURE_PYTHON=1 unless `--compiled`, so the state of this checkout's
compiled core (built, stale, absent) does not count: start-up does not depend on it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from sim_outputs import ROOT, export_tree, tree_env

HELP = "import sys; from pdsim.cli import main; sys.argv = ['pdsim', '--help']; sys.exit(main())"
COMMANDS = {"python -c pass": "pass", "import pdsim.run": "import pdsim.run", "pdsim --help": HELP}


def child_cpu_s(code: str, env: dict[str, str], cwd: Path) -> float:
    """Run `python -c CODE` to completion; its user + system CPU seconds."""
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        sys.exit(f"startup: `python -c {code!r}` in {cwd} failed:\n{err.decode()[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def check_origin(tree: Path, env: dict[str, str]) -> None:
    """`import pdsim` in `tree`'s environment must load `tree`'s copy."""
    where = subprocess.run([sys.executable, "-c", "import pdsim; print(pdsim.__file__)"], env=env, cwd=tree,
                           check=True, capture_output=True, text=True).stdout.strip()
    if not where.startswith(str(tree)):
        sys.exit(f"startup: pdsim imported from {where}, not from {tree}")


def measure(trees: dict[str, Path], repeat: int, pure: bool) -> dict[tuple[str, str], list[float]]:
    """(command, side) -> CPU seconds per round, rounds interleaved across sides."""
    envs = {label: tree_env(tree, pure) for label, tree in trees.items()}
    for label, tree in trees.items():
        check_origin(tree, envs[label])
    samples: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeat):
        for label, tree in trees.items():
            for name, code in COMMANDS.items():
                samples.setdefault((name, label), []).append(child_cpu_s(code, envs[label], tree))
    return samples


def print_table(samples: dict[tuple[str, str], list[float]], labels: list[str]) -> None:
    heads = ["command", *(f"{label} cpu s" for label in labels)] + (["after / before"] if len(labels) == 2 else [])
    rows = []
    for name in COMMANDS:
        medians = [statistics.median(samples[name, label]) for label in labels]
        cells = [f"{m:.3f} [{min(samples[name, label]):.3f}]" for m, label in zip(medians, labels, strict=True)]
        ratio = [f"{medians[1] / medians[0]:.2f}x"] if len(labels) == 2 else []
        rows.append([name, *cells, *ratio])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    for line in (heads, *rows):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="", help="git revision (or exported folder) to measure beside")
    parser.add_argument("--against", default="", help="revision for the other side (default: this work tree)")
    parser.add_argument("--repeat", type=int, default=15, help="rounds (default 15); cells are medians")
    parser.add_argument("--compiled", action="store_true",
                        help="do not set PDSIM_PURE_PYTHON=1 (each side loads its compiled core if it has one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="startup_") as tmp_dir:
        tmp = Path(tmp_dir)
        trees: dict[str, Path] = {}
        if args.baseline:
            trees[f"before ({args.baseline})"] = export_tree(args.baseline, tmp / "before")
        after = export_tree(args.against, tmp / "after") if args.against else ROOT
        trees[f"after ({args.against})" if args.against else "this tree"] = after
        samples = measure(trees, args.repeat, pure=not args.compiled)
    core = "each side's own core" if args.compiled else "PDSIM_PURE_PYTHON=1"
    print(f"start-up CPU s (user + system) per fresh process, median [min] of {args.repeat} interleaved rounds; {core}")
    print_table(samples, list(trees))
    return 0


if __name__ == "__main__":
    sys.exit(main())
