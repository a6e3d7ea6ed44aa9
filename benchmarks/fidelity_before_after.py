"""Profile-only fidelity of this checkout and a baseline checkout, interleaved (issue 16's tables).

    .venv/bin/python benchmarks/fidelity_before_after.py --baseline ../base --out outputs/before_after

For each mode (PD 1P1D, colocated) each revision takes its own `pdreal profile` (with its own
code: PYTHONPATH=<checkout>; a profile is what each predicts from), then for each load
`pdsim fidelity --profile ...` runs with this checkout and with the baseline back to back. Prints, per run, the
profile-only errors (TTFT/TPOT p50/p90, goodput) and the served/profiled forward ratios per
decode batch size and prefill size (served_vs_profile.py). Minutes per run: keep the machine
quiet, and read the tables side by side only within one invocation.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PD_LOADS, COLOCATED_LOADS = (0.6, 1.0, 1.6), (0.6, 1.0)
COLUMNS = (("ttft_s", "p50"), ("ttft_s", "p90"), ("tpot_s", "p50"), ("tpot_s", "p90"), ("goodput_rps", "value"))


def fidelity(checkout: Path, out: Path, args: list[str]) -> float:
    """One `pdsim fidelity` with `checkout`'s code; returns its wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = "import sys; from pdsim.cli import main; sys.exit(main())"
    start = time.perf_counter()
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run([sys.executable, "-c", code, "fidelity", *args, "--out", str(out), "--no-report"],
                       cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
    return time.perf_counter() - start


def profile(checkout: Path, out: Path, overrides: list[str], quick: bool) -> None:
    """`pdreal profile` with `checkout`'s code into `out`."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = "import sys; from pdreal.cli import main; sys.exit(main())"
    with (out.parent / f"{out.name}.log").open("w") as log:
        subprocess.run([sys.executable, "-c", code, "profile", "--out", str(out), *(["--quick"] if quick else []),
                        *overrides], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)


def has_pilot(checkout: Path) -> bool:
    """Whether `checkout`'s `pdsim fidelity` has --pilot (a loaded probe, on by default there)."""
    cli = checkout / "analysis" / "fidelity" / "cli.py"
    return cli.is_file() and '"--pilot"' in cli.read_text()


def errors(run: Path) -> list[str]:
    path = run / "fidelity.json"
    if not path.is_file():
        return ["failed"] * len(COLUMNS)
    data = json.loads(path.read_text())
    table = data.get("table") if "calibrated_table" in data else data.get("offline_table")  # baseline's name
    rows = {(r["metric"], r["stat"]): r for r in table}
    return [f"{rows[c]['sim']:.3f}/{rows[c]['real']:.3f} ({rows[c]['rel_err']:+.0%})" for c in COLUMNS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout of the revision to compare with")
    parser.add_argument("--out", type=Path, default=Path("outputs/before_after"))
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--quick-profile", action="store_true")
    parser.add_argument("--pilot", type=int, default=0,
                        help="pilot requests (`pdsim fidelity --pilot`) for checkouts that have it; default 0, "
                             "profile and idle probes alone, so revisions before the pilot compare like for like")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[tuple[str, Path]] = []
    for mode, loads, shape in (("pd", PD_LOADS, []), ("colocated", COLOCATED_LOADS, ["--colocated", "1"])):
        profiles = {}
        for name, checkout in (("new", HERE), ("base", args.baseline.resolve())):
            profiles[name] = args.out / f"{mode}_profile_{name}"
            if not (profiles[name] / "engine.json").is_file():
                profile(checkout, profiles[name], ["cluster.mode=colocated", "cluster.colocated=1"] if shape else [],
                        args.quick_profile)
        for rate in loads:
            for name, checkout in (("new", HERE), ("base", args.baseline.resolve())):
                run = args.out / f"{mode}_{rate}_{name}"
                pilot = ["--pilot", str(args.pilot)] if has_pilot(checkout) else []
                wall = fidelity(checkout, run, [*shape, "--requests", str(args.requests), "--rate", str(rate),
                                                "--profile", str(profiles[name].resolve()), *pilot])
                print(f"{run.name}: {wall:.0f} s", flush=True)
                runs.append((f"{mode} {rate} req/s {name}", run))
    print("\n| run | " + " | ".join(f"{m} {s}" for m, s in COLUMNS) + " |")
    print("|---|" + "---|" * len(COLUMNS))
    for label, run in runs:
        print(f"| {label} | " + " | ".join(errors(run)) + " |")
    from served_vs_profile import main as ratios

    return ratios([str(run) for _, run in runs if (run / "served_steps.csv").is_file()])


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
