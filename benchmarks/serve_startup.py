"""Seconds from `pdreal serve` to ready, this checkout vs a baseline checkout, interleaved.

    .venv/bin/python benchmarks/serve_startup.py --baseline ../base --runs 3 [serve overrides...]

Each run starts `pdreal serve` (1 prefill + 1 decode + router, SmolLM2 unless overridden) with
the checkout's code (PYTHONPATH), waits for its `pdreal serve: ready at` line, then stops it
with Ctrl-C (SIGINT) and times the shutdown too. Prints the median and every run.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
READY = "pdreal serve: ready at"


def one_start(checkout: Path, overrides: list[str], timeout_s: float) -> tuple[float, float]:
    """(seconds to ready, seconds to exit after SIGINT)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = "import sys; from pdreal.cli import main; sys.exit(main())"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, "serve", *overrides], cwd=checkout, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = float("nan")
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith(READY):
            ready = time.perf_counter() - start
            break
        if time.perf_counter() - start > timeout_s:
            break
    stop = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return ready, time.perf_counter() - stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout-s", type=float, default=300.0)
    parser.add_argument("overrides", nargs="*", help="pdreal serve key=value overrides")
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {"this checkout": [], "baseline": []}
    for _ in range(args.runs):
        for name, checkout in (("this checkout", HERE), ("baseline", args.baseline.resolve())):
            results[name].append(one_start(checkout, args.overrides, args.timeout_s))
    print("| checkout | ready s (median) | runs | stop s (median) |\n|---|---:|---|---:|")
    for name, runs in results.items():
        ready = [r for r, _ in runs]
        print(f"| {name} | {statistics.median(ready):.1f} | {', '.join(f'{r:.1f}' for r in ready)} | "
              f"{statistics.median(s for _, s in runs):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
