"""Building the single-run report document: summary, latency CDFs, attainment vs SLO scale,
stages, a request timeline and instance utilisation (when a timeseries is given)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import plots, timeline
from analysis.html import Document, Section, Table
from analysis.load import LoadedTrace
from analysis.sections import TIMELINE_SAMPLE, definitions_table, stage_plots, timeseries_sections
from analysis.stages import Metric, present_metrics, request_metrics
from pdsim import metrics
from pdsim.metrics import Slo


def run_document(
    trace: LoadedTrace, summary: dict[str, Any], slo: Slo, tpot_definition: str, seed: int = 0
) -> Document:
    """The run report; `summary` is shown as a table (its scalar entries) and kept as data."""
    values = request_metrics(trace.frame, tpot_definition)
    present = present_metrics([values], tpot_definition)
    stages = tuple(m for m in present if m.kind == "stage")
    picked = timeline.sample_positions(len(trace.frame), TIMELINE_SAMPLE, seed)
    title = f"Timeline of {len(picked)} sampled requests through the stages"
    gantt = timeline.gantt("timeline", title, {trace.label: trace.frame.iloc[picked]})
    sections = [
        _summary_section(trace, summary, slo, tpot_definition, present),
        _latency_section(trace, values, present, slo, tpot_definition),
        Section("Stages", plots=stage_plots(stages, {trace.label: values})),
        Section("Request timeline", plots=(gantt,)),
    ]
    if trace.timeseries is not None:
        util = timeline.utilisation(
            "utilisation", "Instance utilisation over time", trace.timeseries
        )
        sections.append(Section("Instance utilisation", plots=(util,) if util else ()))
        sections.extend(timeseries_sections({trace.label: trace.timeseries}))
    return Document(f"Run report: {trace.label}", tuple(sections), data={"summary": summary})


def _summary_section(
    trace: LoadedTrace,
    summary: dict[str, Any],
    slo: Slo,
    tpot_definition: str,
    present: tuple[Metric, ...],
) -> Section:
    scalars = {k: v for k, v in summary.items() if isinstance(v, int | float | str | bool)}
    text = (
        f"{trace.source}: {len(trace.frame)} requests. SLO: TTFT <= {slo.ttft_s:g} s, "
        f"TPOT <= {slo.tpot_s:g} s ({tpot_definition} TPOT), target {slo.attainment_target:.0%}.",
    )
    scalar_frame = pd.DataFrame({"key": list(scalars), "value": [str(v) for v in scalars.values()]})
    attained = pd.DataFrame([metrics.attainment(trace.frame, slo, tpot_definition)])
    tables = (
        Table("Run summary", scalar_frame),
        Table("Attainment", attained),
        definitions_table(present),
    )
    return Section("Summary", text, tables)


def _latency_section(
    trace: LoadedTrace,
    values: pd.DataFrame,
    present: tuple[Metric, ...],
    slo: Slo,
    tpot_definition: str,
) -> Section:
    latency = tuple(m for m in present if m.kind == "latency")
    figures = (
        plots.cdf_overlay("latency_cdf", "Latency CDFs", latency, {trace.label: values}),
        plots.attainment_vs_scale(
            "attainment_vs_slo_scale",
            "SLO attainment vs SLO scale",
            {trace.label: trace.frame},
            slo,
            tpot_definition,
        ),
    )
    table = Table("Percentiles (s)", percentile_frame(values, present))
    return Section("Latency", tables=(table,), plots=figures)


def percentile_frame(values: pd.DataFrame, chosen: tuple[Metric, ...]) -> pd.DataFrame:
    rows = [
        {
            "metric": m.name,
            "n": int(values[m.name].notna().sum()),
            **metrics.percentiles(values[m.name]),
        }
        for m in chosen
    ]
    return pd.DataFrame(rows)
