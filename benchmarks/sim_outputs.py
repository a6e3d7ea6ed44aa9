"""Exact-output check: every simulator output of this checkout against a baseline revision.

    .venv/bin/python benchmarks/sim_outputs.py                    # this tree vs `main`
    .venv/bin/python benchmarks/sim_outputs.py --baseline fc52d6d --quick
    .venv/bin/python benchmarks/sim_outputs.py --record OUT        # only write this tree's outputs
    .venv/bin/python benchmarks/sim_outputs.py --compare A B       # compare two recorded folders
    .venv/bin/python benchmarks/sim_outputs.py --pure              # compiled core vs its own sources

A speed change must not change a single result. This runs every scenario of the scenario tree
at a small size, every routing/admission policy, colocated (both schedules), the other perf
models, KV tiers, faults, P:D rebalancing, `skip_ahead=false`, and Mooncake conversation on 8P8D
(whole trace, linear, roofline and the default measured tables) and colocated on 16 instances, once with the baseline revision
(exported with `git archive` into a temporary folder and imported from there) and once with this
checkout, each in its own process. Per case it writes trace.parquet, trace.summary.json (metrics, instance and link
statistics; no wall times) and timeseries.parquet, then compares the files byte for byte; a
difference is reported with the first differing trace column. Exit status 1 on any difference.

With --pure the two runs are both of this checkout: its compiled simulator core (setup.py,
mypyc) against its sources run as pure Python (PDSIM_PURE_PYTHON=1); CI runs this. Each run
prints which core it imported.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SMALL = "scenario.num_requests=200"
COMPLETE = "COMPLETE"  # written last by a recording process
SCENARIOS = ("agent", "arxiv", "azure_code", "azure_conv", "chat", "code", "longctx",
             "mooncake_conversation", "mooncake_synthetic", "rag", "sharegpt")
POLICIES = ("cache_aware", "early_reject", "kv_centric", "least_loaded", "length_buckets", "token_bucket")
FAULTS = ("faults.transfer_failure_prob=0.05", "faults.crash_instance=decode:1", "faults.crash_at_s=5.0",
          "faults.retry_failed=true")
SCALING = ("policy.scaling=rebalance", "policy.scaling_interval_s=1.0", "policy.scaling_window_s=5.0",
           "policy.scaling_warmup_s=2.0", "policy.scaling_cooldown_s=5.0")


def cases(quick: bool) -> dict[str, tuple[str, ...]]:
    """Case name -> hydra overrides."""
    out: dict[str, tuple[str, ...]] = {f"{s}_small": (f"scenario={s}", SMALL) for s in SCENARIOS}
    chat = ("scenario=chat", SMALL)
    out |= {f"chat_{p}": (*chat, f"policy={p}", "cluster=4p4d") for p in POLICIES}
    out |= {
        "chat_colocated_mixed": (*chat, "cluster=colocated4"),
        "chat_colocated_priority": (*chat, "cluster=colocated4", "cluster.colocated_schedule=prefill_priority"),
        "agent_colocated_cache_aware": ("scenario=agent", SMALL, "cluster=colocated4", "policy=cache_aware"),
        "rag_linear": ("scenario=rag", SMALL, "perf=linear"),
        "sharegpt_distserve": ("scenario=sharegpt", SMALL, "model=opt_13b", "hardware=a100_80g", "perf=distserve_a100"),
        "sharegpt_compat_distserve": ("compat=distserve", "scenario=sharegpt", SMALL, "model=opt_13b",
                                      "hardware=a100_80g", "cluster=1p1d", "cluster.prefill_tp=2"),
        "rag_splitwise": ("scenario=rag", SMALL, "perf=splitwise", "model=llama2_70b", "cluster.prefill_tp=4",
                          "cluster.decode_tp=4"),
        "agent_kv_host": ("scenario=agent", SMALL, "kv_tiers=host"),
        "agent_kv_host_store": ("scenario=agent", SMALL, "kv_tiers=host_store", "cluster=4p4d"),
        "agent_kv_mooncake": ("scenario=agent", SMALL, "kv_tiers=mooncake", "cluster=4p4d"),
        "chat_faults": ("scenario=chat", "scenario.num_requests=400", "cluster=4p4d", *FAULTS),
        "chat_small_kv_retract": ("scenario=chat", SMALL, "cluster=1p1d", "cluster.kv_capacity_tokens=6000"),
        "chat_step_path": ("scenario=chat", SMALL, "skip_ahead=false"),
        "chat_rebalance": ("scenario=chat", "scenario.num_requests=600", "cluster=4p4d", *SCALING),
        "chat_max_sim_time": ("scenario=chat", SMALL, "max_sim_time_s=20"),
    }
    if not quick:
        out |= {f"mooncake_8p8d_{p}": ("scenario=mooncake_conversation", "cluster=8p8d", f"perf={p}")
                for p in ("linear", "roofline", "measured")}  # measured: the default
        out["mooncake_colocated16_linear"] = ("scenario=mooncake_conversation", "cluster=colocated4",
                                              "cluster.colocated=16", "perf=linear")
    return out


def record(out_dir: Path, quick: bool, only: list[str]) -> None:
    """Child process: simulate every case with the pdsim on sys.path, write its outputs."""
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR
    from pdsim.run import run_simulation, write_outputs

    register_configs()
    for name, overrides in cases(quick).items():
        if only and name not in only:
            continue
        with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
            cfg = to_config(compose("config", overrides=[*overrides, "progress=false"]))
        case_dir = out_dir / name
        case_dir.mkdir(parents=True, exist_ok=True)
        write_outputs(run_simulation(cfg, progress=False), case_dir)
        print(f"recorded {name}", file=sys.stderr, flush=True)
    (out_dir / COMPLETE).write_text("")


def export_tree(rev: str, into: Path, compiled: bool = False) -> Path:
    """`git archive REV` unpacked into `into` (the baseline's own pdsim and scenarios);
    `compiled`: also build its simulator core in place (mypyc, REVs that have setup.py), so a
    before/after speed comparison sets compiled against compiled (needs `pip install mypy==2.4.1`).
    A REV that is a folder (an earlier export, say, built already) is used as it is."""
    if Path(rev).is_dir():
        return Path(rev)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True,
                             capture_output=True).stdout
    into.mkdir(parents=True, exist_ok=True)
    tar_path = into.with_suffix(".tar")
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    tar_path.unlink()
    if compiled and (into / "setup.py").is_file():
        print(f"building {rev}'s compiled core (a few minutes)...", file=sys.stderr, flush=True)
        build = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=into, capture_output=True,
                               text=True, env={**os.environ, "PDSIM_REQUIRE_COMPILED": "1"})
        if build.returncode != 0:
            raise SystemExit(f"building {rev}'s compiled core failed (is mypy==2.4.1 installed?):\n{build.stderr[-2000:]}")
    return into


def tree_env(tree: Path, pure: bool = False) -> dict[str, str]:
    """Environment that makes `import pdsim` load `tree`'s copy (PYTHONPATH precedes the editable
    install's finder) and keeps the data folder of this checkout; `pure`: its sources only."""
    from_env = os.environ.get("PDSIM_DATA_DIR") or str(ROOT.parent / "shared" / "data")
    env = {**os.environ, "PYTHONPATH": str(tree), "PDSIM_DATA_DIR": from_env}
    env.pop("PDSIM_PURE_PYTHON", None)
    return {**env, "PDSIM_PURE_PYTHON": "1"} if pure else env


def run_record(tree: Path, out_dir: Path, quick: bool, only: list[str], pure: bool = False) -> bool:
    """Record `tree`'s outputs into out_dir; returns whether its core ran compiled."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--record", str(out_dir)]
    cmd += ["--quick"] * quick + [arg for name in only for arg in ("--case", name)]
    check = ("import pdsim\ntry:\n    from pdsim.compiled import core_compiled\nexcept ImportError:  # an older revision\n"
             "    core_compiled = bool\nprint(core_compiled(), pdsim.__file__)")
    compiled, where = subprocess.run([sys.executable, "-c", check], env=tree_env(tree, pure), cwd=tree, check=True,
                                     capture_output=True, text=True).stdout.split()
    if not where.startswith(str(tree)):
        sys.exit(f"sim_outputs: pdsim imported from {where}, not from {tree}")
    print(f"{out_dir.name}: {tree} ({'compiled' if compiled == 'True' else 'pure Python'} core)", flush=True)
    subprocess.run(cmd, env=tree_env(tree, pure), cwd=tree, check=True)
    return compiled == "True"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def first_difference(a: Path, b: Path) -> str:
    """Name what differs between two parquet files (columns or the first differing column)."""
    import pandas as pd

    fa, fb = pd.read_parquet(a), pd.read_parquet(b)
    if list(fa.columns) != list(fb.columns) or len(fa) != len(fb):
        return f"shape/columns differ: {fa.shape} vs {fb.shape}"
    for col in fa.columns:
        if not fa[col].equals(fb[col]):
            rows = (fa[col] != fb[col]) & ~(fa[col].isna() & fb[col].isna())
            return f"column {col!r} differs in {int(rows.sum())} rows, first at row {int(rows.idxmax())}"
    return "frames equal, file bytes differ (metadata)"


def compare(base: Path, new: Path) -> list[str]:
    """Every file under `base` must exist under `new` with the same bytes; returns the problems."""
    problems: list[str] = []
    names = sorted({p.relative_to(base) for p in base.rglob("*") if p.is_file()}
                   | {p.relative_to(new) for p in new.rglob("*") if p.is_file()})
    for rel in names:
        a, b = base / rel, new / rel
        if not a.exists() or not b.exists():
            problems.append(f"{rel}: only in {'new' if b.exists() else 'baseline'}")
        elif digest(a) != digest(b):
            why = first_difference(a, b) if rel.suffix == ".parquet" else _json_difference(a, b)
            problems.append(f"{rel}: {why}")
    return problems


def _json_difference(a: Path, b: Path) -> str:
    ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
    keys = [k for k in sorted(set(ja) | set(jb)) if ja.get(k) != jb.get(k)]
    return f"keys differ: {keys[:8]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="main", help="git revision to compare against (default main)")
    parser.add_argument("--quick", action="store_true", help="leave out the two whole Mooncake 8P8D runs")
    parser.add_argument("--case", action="append", default=[], help="only this case (repeatable)")
    parser.add_argument("--record", type=Path, help="only record this tree's outputs into a folder")
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BASE", "NEW"), help="compare two folders")
    parser.add_argument("--pure", action="store_true", help="compare this checkout's compiled core against its "
                        "sources as pure Python (fails when the core is not compiled)")
    parser.add_argument("--keep", type=Path, help="record into this folder (kept; a baseline/ already there is "
                        "reused) instead of a temporary one")
    args = parser.parse_args(argv)
    if args.record:
        record(args.record, args.quick, args.case)
        return 0
    if args.compare:
        return report(compare(*args.compare), _cases_in(args.compare[0]))
    with tempfile.TemporaryDirectory(prefix="sim_outputs_") as tmp:
        work = args.keep or Path(tmp)
        if args.pure:
            run_record(ROOT, work / "baseline", args.quick, args.case, pure=True)
        elif not (work / "baseline" / COMPLETE).exists():  # a complete kept baseline is reused
            run_record(export_tree(args.baseline, Path(tmp) / "tree"), work / "baseline", args.quick, args.case)
        if not run_record(ROOT, work / "new", args.quick, args.case) and args.pure:
            sys.exit("sim_outputs --pure: this checkout's simulator core is not compiled (pip install -e .)")
        return report(compare(work / "baseline", work / "new"), _cases_in(work / "baseline"))


def _cases_in(folder: Path) -> int:
    return sum(1 for p in folder.iterdir() if p.is_dir())


def report(problems: list[str], n_cases: int) -> int:
    for line in problems:
        print(f"DIFFERENT {line}")
    print(f"{n_cases} cases: {'all outputs identical' if not problems else f'{len(problems)} files differ'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
