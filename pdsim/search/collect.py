"""Gather the rows of a multirun (`result.json` per job) into one table.

Registered as a hydra callback in scenarios/config.yaml; after a multirun it writes
`results.parquet` and `results.csv` into the sweep directory and prints the best
configuration per GPU budget. `gather(sweep_dir)` does the same from Python.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pdsim.search.rows import RESULT_FILE

log = logging.getLogger(__name__)


def gather(sweep_dir: Path) -> pd.DataFrame:
    """One row per job that wrote a result, ordered by job number."""
    rows = []
    for path in sorted(Path(sweep_dir).glob(f"*/{RESULT_FILE}"), key=lambda p: _job_key(p.parent.name)):
        row = json.loads(path.read_text())
        row["job"] = path.parent.name
        rows.append(row)
    return pd.DataFrame(rows)


def best_per_budget(results: pd.DataFrame) -> pd.DataFrame:
    """For each GPU count, the configuration with the highest goodput (or attainment)."""
    if results.empty:
        return results
    score = "goodput_rps" if "goodput_rps" in results.columns else "attainment_both"
    ordered = results.sort_values(["gpus", score, "job"], ascending=[True, False, True], kind="stable")
    return ordered.groupby("gpus", sort=True).head(1).reset_index(drop=True)


LAYOUT_COLUMNS = ("prefill_dp", "decode_dp", "colocated_dp", "prefill_moe_ep", "decode_moe_ep", "colocated_moe_ep")
A2A_COLUMNS = ("prefill_moe_a2a", "decode_moe_a2a", "colocated_moe_a2a")


def format_results(results: pd.DataFrame) -> str:
    """The table's main columns; DP / EP columns only where some row has DP or EP above 1, MoE
    exchange columns only where some row names one."""
    layout = [c for c in LAYOUT_COLUMNS if c in results.columns and (results[c] != 1).any()]
    layout += [c for c in A2A_COLUMNS if c in results.columns and (results[c].fillna("") != "").any()]
    columns = [c for c in ("job", "mode", "prefill", "decode", "colocated", "prefill_tp", "decode_tp", *layout,
                           "gpus", "routing", "rate_rps", "attainment_both", "ttft_mean_s", "tpot_mean_s",
                           "goodput_rps", "goodput_per_gpu_rps") if c in results.columns]
    return results[columns].to_string(index=False, float_format=lambda v: f"{v:.4g}")


def write_results(sweep_dir: Path) -> pd.DataFrame:
    results = gather(sweep_dir)
    if results.empty:
        log.warning("no %s found under %s", RESULT_FILE, sweep_dir)
        return results
    results.to_parquet(Path(sweep_dir) / "results.parquet", index=False)
    results.to_csv(Path(sweep_dir) / "results.csv", index=False)
    print(f"\nsweep results ({len(results)} jobs) -> {sweep_dir}/results.parquet, results.csv")
    print(format_results(results))
    print("\nbest configuration per GPU budget:")
    print(format_results(best_per_budget(results)))
    return results


def _job_key(name: str) -> tuple[int, Any]:
    return (0, int(name)) if name.isdigit() else (1, name)


class GatherResults(Callback):
    """Hydra callback: gather the sweep's rows when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        write_results(Path(config.hydra.sweep.dir))
