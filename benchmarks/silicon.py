"""pdsim against measured GPU serving results (silicon rows), beside NVIDIA AIConfigurator.

    .venv/bin/python benchmarks/silicon.py --rows ../shared/data/silicon/silicon_dev.csv --out PRED.csv

For every row of a file shaped like silicon_dev.csv (README beside it) this builds the pdsim run
the row describes (silicon_parse.py, silicon_models.py, silicon_rows.py: model, system ->
hardware, backend -> operator tables, quantization, parallelism, agg -> one colocated engine /
disagg -> P and D workers with TP per side, isl/osl, client concurrency), simulates the closed loop the benchmark ran (silicon_run.py)
and writes `id,pdsim_ttft_ms,pdsim_tpot_ms,status,reason` for every row: status `ok`, or
`unsupported` with every missing feature named (`error` if pdsim failed on a row it accepted).
Then it prints the error tables (silicon_errors.py) for pdsim and for AIConfigurator 0.12.0 on
the same rows (silicon_aic.py: its own venv, a subprocess, cached predictions). docs/SILICON.md
has the method, the outlier rule and a full run's tables.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pandas as pd  # noqa: E402
import silicon_errors as errors  # noqa: E402
from silicon_parse import RowPlan, concurrency_of, load_catalog, parse_row  # noqa: E402
from silicon_rows import PHASES, TRTLLM_MOE_DEFAULT, TRTLLM_MOE_SOURCES, plan_row, with_overrides  # noqa: E402
from silicon_run import STATUS_ERROR, STATUS_OK, Prediction, predict  # noqa: E402
from tqdm import tqdm  # noqa: E402

OUT_COLUMNS = ("id", "pdsim_ttft_ms", "pdsim_tpot_ms", "status", "reason")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if rows and not {"id", "model_path", "system", "mode"} <= set(rows[0]):
        raise SystemExit(f"silicon: error: {path}: not a silicon-shaped CSV (needs id, model_path, system, mode)")
    return rows


def plan_all(raw: list[dict[str, str]], prefix_cache: str = "off", phases: str = "harness",
             extra: tuple[str, ...] = (), trtllm_moe: str = TRTLLM_MOE_DEFAULT) -> list[RowPlan | Prediction]:
    """A plan per row (with `extra` overrides in place of the plan's own for the same keys), or an
    `error` prediction where the row itself cannot be read."""
    catalog = load_catalog()
    out: list[RowPlan | Prediction] = []
    for r in raw:
        try:
            plan = plan_row(parse_row(r), catalog, prefix_cache, phases, trtllm_moe)
            out.append(replace(plan, overrides=with_overrides(plan.overrides, extra)) if plan.supported else plan)
        except ValueError as exc:
            out.append(Prediction(r.get("id", "?"), float("nan"), float("nan"), STATUS_ERROR, str(exc)))
    return out


def predict_all(plans: list[RowPlan | Prediction], jobs: int) -> list[Prediction]:
    """pdsim's prediction per row, in input order (supported rows simulated, with a progress bar)."""
    done: dict[int, Prediction] = {}
    todo = []
    for i, p in enumerate(plans):
        if isinstance(p, Prediction):
            done[i] = p
        elif not p.supported:
            done[i] = predict(p)
        else:
            todo.append(i)
    bar = tqdm(total=len(todo), desc="pdsim", unit="row")
    if jobs > 1 and len(todo) > 1:
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            for i, pred in zip(todo, pool.imap(predict, [plans[i] for i in todo]), strict=True):
                done[i] = pred
                bar.update()
    else:
        for i in todo:
            done[i] = predict(plans[i])  # type: ignore[arg-type]
            bar.update()
    bar.close()
    return [done[i] for i in range(len(plans))]


def write_predictions(preds: list[Prediction], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(OUT_COLUMNS)
        for p in preds:
            writer.writerow([p.id, _num(p.ttft_ms), _num(p.tpot_ms), p.status, p.reason])


def _num(value: float) -> str:
    return "" if value != value else f"{value:.3f}"


def frame(raw: list[dict[str, str]], preds: list[Prediction], aic: dict | None) -> pd.DataFrame:
    """One row per input row: its fields, both predictors' answers and the outlier flag."""
    df = pd.DataFrame(raw)
    for col in ("isl", "osl", "silicon_ttft_ms", "silicon_tpot_ms"):
        df[col] = pd.to_numeric(df[col], errors="coerce")
    df["concurrency"] = [concurrency_of(r) for r in raw]
    df["model"] = df["model_path"].str.split("/").str[-1]
    df["pdsim_ttft_ms"] = [p.ttft_ms for p in preds]
    df["pdsim_tpot_ms"] = [p.tpot_ms for p in preds]
    df["pdsim_ok"] = [p.status == STATUS_OK for p in preds]
    df["reason"] = [p.reason for p in preds]
    if aic is not None:
        got = [aic.get(r["id"]) for r in raw]
        df["aic_ttft_ms"] = [g.ttft_ms if g else float("nan") for g in got]
        df["aic_tpot_ms"] = [g.tpot_ms if g else float("nan") for g in got]
        df["aic_ok"] = [bool(g and g.ok) for g in got]
        df["aic_run"] = [g is not None for g in got]
    df["suspect"] = errors.suspect_rows(df)
    return df


def gap_counts(preds: list[Prediction]) -> Counter:
    """How many rows miss each feature (a row can miss several)."""
    counts: Counter = Counter()
    for p in preds:
        if p.status != STATUS_OK:
            counts.update(f"{p.status}: {g.strip()}" for g in p.reason.split(";") if g.strip())
    return counts


def report(df: pd.DataFrame, preds: list[Prediction], aic_mode: str) -> str:
    """The printed (markdown) report: coverage, gaps, and the error tables."""
    ok = df[df["pdsim_ok"]]
    parts = [f"rows: {len(df)}; pdsim ok: {len(ok)} ({100 * len(ok) / max(len(df), 1):.1f}%); "
             f"suspect measurements flagged: {(df['suspect'] != '').sum()} (kept; see silicon_errors.py)", "",
             "## Why rows are not expressed (a row may miss several features)", "",
             "| rows | missing |", "|---:|---|"]
    parts += [f"| {n} | {gap} |" for gap, n in gap_counts(preds).most_common(25)]
    predictors = {"pdsim": "pdsim"}
    if aic_mode != "off":
        predictors["AIConfigurator"] = "aic"
    parts += ["", "## On the rows pdsim expresses (both predictors)", "",
              errors.markdown(errors.error_table(ok, predictors))]
    both = ok[ok["aic_ok"]] if aic_mode != "off" else ok.iloc[:0]
    if aic_mode != "off" and len(both) < len(ok):
        parts += ["", f"## Head to head: the {len(both)} rows both predict", "",
                  errors.markdown(errors.error_table(both, predictors, by_group=False))]
    if aic_mode == "all":
        parts += ["", "## Every row, each predictor's own coverage", "",
                  errors.markdown(errors.error_table(df, predictors))]
    flagged = df[df["suspect"] != ""][["id", "silicon_ttft_ms", "silicon_tpot_ms", "suspect"]]
    if len(flagged):
        parts += ["", "## Suspect measurements (kept in every table above)", "",
                  errors.markdown([[r.id, f"{r.silicon_ttft_ms:.1f}", f"{r.silicon_tpot_ms:.1f}", r.suspect]
                                   for r in flagged.itertuples()], ["id", "TTFT ms", "TPOT ms", "why"])]
    return "\n".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=Path, required=True, help="silicon-shaped CSV (e.g. ../shared/data/silicon/silicon_dev.csv)")
    p.add_argument("--out", type=Path, required=True, help="predictions CSV to write: id,pdsim_ttft_ms,pdsim_tpot_ms,status,reason")
    p.add_argument("--aic", choices=("ours", "all", "off"), default="ours",
                   help="AIConfigurator 0.12.0 on: the rows pdsim expresses (default), every row "
                        "(~2 s a row the first time; cached afterwards), or none")
    p.add_argument("--jobs", type=int, default=1, help="pdsim worker processes (default 1)")
    p.add_argument("--aic-jobs", type=int, default=1, help="AIConfigurator worker processes (default 1)")
    p.add_argument("--limit", type=int, default=0, help="only the first N rows (0 = all)")
    p.add_argument("--report", type=Path, help="also write the report (markdown) to this file")
    p.add_argument("--prefix-cache", choices=("off", "engine"), default="off",
                   help="off (default): every prompt computed; engine: AIPerf's 100-prompt pool repeats hit the "
                        "engine's prefix cache where its deployment enables one (vLLM, SGLang; docs/SILICON.md)")
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                   help="a hydra override for every row's run, in place of the row's own value for KEY "
                        "(repeatable; e.g. --set perf.prefill_host_s_per_moe_layer=0.001 to try an engine constant)")
    p.add_argument("--phases", choices=PHASES, default="harness",
                   help="harness (default): each row's own benchmark client (AIPerf's phases for "
                        "AIConfigurator's collection, InferenceX's bench_serving run for the rest); aiperf: AIPerf's "
                        "phases for every row; steady: one continuous loop, its steady-state window (docs/SILICON.md)")
    p.add_argument("--trtllm-moe", choices=TRTLLM_MOE_SOURCES, default=TRTLLM_MOE_DEFAULT,
                   help="tables: TRT-LLM's fp8 block-scale experts from its own set (DeepGEMM); recipe: the kernel "
                        "each side's recipe or launch script chose, trtllm-gen from the SGLang set of the GPU where "
                        "it chose TRTLLM; recipe_tp (default): the same on sides without expert parallelism only, "
                        "DeepGEMM's rows elsewhere (docs/SILICON.md)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    raw = read_rows(args.rows)[: args.limit or None]
    for item in args.extra:
        if "=" not in item:
            raise SystemExit(f"silicon.py: --set {item!r} is not KEY=VALUE")
    plans = plan_all(raw, args.prefix_cache, args.phases, tuple(args.extra), args.trtllm_moe)
    preds = predict_all(plans, args.jobs)
    write_predictions(preds, args.out)
    pdsim_s = time.perf_counter() - start
    aic = None
    if args.aic != "off":
        import silicon_aic

        wanted = raw if args.aic == "all" else [r for r, p in zip(raw, preds, strict=True) if p.status == STATUS_OK]
        aic = silicon_aic.predict_rows(wanted, workers=args.aic_jobs)
    text = report(frame(raw, preds, aic), preds, args.aic)
    text += f"\n\npdsim: {len(raw)} rows in {pdsim_s:.0f} s (jobs={args.jobs}); total {time.perf_counter() - start:.0f} s"
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    print(f"\npredictions: {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
