"""Building the comparison and run report documents (text, tables, plots) from data."""

from __future__ import annotations

from typing import Any

import pandas as pd

from analysis import diverge, plots, timeline
from analysis.compare import Comparison, itl_table
from analysis.figure import Plot
from analysis.html import Document, Section, Table
from analysis.load import LoadedTrace
from analysis.stages import Metric
from pdsim import metrics
from pdsim.metrics import PERCENTILES

TIMELINE_SAMPLE = 24
ERROR_NOTE = "relative error = (a - b) / |b| with a = {a}, b = {b} (the reference)"
KS_NOTE = (
    "KS = two-sample Kolmogorov-Smirnov distance, the largest gap between the two "
    "empirical CDFs (0 identical, 1 disjoint)"
)


def definitions_table(chosen: tuple[Metric, ...]) -> Table:
    frame = pd.DataFrame(
        {"metric": [m.name for m in chosen], "definition": [m.definition for m in chosen]}
    )
    return Table(
        "Metric definitions (seconds)",
        frame,
        "Failed and rejected requests count as SLO misses; TPOT is undefined (NaN) "
        "for one-token outputs, which meet any TPOT SLO.",
    )


def _pct(value: float) -> str:
    return "-" if pd.isna(value) else f"{value:+.1%}"


def comparison_display(
    table: pd.DataFrame, chosen: tuple[Metric, ...], labels: tuple[str, str]
) -> pd.DataFrame:
    a, b = labels
    rows = []
    for metric in chosen:
        r = table.loc[metric.name]
        row: dict[str, Any] = {"metric": metric.name, "n": int(min(r["n_a"], r["n_b"]))}
        for p in PERCENTILES:
            row[f"{a} p{p}"] = r[f"a_p{p}"]
            row[f"{b} p{p}"] = r[f"b_p{p}"]
            row[f"err p{p}"] = _pct(r[f"relerr_p{p}"])
        row["KS"] = r["ks"]
        row["per-req |err| p50"] = _pct(r["req_abs_relerr_p50"]).lstrip("+")
        row["per-req |err| p90"] = _pct(r["req_abs_relerr_p90"]).lstrip("+")
        rows.append(row)
    return pd.DataFrame(rows)


def comparison_document(cmp: Comparison, a: LoadedTrace, b: LoadedTrace, seed: int = 0) -> Document:
    """The comparison report: runs, attainment, latency, stages, divergence, timelines."""
    note = ERROR_NOTE.format(a=cmp.labels[0], b=cmp.labels[1]) + "; " + KS_NOTE
    sections = (
        _overview_section(cmp, a, b, note),
        _slo_section(cmp),
        _latency_section(cmp, note),
        _stages_section(cmp, note),
        divergence_section(cmp),
        _comparison_timeline(cmp, seed),
        *timeseries_sections({a.label: a.timeseries, b.label: b.timeseries}),
    )
    data = {
        "labels": list(cmp.labels),
        "alignment": cmp.alignment.method,
        "metrics": cmp.table,
        "attainment": cmp.attainment.T,
        "findings": diverge.findings(cmp),
    }
    return Document(f"Trace comparison: {cmp.labels[0]} vs {cmp.labels[1]}", sections, data)


def _overview_section(cmp: Comparison, a: LoadedTrace, b: LoadedTrace, note: str) -> Section:
    la, lb = cmp.labels
    al = cmp.alignment
    slo = cmp.slo
    text = (
        f"{la}: {a.source} ({len(a.frame)} requests); {lb}: {b.source} ({len(b.frame)} requests).",
        f"Aligned by {al.method}: {len(al.a)} pairs, {al.unmatched_a} unmatched in {la}, "
        f"{al.unmatched_b} in {lb}; {al.input_match_fraction:.1%} of pairs have equal input_tokens.",
        f"SLO: TTFT <= {slo.ttft_s:g} s, TPOT <= {slo.tpot_s:g} s ({cmp.tpot_definition} TPOT), "
        f"target {slo.attainment_target:.0%}. {note}.",
    )
    return Section("Runs and definitions", text, (definitions_table(cmp.metrics),))


def _slo_section(cmp: Comparison) -> Section:
    note = "goodput_at_rate_rps = offered rate if attainment_both >= target, else 0"
    table = Table("Attainment on each full trace", cmp.attainment, note)
    return Section("SLO attainment and goodput", tables=(table,))


