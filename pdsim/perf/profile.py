"""Measured step latencies: the profile CSV format, and readers for it and for Splitwise's CSV.

**Profile CSV** (what `pdreal profile` writes and `perf.kind=table` / `pdsim calibrate` read):

    kind,num_seqs,new_tokens,context_tokens,latency_s[,model,hardware,tp]

One row is one timed forward step. Counts are totals over the batch, matching the LatencyModel
arguments:

- `kind=prefill`: `num_seqs` prompts (or chunks) computing `new_tokens` tokens in all, after
  `context_tokens` tokens already cached in all (0 for fresh prompts);
- `kind=decode`: `num_seqs` sequences, `new_tokens = num_seqs`, `context_tokens` = Σ KV lengths.

`latency_s` is seconds. Optional `model`, `hardware` and `tp` columns let one file hold several
setups; readers filter on them when asked. Repeated measurements of the same step are allowed
(the table model takes their median).

**Splitwise CSV** (splitwise-sim's `perf_model.csv`, ms): `prompt_time` is one prefill of
`batch_size` prompts of `prompt_size` tokens; `token_time` is the mean decode iteration while
generating `token_size` tokens, so its mean context per sequence is prompt_size + token_size / 2.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROFILE_COLUMNS = ("kind", "num_seqs", "new_tokens", "context_tokens", "latency_s")
SPLITWISE_COLUMNS = (
    "model",
    "hardware",
    "prompt_size",
    "batch_size",
    "token_size",
    "prompt_time",
    "token_time",
    "tensor_parallel",
)
KINDS = ("prefill", "decode")


@dataclass(frozen=True, slots=True)
class ProfilePoint:
    """One measured step (totals over the batch)."""

    kind: str
    num_seqs: int
    new_tokens: int
    context_tokens: int
    latency_s: float


def _norm(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def match_name(wanted: str, available: Iterable[str], what: str, path: Path) -> str:
    """The entry of `available` naming `wanted`: equal ignoring case and punctuation, else the
    shortest one that starts with it ("a100_80g" finds "a100-80gb")."""
    names = sorted(set(available))
    exact = [n for n in names if _norm(n) == _norm(wanted)]
    prefixed = sorted((n for n in names if _norm(n).startswith(_norm(wanted))), key=len)
    found = exact or prefixed
    if not wanted or not found:
        raise KeyError(
            f"{path}: no {what} matching {wanted!r} (has {names}); set perf.table_{what}"
        )
    return found[0]


def write_profile_csv(path: Path, points: Sequence[ProfilePoint]) -> None:
    with Path(path).open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(PROFILE_COLUMNS)
        for p in points:
            writer.writerow([p.kind, p.num_seqs, p.new_tokens, p.context_tokens, repr(p.latency_s)])


def _row_point(row: dict[str, str], path: Path, line: int) -> ProfilePoint:
    try:
        point = ProfilePoint(
            kind=row["kind"].strip(),
            num_seqs=int(row["num_seqs"]),
            new_tokens=int(row["new_tokens"]),
            context_tokens=int(row["context_tokens"]),
            latency_s=float(row["latency_s"]),
        )
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}:{line}: bad profile row {row}: {exc}") from None
    if point.kind not in KINDS or point.num_seqs < 1 or point.latency_s <= 0:
        raise ValueError(
            f"{path}:{line}: kind must be one of {KINDS}, num_seqs >= 1, latency_s > 0: {row}"
        )
    return point


def _keep(row: dict[str, str], filters: dict[str, str]) -> bool:
    return all(
        _norm(row.get(col, "") or "") == _norm(val)
        for col, val in filters.items()
        if val and col in row
    )


def read_profile_csv(
    path: Path, model: str = "", hardware: str = "", tp: int = 0
) -> list[ProfilePoint]:
    """Rows of a profile CSV, filtered on the optional model/hardware/tp columns when given."""
    filters = {"model": model, "hardware": hardware, "tp": str(tp) if tp else ""}
    with Path(path).open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in PROFILE_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(
                f"{path}: profile CSV lacks columns {missing} (needs {PROFILE_COLUMNS})"
            )
        rows = [(i + 2, r) for i, r in enumerate(reader)]
    return [_row_point(r, path, line) for line, r in rows if _keep(r, filters)]


def read_splitwise_csv(path: Path, model: str, hardware: str, tp: int) -> list[ProfilePoint]:
    """Splitwise's profile for one (model, hardware, tp), converted to profile points (seconds)."""
    with Path(path).open(newline="") as f:
        rows = list(csv.DictReader(f))
    model = match_name(model, (r["model"] for r in rows), "model", path)
    hardware = match_name(hardware, (r["hardware"] for r in rows), "hardware", path)
    chosen = [
        r
        for r in rows
        if r["model"] == model and r["hardware"] == hardware and int(r["tensor_parallel"]) == tp
    ]
    if not chosen:
        tps = sorted(
            {
                int(r["tensor_parallel"])
                for r in rows
                if r["model"] == model and r["hardware"] == hardware
            }
        )
        raise KeyError(f"{path}: {model} on {hardware} has no tensor_parallel={tp} (has {tps})")
    points = []
    for r in chosen:
        batch, prompt, gen = int(r["batch_size"]), int(r["prompt_size"]), int(r["token_size"])
        points.append(
            ProfilePoint("prefill", batch, batch * prompt, 0, float(r["prompt_time"]) / 1e3)
        )
        context = batch * (prompt + gen // 2)
        points.append(ProfilePoint("decode", batch, batch, context, float(r["token_time"]) / 1e3))
    return points


def read_points(path: Path, model: str = "", hardware: str = "", tp: int = 0) -> list[ProfilePoint]:
    """Either format, told apart by the header."""
    with Path(path).open(newline="") as f:
        header = next(csv.reader(f), [])
    if all(c in header for c in SPLITWISE_COLUMNS):
        return read_splitwise_csv(path, model, hardware, tp)
    if all(c in header for c in PROFILE_COLUMNS):
        return read_profile_csv(path, model, hardware, tp)
    raise ValueError(
        f"{path}: header {header} is neither a profile CSV {PROFILE_COLUMNS} nor Splitwise's"
    )
