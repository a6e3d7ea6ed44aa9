"""Report entry points: `pdsim report` (CLI) and the library calls `pdsim run` / `pdsim sweep` use.

    pdsim report SIM.parquet REAL.parquet -o report/    compare two runs (SIM against REAL)
    pdsim report RUN.parquet -o report/                 one run's report

The SLO comes from --slo-* flags, else from the first `.summary.json` found beside a trace,
else from the defaults of `pdsim.config.SloConfig`. Input problems end with a one-line error and exit code 2;
nothing is written in that case.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from analysis.compare import compare
from analysis.html import write_document
from analysis.load import (
    LoadedTrace,
    checked_frame,
    checked_timeseries,
    labels_from_paths,
    load_trace,
)
from analysis.run_doc import run_document
from analysis.sections import comparison_document
from analysis.sweep import write_sweep_report
from pdsim.config import SloConfig
from pdsim.metrics import TPOT_DEFINITIONS, Slo
from pdsim.trace import TraceError

log = logging.getLogger(__name__)

__all__ = [
    "main",
    "write_comparison_report",
    "write_run_report",
    "write_sweep_report",
    "resolve_slo",
]


def resolve_slo(
    summary: dict[str, Any] | None,
    ttft_s: float | None = None,
    tpot_s: float | None = None,
    target: float | None = None,
) -> Slo:
    """Explicit values first, then the summary's `slo` entry, then SloConfig's defaults."""
    default = SloConfig()
    found = (summary or {}).get("slo") or {}
    chosen = {
        "ttft_s": ttft_s if ttft_s is not None else found.get("ttft_s", default.ttft_s),
        "tpot_s": tpot_s if tpot_s is not None else found.get("tpot_s", default.tpot_s),
        "target": target if target is not None else found.get("target", default.attainment_target),
    }
    for name, value in chosen.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            raise TraceError(f"slo: field {name!r} has invalid value {value!r} (need a number > 0)")
    return Slo(float(chosen["ttft_s"]), float(chosen["tpot_s"]), float(chosen["target"]))


def _tpot_definition(summary: dict[str, Any] | None, given: str | None) -> str:
    definition = given or str((summary or {}).get("tpot_definition", SloConfig().tpot_definition))
    if definition not in TPOT_DEFINITIONS:
        raise TraceError(f"summary: field 'tpot_definition' has invalid value {definition!r}")
    return definition


def write_comparison_report(
    a: LoadedTrace,
    b: LoadedTrace,
    out_dir: Path | str,
    slo: Slo | None = None,
    tpot_definition: str | None = None,
    seed: int = 0,
) -> Path:
    """Compare run `a` (candidate) with run `b` (reference); return the HTML report's path."""
    slo = slo or resolve_slo(a.summary or b.summary)
    definition = _tpot_definition(a.summary or b.summary, tpot_definition)
    result = compare(a, b, slo, definition)
    return write_document(comparison_document(result, a, b, seed), out_dir)


def write_run_report(
    trace_df: pd.DataFrame,
    summary: dict[str, Any],
    timeseries_df: pd.DataFrame | None,
    out_dir: Path | str,
    label: str = "run",
    slo: Slo | None = None,
    seed: int = 0,
) -> Path:
    """One run's report (latency CDFs, attainment vs SLO scale, stages, timeline, utilisation).

    `summary` is `pdsim.metrics.summarize`'s dict (its `slo` and `tpot_definition` are used
    unless `slo` is given). Returns the HTML report's path.
    """
    frame = checked_frame(trace_df, label)
    ts = (
        checked_timeseries(timeseries_df, f"{label} timeseries")
        if timeseries_df is not None
        else None
    )
    trace = LoadedTrace(label, frame, label, summary, ts)
    doc = run_document(
        trace, summary, slo or resolve_slo(summary), _tpot_definition(summary, None), seed
    )
    return write_document(doc, out_dir)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdsim report",
        description="Compare a simulated trace with a measured one (SIM first, REAL as the reference), "
        "or report on a single run. Writes report.html (self-contained), summary.md, "
        "report.json and figures/*.png.",
    )
    parser.add_argument(
        "traces",
        nargs="+",
        type=Path,
        metavar="TRACE.parquet",
        help="one trace (run report) or two (comparison: candidate, then reference)",
    )
    parser.add_argument(
        "-o", "--out", type=Path, default=Path("report"), help="output directory (default: report/)"
    )
    parser.add_argument("--labels", nargs="+", help="names for the traces (default: the shortest path tails that differ)")
    parser.add_argument(
        "--timeseries",
        nargs="+",
        type=Path,
        metavar="TS.parquet",
        help="timeseries files, one per trace (default: TRACE.timeseries.parquet if present)",
    )
    parser.add_argument("--slo-ttft-s", type=float, help="TTFT SLO in seconds")
    parser.add_argument("--slo-tpot-s", type=float, help="TPOT SLO in seconds")
    parser.add_argument("--slo-target", type=float, help="attainment target, e.g. 0.9")
    parser.add_argument(
        "--tpot-definition",
        choices=TPOT_DEFINITIONS,
        help="TPOT definition (default: from summary, else standard)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed for the timeline's request sample"
    )
    return parser


def _load_all(args: argparse.Namespace) -> list[LoadedTrace]:
    if len(args.traces) > 2:
        raise TraceError(f"{len(args.traces)} traces given; `pdsim report` takes one or two")
    labels = args.labels or labels_from_paths(args.traces)
    if len(labels) != len(args.traces) or len(set(labels)) != len(labels):
        raise TraceError(f"--labels {labels}: need {len(args.traces)} distinct labels")
    series = args.timeseries or [None] * len(args.traces)
    if len(series) != len(args.traces):
        raise TraceError(f"--timeseries: {len(series)} files for {len(args.traces)} traces")
    return [
        load_trace(p, name, ts) for p, name, ts in zip(args.traces, labels, series, strict=True)
    ]


def run(args: argparse.Namespace) -> Path:
    traces = _load_all(args)
    first = traces[0]
    found = next((t.summary for t in traces if t.summary), None)
    slo = resolve_slo(found, args.slo_ttft_s, args.slo_tpot_s, args.slo_target)
    if len(traces) == 1:
        summary = first.summary or {}
        if args.tpot_definition:
            summary = {**summary, "tpot_definition": args.tpot_definition}
        doc = run_document(first, summary, slo, _tpot_definition(summary, None), args.seed)
        return write_document(doc, args.out)
    return write_comparison_report(first, traces[1], args.out, slo, args.tpot_definition, args.seed)


def main(argv: list[str] | None = None) -> int:
    """`pdsim report ...`; returns the exit code (0 ok, 2 bad input)."""
    args = build_parser().parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        path = run(args)
    except TraceError as exc:
        print(f"pdsim report: error: {exc}", file=sys.stderr)
        return 2
    print(f"report written to {path} (markdown: {path.with_name('summary.md')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
