"""A stratified, seeded sample of silicon rows, so that an A/B on a subset can be redrawn.

    .venv/bin/python benchmarks/silicon_sample.py --rows ../shared/data/silicon/silicon_dev.csv \
        --out MOE_A.csv --kind moe --per-group 10 --seed 7 [--exclude MOE_B.csv ...]

Rows are grouped by (model_path, system, backend, mode); from every group, in sorted order,
`--per-group` rows (all, where the group has fewer) are drawn without replacement by one named
stream (`pdsim.rng.stream(seed, "silicon_sample")`) over the group's ids sorted. `--exclude`
drops the ids of earlier samples first, so that a sample drawn after a choice is disjoint from
the rows the choice was made on. `--kind moe|dense` keeps the
rows whose model pdsim's catalog knows as MoE (experts > 0) or as dense; rows of a model the
catalog does not know are kept under `all` only. The output has the input's columns and order.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from silicon_parse import MODELS  # noqa: E402

from pdsim.rng import stream  # noqa: E402

KINDS = ("all", "moe", "dense")
GROUP_FIELDS = ("model_path", "system", "backend", "mode")


def model_kind(model_path: str) -> str:
    """`moe`, `dense`, or `unknown` (a model the benchmark has no catalog entry for)."""
    from pdsim.perf import catalog

    name = MODELS.get(model_path)
    if name is None:
        return "unknown"
    return "moe" if catalog.load_model(name).num_experts > 0 else "dense"


def ids_in(paths: Iterable[Path]) -> set[str]:
    seen: set[str] = set()
    for path in paths:
        with path.open(newline="") as f:
            seen.update(row["id"] for row in csv.DictReader(f))
    return seen


def stratified(rows: list[dict[str, str]], per_group: int, seed: int) -> list[dict[str, str]]:
    """Up to `per_group` rows of every group, drawn by one seeded stream in sorted group order;
    returned in the input's order."""
    groups: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for row in rows:
        groups[tuple(row[f] for f in GROUP_FIELDS)].append(row["id"])
    rng = stream(seed, "silicon_sample")
    chosen: set[str] = set()
    for key in sorted(groups):
        ids = sorted(groups[key])
        picked = rng.choice(len(ids), size=per_group, replace=False) if len(ids) > per_group else range(len(ids))
        chosen.update(ids[i] for i in picked)
    return [row for row in rows if row["id"] in chosen]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=Path, required=True, help="silicon-shaped CSV to draw from")
    p.add_argument("--out", type=Path, required=True, help="sample CSV to write (same columns)")
    p.add_argument("--kind", choices=KINDS, default="all", help="model kind to keep (default all)")
    p.add_argument("--per-group", type=int, default=10, help="rows per (model, system, backend, mode) (default 10)")
    p.add_argument("--seed", type=int, default=7, help="the sampler's seed (default 7)")
    p.add_argument("--exclude", type=Path, nargs="*", default=[], help="samples whose ids to leave out")
    args = p.parse_args(argv)
    if args.per_group < 1:
        p.error(f"--per-group must be at least 1, got {args.per_group}")
    with args.rows.open(newline="") as f:
        reader = csv.DictReader(f)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    missing = [f for f in ("id", *GROUP_FIELDS) if f not in fields]
    if missing:
        p.error(f"{args.rows}: not a silicon-shaped CSV (missing {', '.join(missing)})")
    excluded = ids_in(args.exclude)
    rows = [r for r in rows if r["id"] not in excluded
            and (args.kind == "all" or model_kind(r["model_path"]) == args.kind)]
    sample = stratified(rows, args.per_group, args.seed)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(sample)
    tmp.replace(args.out)
    groups = len({tuple(r[f] for f in GROUP_FIELDS) for r in sample})
    print(f"silicon_sample: {len(sample)} rows from {groups} groups ({len(excluded)} ids excluded) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
