"""Served forwards / profiled forwards, per decode batch size and per prefill size (issue 16).

    .venv/bin/python benchmarks/served_vs_profile.py RUN_DIR [RUN_DIR ...]

Each RUN_DIR is a finished `pdsim fidelity` folder: its served_steps.csv (every forward the
instances ran during the replay, from GET /steps) is compared with its profile.csv through
pdsim's table model at the same shapes, the same prediction the profile-only simulation uses.
A ratio above 1 is a served forward slower than the profile predicts (contention for the cores,
the GIL when the engine shared its process with the HTTP server, ...). The table has, per run,
the median ratio and the count of forwards in each bucket; run folders of a before/after pair
side by side show what the process split changed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

DECODE_BUCKETS = ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16))
PREFILL_BUCKETS = ((1, 32), (33, 64), (65, 128), (129, 256), (257, 100_000))


def ratios(run_dir: Path) -> pd.DataFrame:
    """Per served forward: kind, size (decode sequences or prefill new tokens), served/predicted."""
    from analysis.fidelity.served import _predict
    from pdsim.perf.table import load_table

    steps = pd.read_csv(run_dir / "served_steps.csv")
    model = load_table(_recorded_profile(run_dir), "served", "cpu", 1)
    predicted = np.array([_predict(model, r) for r in steps.itertuples(index=False)], dtype=float)
    size = np.where(steps["kind"] == "decode", steps["num_seqs"], steps["new_tokens"])
    return pd.DataFrame({"kind": steps["kind"], "size": size, "ratio": steps["latency_s"].to_numpy() / predicted})


def _recorded_profile(run_dir: Path) -> Path:
    import json

    return Path(json.loads((run_dir / "fidelity.json").read_text())["paths"]["profile_csv"])


def bucket_table(runs: dict[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for kind, buckets in (("decode", DECODE_BUCKETS), ("prefill", PREFILL_BUCKETS)):
        for low, high in buckets:
            label = f"{kind} {'seqs' if kind == 'decode' else 'tokens'} {low}" + (f"-{high}" if high != low else "")
            row = {"bucket": label.replace("-100000", "+")}
            for name, frame in runs.items():
                sel = frame[(frame["kind"] == kind) & frame["size"].between(low, high)]["ratio"]
                row[name] = f"{sel.median():.2f}x (n={len(sel)})" if len(sel) else "-"
            rows.append(row)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="finished `pdsim fidelity` folders")
    args = parser.parse_args(argv)
    missing = [str(r) for r in args.runs if not (r / "served_steps.csv").is_file()]
    if missing:
        print(f"served_vs_profile: no served_steps.csv in {', '.join(missing)}", file=sys.stderr)
        return 2
    table = bucket_table({r.name: ratios(r) for r in args.runs})
    print("| " + " | ".join(table.columns) + " |")
    print("|" + "---|" * len(table.columns))
    for row in table.itertuples(index=False):
        print("| " + " | ".join(str(v) for v in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
