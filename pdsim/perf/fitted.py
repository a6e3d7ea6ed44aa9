"""DistServe's fitted step-latency formula.

DistServe (OSDI'24) profiles each (model, TP) and fits, in **milliseconds**:

- prefill: a + b * Σ len + c * Σ len²   (per-request squares: the attention term);
- decode:  a + b * Σ ctx + c * batch    (ctx = each request's KV length), with one coefficient
  triple for batch < threshold ("decoding_smallbs") and another at or above it ("decoding_largebs").

The JSON maps `hf_name -> str(tp) -> {"prefill": [a, b, c], "decoding_smallbs": [...],
"decoding_largebs": [...], "decoding_large_small_bs_threshold": int}`.

The two decode fits disagree by a few ms at the threshold; at and above it the time is at least
the small-batch formula's at threshold - 1 (same Σctx), so a step never gets faster as the batch
grows (`batch_floor`; perf.fitted_batch_floor=false uses the large-batch fit as is, as
DistServe's simulator does). A prefill chunk of n new tokens after c cached ones uses (n + c)² - c² = n² + 2nc as its squared
length: the attention pairs it adds, and DistServe's Σlen² when nothing is cached. A colocated
mixed step is the prefill time plus the decode time above its intercept (one launch, not two).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdsim.perf.base import PrefillItem, PrefillTimer
from pdsim.perf.steps.decode import FittedStep

Coefficients = tuple[float, float, float]


@dataclass(frozen=True, slots=True)
class FittedModel:
    """DistServe-form coefficients for one (model, TP); times in ms inside, seconds outside."""

    prefill_ms: Coefficients
    decode_small_ms: Coefficients
    decode_large_ms: Coefficients
    batch_threshold: int = 95
    name: str = "fitted"
    batch_floor: bool = True

    def decode_coefficients(self, num_seqs: int) -> Coefficients:
        return self.decode_small_ms if num_seqs < self.batch_threshold else self.decode_large_ms

    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        if not items:
            return 0.0
        a, b, c = self.prefill_ms
        total = sum(n for n, _ in items)
        squares = sum(n * n + 2 * n * ctx for n, ctx in items)
        return (a + b * total + c * squares) / 1e3

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        if num_seqs <= 0:
            return 0.0
        time_ms = _evaluate(self.decode_coefficients(num_seqs), context_tokens, num_seqs)
        if self.batch_floor and num_seqs >= self.batch_threshold:  # never faster than the last small-batch size
            floor_ms = _evaluate(self.decode_small_ms, context_tokens, self.batch_threshold - 1)
            time_ms = max(time_ms, floor_ms)
        return time_ms / 1e3

    def decode_step(self, num_seqs: int) -> FittedStep:
        """decode_time_s(num_seqs, ctx) as a compiled function of ctx, in its order."""
        floored = self.batch_floor and num_seqs >= self.batch_threshold
        a, b, c = (float(x) for x in self.decode_coefficients(num_seqs))  # (floats, as load_fitted reads them)
        fa, fb, fc = (float(x) for x in self.decode_small_ms)
        return FittedStep(num_seqs, (a, b, c), (fa, fb, fc) if floored else None, self.batch_threshold - 1)

    def prefill_timer(self) -> PrefillTimer:
        return self.prefill_time_s

    def mixed_time_s(
        self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int
    ) -> float:
        if not items:
            return self.decode_time_s(num_seqs, context_tokens)
        if num_seqs <= 0:
            return self.prefill_time_s(items)
        intercept_s = self.decode_coefficients(num_seqs)[0] / 1e3
        extra_s = max(0.0, self.decode_time_s(num_seqs, context_tokens) - intercept_s)
        return self.prefill_time_s(items) + extra_s

    def to_json_entry(self) -> dict[str, Any]:
        """This model in the DistServe JSON layout (one TP entry)."""
        return {
            "decoding_large_small_bs_threshold": self.batch_threshold,
            "prefill": list(self.prefill_ms),
            "decoding_smallbs": list(self.decode_small_ms),
            "decoding_largebs": list(self.decode_large_ms),
        }


def _evaluate(coefficients: Coefficients, context_tokens: int, num_seqs: int) -> float:
    a, b, c = coefficients
    return a + b * context_tokens + c * num_seqs


def _triple(entry: dict[str, Any], key: str, where: str) -> Coefficients:
    try:
        a, b, c = (float(x) for x in entry[key])
    except KeyError:
        raise ValueError(f"{where}: missing field {key!r}") from None
    except (TypeError, ValueError):
        raise ValueError(
            f"{where}: field {key!r} must be three numbers, got {entry[key]!r}"
        ) from None
    return a, b, c


def load_fitted(path: Path, hf_name: str, tp: int, batch_floor: bool = True) -> FittedModel:
    """Read the coefficients of `hf_name` at `tp` from a DistServe profile JSON."""
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"fitted latency profile not found: {path}") from None
    if hf_name not in data:
        raise KeyError(f"{path}: no model {hf_name!r} (has {sorted(data)}); set model.hf_name")
    if str(tp) not in data[hf_name]:
        raise KeyError(f"{path}: model {hf_name!r} has no tp={tp} (has tp {sorted(data[hf_name])})")
    entry = data[hf_name][str(tp)]
    where = f"{path} [{hf_name!r}][{str(tp)!r}]"
    return FittedModel(
        prefill_ms=_triple(entry, "prefill", where),
        decode_small_ms=_triple(entry, "decoding_smallbs", where),
        decode_large_ms=_triple(entry, "decoding_largebs", where),
        batch_threshold=int(entry.get("decoding_large_small_bs_threshold", 95)),
        batch_floor=batch_floor,
    )
