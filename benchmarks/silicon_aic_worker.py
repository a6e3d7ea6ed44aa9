"""Runs inside the AIConfigurator venv (not pdsim's): predict TTFT/TPOT for silicon rows.

    <venv>/bin/python silicon_aic_worker.py ROWS.json

ROWS.json holds a list of rows (silicon_dev.csv's columns as strings). For each row one JSON
line goes to stdout as soon as it is predicted: {"id", "ttft_ms", "tpot_ms", "version", "error"}.
The row's own backend version is tried first; AIConfigurator accepts only the versions it has
tables for, so on refusal the row is retried with its default version (backend_version=None).
AIConfigurator's own log lines go to stderr. Imports nothing from pdsim.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

PARALLEL = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
AGG_FIELDS = ("batch_size", *PARALLEL)
DISAGG_FIELDS = tuple(f"{side}_{name}" for side in ("prefill", "decode")
                      for name in (*PARALLEL, "batch_size", "num_workers"))


def estimate_args(row: dict[str, str]) -> dict[str, Any]:
    """cli_estimate's keyword arguments for a row (as AIConfigurator's own accuracy tool maps them)."""
    fields = AGG_FIELDS if row["mode"] == "agg" else DISAGG_FIELDS
    return dict(
        model_path=row["model_path"], system_name=row["system"], mode=row["mode"],
        backend_name=row["backend"], backend_version=row.get("backend_version") or None,
        isl=int(float(row["isl"])), osl=int(float(row["osl"])),
        gemm_quant_mode=row.get("gemm_quant_mode") or None, moe_quant_mode=row.get("moe_quant_mode") or None,
        **{name: int(float(row[name])) for name in fields if row.get(name)},
    )


def predict(row: dict[str, str]) -> dict[str, Any]:
    from aiconfigurator.cli.api import cli_estimate

    args = estimate_args(row)
    out: dict[str, Any] = {"id": row["id"], "ttft_ms": None, "tpot_ms": None, "version": "", "error": ""}
    attempts = [args["backend_version"], None] if args["backend_version"] else [None]
    for version in attempts:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                result = cli_estimate(**{**args, "backend_version": version})
        except Exception as exc:  # noqa: BLE001 - any refusal is reported per row
            out["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            continue
        out.update(ttft_ms=float(result.ttft), tpot_ms=float(result.tpot), error="",
                   version=str(getattr(result, "backend_version", version) or ""))
        break
    return out


def main() -> None:
    rows = json.loads(open(sys.argv[1]).read())
    for row in rows:
        print(json.dumps(predict(row)), flush=True)


if __name__ == "__main__":
    main()
