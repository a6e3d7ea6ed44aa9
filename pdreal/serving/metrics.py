"""Prometheus text exposition (format 0.0.4) without a client library.

A `MetricsRegistry` owns counters, gauges and histograms (one registry per server object, no
module-level state); `render()` gives the `/metrics` body. `parse_metrics` reads the format back
(tests, fault checks, `pdreal replay` reading instance state).
"""

from __future__ import annotations

import bisect
import math
import re
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS_S = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
Labels = tuple[tuple[str, str], ...]


def _labels(values: dict[str, object]) -> Labels:
    return tuple(sorted((k, str(v)) for k, v in values.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _fmt_labels(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


def _fmt_value(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


@dataclass
class Metric:
    name: str
    help: str
    kind: str  # counter | gauge | histogram
    values: dict[Labels, float] = field(default_factory=dict)

    def inc(self, amount: float = 1.0, **labels: object) -> None:
        key = _labels(labels)
        self.values[key] = self.values.get(key, 0.0) + amount

    def set(self, value: float, **labels: object) -> None:
        self.values[_labels(labels)] = float(value)

    def clear(self) -> None:
        self.values.clear()

    def lines(self) -> list[str]:
        return [f"{self.name}{_fmt_labels(k)} {_fmt_value(v)}" for k, v in sorted(self.values.items())]


@dataclass
class Histogram:
    name: str
    help: str
    buckets: tuple[float, ...]
    kind: str = "histogram"
    counts: dict[Labels, list[int]] = field(default_factory=dict)
    sums: dict[Labels, float] = field(default_factory=dict)

    def observe(self, value: float, **labels: object) -> None:
        if math.isnan(value):
            return
        key = _labels(labels)
        counts = self.counts.setdefault(key, [0] * (len(self.buckets) + 1))
        counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sums[key] = self.sums.get(key, 0.0) + value

    def lines(self) -> list[str]:
        out = []
        for key, counts in sorted(self.counts.items()):
            running = 0
            for bound, count in zip((*self.buckets, math.inf), counts, strict=True):
                running += count
                out.append(f"{self.name}_bucket{_fmt_labels((*key, ('le', _fmt_value(bound))))} {running}")
            out.append(f"{self.name}_sum{_fmt_labels(key)} {_fmt_value(self.sums[key])}")
            out.append(f"{self.name}_count{_fmt_labels(key)} {running}")
        return out


class MetricsRegistry:
    def __init__(self) -> None:
        self._metrics: dict[str, Metric | Histogram] = {}

    def _add(self, metric: Metric | Histogram) -> Metric | Histogram:
        if metric.name in self._metrics:
            raise ValueError(f"metric {metric.name!r} registered twice")
        self._metrics[metric.name] = metric
        return metric

    def counter(self, name: str, help_text: str) -> Metric:
        return self._add(Metric(name, help_text, "counter"))  # type: ignore[return-value]

    def gauge(self, name: str, help_text: str) -> Metric:
        return self._add(Metric(name, help_text, "gauge"))  # type: ignore[return-value]

    def histogram(self, name: str, help_text: str, buckets: tuple[float, ...]) -> Histogram:
        return self._add(Histogram(name, help_text, tuple(sorted(buckets))))  # type: ignore[return-value]

    def render(self) -> str:
        out: list[str] = []
        for metric in self._metrics.values():
            out += [f"# HELP {metric.name} {metric.help}", f"# TYPE {metric.name} {metric.kind}"]
            out += metric.lines()
        return "\n".join(out) + "\n"


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples by metric name: [(labels, value)]; raises ValueError naming a malformed line."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise ValueError(f"metrics line {number} is not a sample: {line!r}")
        labels = dict(_LABEL.findall(match.group(3) or ""))
        try:
            value = float(match.group(4))
        except ValueError:
            raise ValueError(f"metrics line {number}: value {match.group(4)!r} is not a number") from None
        samples.setdefault(match.group(1), []).append((labels, value))
    return samples


def sample_value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
    return sum(v for found, v in samples.get(name, []) if all(found.get(k) == x for k, x in labels.items()))
