"""Predicted vs measured step latency for Llama-2-70B at TP8 on A100 and H100 (issue 4's table).

    .venv/bin/python benchmarks/perf_table.py [--data-dir DIR]

Measured: Splitwise's profile (calibration/splitwise_perf_model.csv, vLLM, median of repeats).
Decode at "2k context" is the batch-1 row with a 2048-token prompt (mean context 2048 + 128/2);
Splitwise never measured batch 64 at that context, so its batch-64 row is at 512 + 64 and the
batch-64/2k line compares against the table model's interpolation (marked *).

Model kinds:
- roofline: catalog specs with the default efficiencies (scenarios/perf/roofline.yaml);
- roofline-cal: mfu, mbu and the two overheads fitted (as `pdsim calibrate --kind roofline` does) to the
  TP8 rows (in sample);
- fitted: DistServe's formula fitted to the TP8 rows (DistServe's JSON has no Llama-2-70B; in sample);
- table: interpolation of the TP8 rows (exact at measured points).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

from pdsim.paths import resolve_data_path
from pdsim.perf import catalog
from pdsim.perf.base import LatencyModel
from pdsim.perf.fit import calibrated_roofline, fit_fitted, fit_roofline
from pdsim.perf.profile import ProfilePoint, read_splitwise_csv
from pdsim.perf.roofline import RooflineModel
from pdsim.perf.table import TableModel

SPLITWISE = "calibration/splitwise_perf_model.csv"
HARDWARE = (("a100_80g", "a100-80gb"), ("h100", "h100-80gb"))
# (label, phase, num_seqs, tokens per sequence: prompt for prefill, mean context for decode)
QUERIES = (
    ("prefill 1k tokens", "prefill", 1, 1024),
    ("prefill 8k tokens", "prefill", 1, 8192),
    ("decode b1 @ 2k ctx", "decode", 1, 2048 + 64),
    ("decode b64 @ 2k ctx", "decode", 64, 2048 + 64),
    ("decode b64 @ 576 ctx", "decode", 64, 512 + 64),
)


def measured_s(points: list[ProfilePoint], phase: str, seqs: int, tokens: int) -> float | None:
    """Median of the profile rows at exactly this step, or None if never measured."""
    total = seqs * tokens
    key = "new_tokens" if phase == "prefill" else "context_tokens"
    hits = [
        p.latency_s
        for p in points
        if p.kind == phase and p.num_seqs == seqs and getattr(p, key) == total
    ]
    return float(np.median(hits)) if hits else None


def predict_s(model: LatencyModel, phase: str, seqs: int, tokens: int) -> float:
    if phase == "prefill":
        return model.prefill_time_s([(tokens, 0)] * seqs)
    return model.decode_time_s(seqs, seqs * tokens)


def build_models(
    path, hw_name: str, table_hw: str
) -> tuple[dict[str, LatencyModel], list[ProfilePoint]]:
    model = catalog.load_model("llama2_70b")
    hardware = catalog.load_hardware(hw_name)
    tp8 = read_splitwise_csv(path, "llama2-70b", table_hw, 8)
    cal = fit_roofline({8: tp8}, model, hardware)
    models: dict[str, LatencyModel] = {
        "roofline": RooflineModel(model, hardware, 8),
        "roofline-cal": calibrated_roofline(model, hardware, 8, cal),
        "fitted": fit_fitted(tp8),
        "table": TableModel.from_points(tp8),
    }
    print(
        f"{hw_name}: roofline-cal from TP8 rows: mfu={cal.mfu:.3f} mbu={cal.mbu:.3f} overhead={cal.overhead_s * 1e3:.1f} ms + {cal.overhead_per_seq_s * 1e3:.2f} ms/seq"
    )
    return models, tp8


def row(
    label: str, reference: float | None, fallback: Callable[[], float], preds: dict[str, float]
) -> str:
    ref, mark = (reference, "") if reference is not None else (fallback(), "*")
    cells = [f"{v * 1e3:8.1f} ({(v - ref) / ref * 100:+5.1f}%)" for v in preds.values()]
    shown = f"{reference * 1e3:8.1f}" if reference is not None else "       —"
    return f"| {label:<22} | {shown} | " + " | ".join(cells) + f" |{mark}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", default="", help="shared data dir (default ../shared/data)")
    args = parser.parse_args(argv)
    path = resolve_data_path(SPLITWISE, args.data_dir)
    if not path.is_file():
        print(f"skipped: {path} not found")
        return 0
    for hw_name, table_hw in HARDWARE:
        models, tp8 = build_models(path, hw_name, table_hw)
        print(f"\nLlama-2-70B TP8 on {hw_name} — ms (error vs measured)")
        print(
            "| step                   | measured | " + " | ".join(f"{k:>18}" for k in models) + " |"
        )
        print("|---|---:|" + "---:|" * len(models))
        for label, phase, seqs, tokens in QUERIES:
            preds = {k: predict_s(m, phase, seqs, tokens) for k, m in models.items()}
            ref = measured_s(tp8, phase, seqs, tokens)
            print(row(label, ref, lambda p=preds: p["table"], preds))
    print("\n* not measured by Splitwise: errors are relative to the table model's interpolation.")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
