"""The GPU check: one command that installs the carried wheels and runs pdreal's GPU checks in order.

    python3 benchmarks/gpu/check.py --out "$OUT"                       # on the H200 (docs/GPU.md)
    python  benchmarks/gpu/check.py --device cpu --shape tiny --out D   # the CPU dry run (tests/)

Checks, in this order so that a run cut off early still reports the first ones, each a child
process with its own time limit (at most what is left of --budget-s):

1. kernels  (check_kernels.py) attention backends on the device vs the CPU reference (prefill,
            chunked prefill, decode, mixed; torch fp32/bf16, flashinfer bf16 with its JIT timed);
            greedy tokens of a random SmolLM2-shaped model equal on CPU and device;
2. profile  (check_profile.py) pdreal's step profile at Llama-3.1-8B's shape vs pdsim's
            perf=measured hardware=h200, per cell, with pdreal's engine overhead split out;
3. pd       (check_pd.py) 1P1D on the one device over Mooncake and a short fidelity loop.

Setup: the wheels in --wheels (benchmarks/gpu/fetch_wheels.py) go into a temporary site dir with
`pip install --no-index --no-deps --target`; the system libraries of syslibs.tar.xz that this
machine lacks go on LD_LIBRARY_PATH. The simulator core runs as pure Python
(PDSIM_PURE_PYTHON=1): the check simulates a few dozen requests (well under a second), while
compiling it would carry mypy's wheels and spend about a minute of the lease.

Output folder (at most 8 files): check.log (everything), summary.md (environment, each check's
status, time and tables; rewritten after every check), kernels.csv, profile.csv (pdsim
perf=table format), profile_vs_measured.csv, fidelity.md, engine.json.

Exit status: 0 every check passed; 1 a correctness check failed; 2 a check errored or ran out of
time (and none failed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE))
from setup_env import describe_environment, prepare_environment  # noqa: E402
from shapes import RESULT_PREFIX, SHAPES  # noqa: E402


@dataclass(frozen=True)
class Check:
    name: str
    script: str
    limit_s: float  # on the GPU shape; the tiny shape divides by TINY_FACTOR
    extra: tuple[str, ...] = ()


CHECKS = (Check("kernels", "check_kernels.py", 150.0), Check("profile", "check_profile.py", 120.0),
          Check("pd", "check_pd.py", 210.0))
RESERVE_S = 5.0  # left for writing the summary after the last check


def run_check(check: Check, args: list[str], env: dict[str, str], limit_s: float, log: TextIO) -> dict[str, Any]:
    """Run one check's script as a child (own process group); its result line, or why there is none."""
    cmd = [sys.executable, str(HERE / check.script), *args]
    log.write(f"\n==== {check.name}: {' '.join(cmd)} (limit {limit_s:.0f} s)\n")
    log.flush()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    result: dict[str, Any] = {}
    try:
        result = _follow(proc, log, start + limit_s)
        proc.wait(timeout=max(1.0, start + limit_s - time.perf_counter()))
    except (subprocess.TimeoutExpired, TimeoutError):
        os.killpg(proc.pid, 9)
        proc.wait()
        result = {"status": "timeout", "summary": f"cut off after {limit_s:.0f} s (see check.log)"}
    elapsed = time.perf_counter() - start
    if not result:
        result = {"status": "error", "summary": f"exited {proc.returncode} without a result (see check.log)"}
    log.write(f"==== {check.name}: {result['status']} in {elapsed:.1f} s\n")
    log.flush()
    return {**result, "name": check.name, "seconds": elapsed}


def _follow(proc: subprocess.Popen[str], log: TextIO, deadline: float) -> dict[str, Any]:
    """Copy the child's output into the log until it ends; its CHECK_RESULT line parsed."""
    import selectors

    result: dict[str, Any] = {}
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            raise TimeoutError
        if not selector.select(timeout=min(left, 5.0)):
            continue
        line = proc.stdout.readline()
        if not line:
            return result
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
            log.write(f"[{result['status']}]\n")
        else:
            log.write(line)
        log.flush()


def write_summary(out: Path, env_facts: dict[str, Any], results: list[dict[str, Any]], planned: list[str]) -> None:
    lines = ["# GPU check", "", "```", json.dumps(env_facts, indent=1, default=str), "```", ""]
    lines += ["| check | status | seconds |", "|---|---|---|"]
    lines += [f"| {r['name']} | {r['status']} | {r['seconds']:.1f} |" for r in results]
    lines += [f"| {name} | not run |  |" for name in planned[len(results):]]
    for r in results:
        lines += ["", f"## {r['name']}: {r['status']}", "", r.get("summary", "")]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def exit_code(results: list[dict[str, Any]]) -> int:
    statuses = {r["status"] for r in results}
    return 1 if "fail" in statuses else 2 if statuses - {"ok"} else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", help="device under test: cuda (default) or cpu (dry run)")
    p.add_argument("--shape", choices=sorted(SHAPES), default="gpu", help="gpu: Llama-3.1-8B on an H200; tiny: dry run")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "outputs/gpu-check")),
                   help="output folder (default $OUT, else outputs/gpu-check)")
    p.add_argument("--wheels", type=Path, default=None,
                   help="carried wheels (fetch_wheels.py); default .gpu-wheels with --device cuda, none with "
                        "--device cpu; a folder without wheels = this Python's own packages")
    p.add_argument("--budget-s", type=float, default=480.0, help="all checks together, seconds (default 480)")
    p.add_argument("--only", nargs="*", choices=[c.name for c in CHECKS], help="run only these checks")
    args = p.parse_args(argv)
    started = time.perf_counter()
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pdreal-gpu-check-"))
    checks = [c for c in CHECKS if not args.only or c.name in args.only]
    results: list[dict[str, Any]] = []
    with (args.out / "check.log").open("w") as log:
        wheels = args.wheels or (REPO / ".gpu-wheels" if args.device.startswith("cuda") else None)
        env = prepare_environment(wheels, work, log)
        env_facts = describe_environment(env, args.device, args.shape, log)
        write_summary(args.out, env_facts, results, [c.name for c in checks])
        attention = "torch"
        for check in checks:
            left = args.budget_s - (time.perf_counter() - started) - RESERVE_S
            limit = min(check.limit_s if args.shape == "gpu" else check.limit_s / 2, left)
            if limit < 5:
                results.append({"name": check.name, "status": "timeout", "seconds": 0.0,
                                "summary": "not started: the budget was spent"})
            else:
                common = ["--device", args.device, "--shape", args.shape, "--out", str(args.out)]
                extra = [] if check.name == "kernels" else ["--attention", attention]
                extra += ["--work", str(work / "pd")] if check.name == "pd" else []
                results.append(run_check(check, common + extra, env, limit, log))
                if check.name == "kernels" and results[-1].get("flashinfer_ok"):
                    attention = "flashinfer"  # the profile and PD checks then run the engine's GPU path
            write_summary(args.out, env_facts, results, [c.name for c in checks])
        code = exit_code(results)
        log.write(f"\nGPU check: exit {code} after {time.perf_counter() - started:.1f} s\n")
    print((args.out / "summary.md").read_text())
    print(f"GPU check: exit {code}; outputs in {args.out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