def _latency_section(cmp: Comparison, note: str) -> Section:
    latency = tuple(m for m in cmp.metrics if m.kind == "latency")
    shown = comparison_display(cmp.table, latency, cmp.labels)
    tables = [Table("Latency percentiles (s) and errors", shown, note)]
    itl = itl_table(cmp.alignment.a, cmp.alignment.b, cmp.labels)
    if itl is not None:
        tables.append(Table("ITL: all inter-token gaps (s)", itl, metrics.DEFINITIONS["itl"]))
    return Section("Latency", tables=tuple(tables), plots=_latency_plots(cmp, latency))


def _stages_section(cmp: Comparison, note: str) -> Section:
    stages = tuple(m for m in cmp.metrics if m.kind == "stage")
    ranking = diverge.stage_ranking(cmp)
    tables = (
        Table(
            "Stage percentiles (s) and errors",
            comparison_display(cmp.table, stages, cmp.labels),
            note,
        ),
        Table(
            "Stages ranked by mean difference per request",
            ranking,
            "prefill-side and decode-side stages overlap in time (the decode transfer queue "
            "includes the wait for the prefill), so the differences do not add up to the E2E gap",
        ),
    )
    runs = {cmp.labels[0]: cmp.values_a, cmp.labels[1]: cmp.values_b}
    return Section(
        "Stages: queueing, forward, transfer", tables=tables, plots=stage_plots(stages, runs)
    )


def _latency_plots(cmp: Comparison, latency: tuple[Metric, ...]) -> tuple[Plot, ...]:
    la, lb = cmp.labels
    runs = {la: cmp.values_a, lb: cmp.values_b}
    scatter_metrics = latency + tuple(m for m in cmp.metrics if m.name == "transfer_s")
    return (
        plots.cdf_overlay("latency_cdf", "Latency CDFs", latency, runs),
        plots.scatter(
            "latency_scatter",
            f"Per request: {la} vs {lb}",
            scatter_metrics,
            cmp.values_a,
            cmp.values_b,
            cmp.labels,
        ),
        plots.error_boxes(
            "error_distribution",
            f"Per-request relative error, {la} vs {lb}",
            cmp.metrics,
            cmp.errors,
        ),
    )


def stage_plots(stages: tuple[Metric, ...], runs: dict[str, pd.DataFrame]) -> tuple[Plot, ...]:
    if not stages:
        return ()
    return (
        plots.stage_bars("stage_means", "Mean time per request in each stage", stages, runs),
        plots.cdf_overlay("stage_cdf", "Stage time CDFs", stages, runs),
    )


def divergence_section(cmp: Comparison) -> Section:
    b = cmp.alignment.b
    tables = [Table("Largest TTFT differences", diverge.top_requests(cmp, "ttft_s"))]
    if "ttft_s" in cmp.errors.columns:
        tables = [
            Table(
                "TTFT error by prompt length quartile (input_tokens)",
                diverge.error_by_group(cmp, b["input_tokens"], "ttft_s"),
            ),
            Table(
                "TTFT error by local load quartile (arrivals in the preceding window)",
                diverge.error_by_group(cmp, diverge.local_load(b["arrival_s"]), "ttft_s"),
            ),
            *tables,
        ]
    return Section("Where they diverge", tuple(diverge.findings(cmp)), tuple(tables))


def _comparison_timeline(cmp: Comparison, seed: int) -> Section:
    picked = timeline.sample_positions(len(cmp.alignment.a), TIMELINE_SAMPLE, seed)
    runs = {
        label: side.iloc[picked]
        for label, side in zip(cmp.labels, (cmp.alignment.a, cmp.alignment.b), strict=True)
    }
    plot = timeline.gantt(
        "timeline", f"Timeline of {len(picked)} sampled requests through the stages", runs
    )
    return Section("Request timeline", plots=(plot,))


def timeseries_sections(series: dict[str, pd.DataFrame | None]) -> tuple[Section, ...]:
    present = {k: v for k, v in series.items() if v is not None}
    if not present:
        return ()
    plot = timeline.timeseries_overlay("timeseries", "Queue lengths and KV use over time", present)
    return (Section("Instance timeseries", plots=(plot,) if plot else ()),)
