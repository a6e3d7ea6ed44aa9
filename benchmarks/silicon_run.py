"""pdsim's prediction for one planned silicon row: compose the config, simulate the closed loop.

The row's benchmark (a closed loop of C clients, fixed isl/osl, TTFT and TPOT averaged over the
requests) is replayed as `scenario=bench_random` with the row's concurrency; the prediction is
the mean TTFT and mean TPOT over the steady-state window (pdsim.workload.closed_loop: the first
C requests are warm-up, the window closes when the first client has nothing left to send).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from silicon_parse import RowPlan

STATUS_OK, STATUS_UNSUPPORTED, STATUS_ERROR = "ok", "unsupported", "error"


@dataclass(frozen=True)
class Prediction:
    id: str
    ttft_ms: float
    tpot_ms: float
    status: str
    reason: str
    wall_s: float = 0.0


def _compose(overrides: tuple[str, ...]):
    from hydra import compose, initialize_config_dir

    from pdsim.config import register_configs, to_config
    from pdsim.paths import SCENARIOS_DIR

    register_configs()
    with initialize_config_dir(str(SCENARIOS_DIR), version_base="1.3"):
        return to_config(compose("config", overrides=list(overrides)))


def predict(plan: RowPlan) -> Prediction:
    """The row's prediction; `unsupported` (with every gap) when pdsim cannot express it."""
    row_id = plan.row.id
    if not plan.supported:
        return Prediction(row_id, math.nan, math.nan, STATUS_UNSUPPORTED, "; ".join(plan.missing))
    from pdsim.run import run_simulation

    logging.getLogger("pdsim").setLevel(logging.ERROR)
    start = time.perf_counter()
    try:
        out = run_simulation(_compose(plan.overrides), progress=False)
        _check_closed_loop(out.trace["arrival_s"].to_numpy(), plan.row.concurrency)
    except StaleCoreError:
        raise
    except ValueError as exc:  # pdsim refused the shape (e.g. a TP without all-reduce tables)
        return Prediction(row_id, math.nan, math.nan, STATUS_UNSUPPORTED, _one_line(exc))
    except Exception as exc:  # noqa: BLE001 - reported per row, the run goes on
        return Prediction(row_id, math.nan, math.nan, STATUS_ERROR, f"{type(exc).__name__}: {_one_line(exc)}")
    wall_s = time.perf_counter() - start
    summary = out.summary
    loop = summary.get("closed_loop") or {}
    ttft_ms, tpot_ms = 1e3 * summary["ttft_s"]["mean"], 1e3 * summary["tpot_s"]["mean"]
    notes = [plan.note]
    if not loop.get("steady_state_reached", False):
        notes.append("steady state not reached: means over every request")
    if summary.get("failed") or summary.get("rejected"):
        notes.append(f"{summary.get('failed', 0)} failed, {summary.get('rejected', 0)} rejected")
    if not (math.isfinite(ttft_ms) and math.isfinite(tpot_ms)):
        return Prediction(row_id, ttft_ms, tpot_ms, STATUS_ERROR, "no finished request; " + "; ".join(notes), wall_s)
    return Prediction(row_id, ttft_ms, tpot_ms, STATUS_OK, "; ".join(n for n in notes if n), wall_s)


class StaleCoreError(RuntimeError):
    """The simulator that ran ignored scenario.concurrency (an old compiled core)."""


def _check_closed_loop(arrival_s, concurrency: int) -> None:
    """A closed loop sends its first `concurrency` requests at t=0; an open-loop trace does not."""
    first = sorted(arrival_s)[:concurrency]
    if any(t != 0.0 for t in first):
        raise StaleCoreError("the simulator ran open loop (scenario.concurrency ignored): its compiled core is "
                             "older than its sources; rebuild (pip install -e .) or set PDSIM_PURE_PYTHON=1")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
