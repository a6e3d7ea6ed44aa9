"""`pdsim calibrate`: fit a latency model to a measured profile and report the fit error.

    pdsim calibrate --table profile.csv --kind roofline --model llama3_8b --hardware h100 --tp 1
    pdsim calibrate --table calibration/splitwise_perf_model.csv --kind fitted --tp 8
        --model llama2_70b --hardware a100_80g --out llama2_70b_a100.json   (one line)
    pdsim calibrate --table profile.csv --kind measured --engine sglang --model llama3_70b
        --hardware h100 --tp 8 --out scenarios/perf/my_engine.yaml   (one line)

Prints the fitted parameters and the MAPE per regime (prefill; decode below / at or above the
batch threshold), with the uncalibrated model's MAPE for comparison. `--out` writes the result
where the matching perf kind reads it: a perf YAML for roofline and measured (the engine's step
scales and overheads on top of the operator tables, engine_fit.py), a DistServe-layout JSON for
fitted (point `perf.path` at it).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from pdsim.config import PerfConfig
from pdsim.parallel import Parallel
from pdsim.paths import resolve_data_path
from pdsim.perf import catalog
from pdsim.perf.base import LatencyModel
from pdsim.perf.engine_fit import fit_engine
from pdsim.perf.fit import (
    RooflineFit,
    calibrated_roofline,
    fit_fitted,
    fit_roofline,
    mape_by_regime,
)
from pdsim.perf.measured import build_measured
from pdsim.perf.profile import ProfilePoint, read_points
from pdsim.perf.roofline import RooflineModel

log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdsim calibrate",
        description=__doc__.split("\n\n")[0] + " Table formats: see pdsim/perf/profile.py.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    parser.add_argument(
        "--table",
        required=True,
        help="profile CSV (kind,num_seqs,new_tokens,context_tokens,latency_s) or Splitwise's CSV; relative paths also resolve against the data dir",
    )
    parser.add_argument(
        "--kind",
        choices=("roofline", "fitted", "measured"),
        default="roofline",
        help="what to fit (default: roofline)",
    )
    parser.add_argument(
        "--engine", default="sglang", help="measured: whose operator tables (sglang | vllm)"
    )
    parser.add_argument(
        "--model", required=True, help="model catalog name (scenarios/model), e.g. llama2_70b"
    )
    parser.add_argument(
        "--hardware",
        required=True,
        help="hardware catalog name (scenarios/hardware), e.g. a100_80g",
    )
    parser.add_argument(
        "--tp",
        type=int,
        nargs="+",
        default=[1],
        help="tensor-parallel size(s) of the profiled instances (default: 1); roofline fits one set of efficiencies over all, fitted gets coefficients per TP",
    )
    parser.add_argument(
        "--table-model", default="", help="model name inside the table, if it differs from --model"
    )
    parser.add_argument(
        "--table-hardware",
        default="",
        help="hardware name inside the table, if it differs from --hardware",
    )
    parser.add_argument(
        "--batch-threshold",
        type=int,
        default=95,
        help="decode batch size that splits the two regimes (default: 95, DistServe's)",
    )
    parser.add_argument(
        "--data-dir",
        default="",
        help="where relative --table paths resolve (default: ../shared/data or $PDSIM_DATA_DIR)",
    )
    parser.add_argument(
        "--out", type=Path, help="write the result: perf YAML (roofline) or DistServe JSON (fitted)"
    )
    return parser


def _table_path(table: str, data_dir: str) -> Path:
    path = Path(table)
    return path if path.exists() else resolve_data_path(table, data_dir)


def _print_mape(label: str, mape: dict[str, float]) -> None:
    cells = "  ".join(f"{name}={value:.1f}%" for name, value in sorted(mape.items()))
    print(f"  {label:<18} MAPE  {cells}")


def _roofline_yaml(fit: RooflineFit, args: argparse.Namespace) -> str:
    tps = ", ".join(str(tp) for tp in args.tp)
    return (
        "defaults:\n  - base_perf\n  - _self_\n"
        f"# Roofline calibrated by `pdsim calibrate` to {args.table} ({args.model} on {args.hardware}, tp {tps}).\n"
        f"kind: roofline\nmfu: {fit.mfu:.4f}\nmbu: {fit.mbu:.4f}\noverhead_s: {fit.overhead_s:.6f}\n"
        f"overhead_per_seq_s: {fit.overhead_per_seq_s:.3e}\n"
    )


def _calibrate(
    args: argparse.Namespace, points_by_tp: dict[int, list[ProfilePoint]]
) -> tuple[dict[int, LatencyModel], str]:
    """Fit; print the parameters (and the uncalibrated roofline's error); return models per TP."""
    model = catalog.load_model(args.model)
    hardware = catalog.load_hardware(args.hardware)
    if args.kind == "measured":
        return _calibrate_measured(args, points_by_tp)
    if args.kind == "fitted":
        fitted = {
            tp: fit_fitted(points, args.batch_threshold) for tp, points in points_by_tp.items()
        }
        for tp, f in fitted.items():
            print(
                f"tp {tp} fitted (ms): prefill={f.prefill_ms} decode_small={f.decode_small_ms} decode_large={f.decode_large_ms}"
            )
        entry = {
            model.hf_name or model.name: {str(tp): f.to_json_entry() for tp, f in fitted.items()}
        }
        return dict(fitted), json.dumps(entry, indent=2) + "\n"
    for tp, points in points_by_tp.items():
        _print_mape(
            f"tp {tp} default",
            mape_by_regime(RooflineModel(model, hardware, tp), points, args.batch_threshold),
        )
    fit = fit_roofline(points_by_tp, model, hardware)
    print(f"roofline: {fit}")
    models = {tp: calibrated_roofline(model, hardware, tp, fit) for tp in points_by_tp}
    return dict(models), _roofline_yaml(fit, args)


def _calibrate_measured(
    args: argparse.Namespace, points_by_tp: dict[int, list[ProfilePoint]]
) -> tuple[dict[int, LatencyModel], str]:
    model = catalog.load_model(args.model)
    hardware = catalog.load_hardware(args.hardware)
    perf = PerfConfig(kind="measured", engine=args.engine, overhead_s=0.0)
    ops = {tp: build_measured(perf, model, hardware, Parallel(tp)) for tp in points_by_tp}
    fit = fit_engine([(ops[tp], p) for tp, points in points_by_tp.items() for p in points])
    fields = fit.perf_fields()
    print("measured: " + "  ".join(f"{k}={v:.4g}" for k, v in fields.items()))
    tps = ", ".join(str(tp) for tp in args.tp)
    text = ("defaults:\n  - base_perf\n  - _self_\n"
            f"# Measured tables plus engine terms fitted by `pdsim calibrate --kind measured` to "
            f"{args.table} ({args.model} on {args.hardware}, tp {tps}).\n"
            f"kind: measured\nengine: {args.engine}\n"
            + "".join(f"{k}: {v:.6g}\n" for k, v in fields.items()))
    return {tp: fit.apply(m) for tp, m in ops.items()}, text


def _read(args: argparse.Namespace) -> dict[int, list[ProfilePoint]]:
    path = _table_path(args.table, args.data_dir)
    points_by_tp = {}
    for tp in sorted(set(args.tp)):
        points = read_points(
            path, args.table_model or args.model, args.table_hardware or args.hardware, tp
        )
        if not points:
            raise ValueError(
                f"{path}: no rows for model={args.model} hardware={args.hardware} tp={tp}"
            )
        print(f"{path}: tp {tp}: {len(points)} points")
        points_by_tp[tp] = points
    return points_by_tp


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        points_by_tp = _read(args)
        models, text = _calibrate(args, points_by_tp)
    except (OSError, KeyError, ValueError) as exc:
        print(f"pdsim calibrate: error: {exc}")
        return 2
    for tp, points in points_by_tp.items():
        _print_mape(f"tp {tp} calibrated", mape_by_regime(models[tp], points, args.batch_threshold))
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    return 0
