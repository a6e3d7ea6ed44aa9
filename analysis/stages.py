"""Per-request metrics derived from a trace: latencies and the time spent in each stage.

Latencies (TTFT, TPOT, E2E) come from `pdsim.metrics`, so every report uses the same
definitions as the run summaries. Stage times are differences of the trace's enter/leave
columns (see `pdsim.trace`); a stage a request never passed through is NaN, and a stage that
no request of a trace passed through (e.g. `prealloc` in a colocated run) is dropped from the
tables rather than reported as zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from pdsim import metrics


@dataclass(frozen=True, slots=True)
class Metric:
    """One per-request quantity, in seconds."""

    name: str
    label: str
    definition: str
    kind: str  # 'latency' | 'stage'
    compute: Callable[[pd.DataFrame], pd.Series]


def _span(start: str, end: str) -> Callable[[pd.DataFrame], pd.Series]:
    def compute(df: pd.DataFrame) -> pd.Series:
        return df[end] - df[start]

    return compute


def _stage(name: str, label: str, start: str, end: str) -> Metric:
    return Metric(name, label, f"{end} - {start}", "stage", _span(start, end))


def latency_metrics(tpot_definition: str = "standard") -> tuple[Metric, ...]:
    """TTFT, TPOT (in the chosen definition) and E2E, as `pdsim.metrics` defines them."""
    tpot_key = {"standard": "tpot", "distserve": "tpot_distserve"}.get(tpot_definition, tpot_definition)
    return (
        Metric("ttft_s", "TTFT", metrics.DEFINITIONS["ttft"], "latency", metrics.ttft_s),
        Metric(
            "tpot_s",
            "TPOT",
            metrics.DEFINITIONS[tpot_key],
            "latency",
            lambda df: metrics.tpot_s(df, tpot_definition),
        ),
        Metric("e2e_s", "E2E", metrics.DEFINITIONS["e2e"], "latency", metrics.e2e_s),
    )


# (name, label, start column, end column), ordered as a disaggregated request moves through
# the system; colocated runs fill only `route`, `prefill_waiting`, `prefill_forward`, `decode`.
STAGE_SPANS: tuple[tuple[str, str, str, str], ...] = (
    ("route_s", "router (admission)", "arrival_s", "route_s"),
    ("bootstrap_s", "prefill bootstrap queue", "bootstrap_enter_s", "bootstrap_leave_s"),
    ("prefill_waiting_s", "prefill waiting queue", "prefill_waiting_enter_s", "prefill_start_s"),
    ("prefill_forward_s", "prefill forward", "prefill_start_s", "prefill_end_s"),
    ("inflight_s", "prefill inflight queue", "inflight_enter_s", "inflight_leave_s"),
    ("prealloc_s", "decode prealloc queue", "prealloc_enter_s", "prealloc_leave_s"),
    (
        "transfer_queue_s",
        "decode transfer queue",
        "transfer_queue_enter_s",
        "transfer_queue_leave_s",
    ),
    ("transfer_s", "KV transfer", "transfer_start_s", "transfer_end_s"),
    ("decode_waiting_s", "decode waiting queue", "decode_waiting_enter_s", "running_enter_s"),
    ("decode_s", "decode (running)", "running_enter_s", "finish_s"),
)
STAGES: tuple[Metric, ...] = tuple(_stage(*span) for span in STAGE_SPANS)


def all_metrics(tpot_definition: str = "standard") -> tuple[Metric, ...]:
    return latency_metrics(tpot_definition) + STAGES


def request_metrics(df: pd.DataFrame, tpot_definition: str = "standard") -> pd.DataFrame:
    """One row per request (same index as `df`), one float column per metric, in seconds."""
    columns = {m.name: m.compute(df).astype(float) for m in all_metrics(tpot_definition)}
    return pd.DataFrame(columns, index=df.index)


def present_metrics(
    frames: list[pd.DataFrame], tpot_definition: str = "standard"
) -> tuple[Metric, ...]:
    """Metrics with at least one value in some frame (frames from `request_metrics`)."""
    return tuple(
        m
        for m in all_metrics(tpot_definition)
        if any(m.name in f.columns and f[m.name].notna().any() for f in frames)
    )
