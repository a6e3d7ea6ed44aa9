"""Deployments to compare on one GPU budget: colocated fleets and P:D splits, named by labels.

A deployment is a fleet shape: colocated (n instances of one layout) or disaggregated (n_p
prefill instances of one layout, n_d decode instances of another). A layout is how one instance
is parallelised; today that is its TP degree (expert parallelism and attention data parallelism,
issue 40, become further `Layout` fields). Precision is a property of the whole deployment (both
sides serve the same checkpoint): `Deployment.precision`, a `@GEMM[.kvKV]` label suffix
(docs/PRECISION.md), enumerated over `frontier.precisions`.

Labels are the hydra sweep values of `pdsim frontier` (no commas, no spaces):

    co-tp4x4            4 colocated instances at TP4
    pd-tp4x2-tp8x1      2 prefill instances at TP4, 1 decode instance at TP8
    co-tp2x8@fp8.kvfp8  8 colocated instances at TP2, fp8 GEMMs and an fp8 KV cache
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from pdsim.config import GEMM_QUANTS, KV_DTYPES, Config
from pdsim.perf import kv_capacity_tokens

log = logging.getLogger(__name__)

COLOCATED, DISAGG = "colocated", "disaggregated"
FAMILIES = (COLOCATED, DISAGG)
_SIDE = re.compile(r"tp(\d+)x(\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    """How one instance is parallelised (later: precision, EP, attention DP)."""

    tp: int = 1

    @property
    def gpus(self) -> int:
        return self.tp

    @property
    def token(self) -> str:
        return f"tp{self.tp}"

    @property
    def text(self) -> str:
        return f"TP{self.tp}"


@dataclass(frozen=True, slots=True)
class Side:
    """`count` instances of one layout."""

    layout: Layout
    count: int

    @property
    def gpus(self) -> int:
        return self.count * self.layout.gpus

    @property
    def token(self) -> str:
        return f"{self.layout.token}x{self.count}"

    @property
    def text(self) -> str:
        return f"{self.count}x{self.layout.text}"


@dataclass(frozen=True, slots=True)
class Deployment:
    """A colocated fleet (`colocated`) or a P:D split (`prefill`, `decode`)."""

    mode: str
    colocated: Side | None = None
    prefill: Side | None = None
    decode: Side | None = None
    precision: str = ""  # "GEMM[.kvKV]" (model.gemm_quant, model.kv_dtype); "" = the model's own

    @property
    def sides(self) -> tuple[Side, ...]:
        return tuple(s for s in (self.colocated, self.prefill, self.decode) if s is not None)

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.sides)

    @property
    def batch_instances(self) -> int:
        """Instances that hold decode batches (where the clients' requests spend their time)."""
        side = self.colocated if self.mode == COLOCATED else self.decode
        assert side is not None
        return side.count

    @property
    def label(self) -> str:
        prefix = "co" if self.mode == COLOCATED else "pd"
        return "-".join([prefix, *(s.token for s in self.sides)]) + (f"@{self.precision}" if self.precision else "")

    @property
    def text(self) -> str:
        """For people: `colocated 4xTP4`, `PD 2xTP4 + 1xTP8`."""
        at = f" {self.precision}" if self.precision else ""
        if self.mode == COLOCATED:
            return f"colocated {self.sides[0].text}{at}"
        return f"PD {self.sides[0].text} + {self.sides[1].text}{at}"


def parse_precision(text: str) -> tuple[str, str]:
    """(model.gemm_quant, model.kv_dtype) of a precision token `GEMM[.kvKV]` ("" = unchanged)."""
    gemm, _, kv = text.partition(".kv")
    if gemm not in GEMM_QUANTS or kv not in KV_DTYPES or (text and not gemm):
        raise ValueError(f"frontier: precision {text!r} is not GEMM[.kvKV] with GEMM in {GEMM_QUANTS[1:]} "
                         f"and KV in {KV_DTYPES[1:]}")
    return gemm, kv


def with_precision(cfg: Config, precision: str) -> Config:
    """`cfg` with the model at `precision` (unchanged for "")."""
    if not precision:
        return cfg
    gemm, kv = parse_precision(precision)
    return replace(cfg, model=replace(cfg.model, gemm_quant=gemm, kv_dtype=kv or cfg.model.kv_dtype))


def parse_label(label: str) -> Deployment:
    """The deployment a label names; ValueError naming the label otherwise."""
    label, _, precision = label.partition("@")
    parse_precision(precision)
    parts = label.split("-")
    sides = [_SIDE.match(p) for p in parts[1:]]
    if parts[0] not in ("co", "pd") or len(sides) != (1 if parts[0] == "co" else 2) or not all(sides):
        raise ValueError(f"frontier: deployment label {label!r} is not co-tpAxN or pd-tpAxN-tpBxM")
    made = [Side(Layout(int(m.group(1))), int(m.group(2))) for m in sides if m is not None]
    if any(s.count < 1 or s.layout.tp < 1 for s in made):
        raise ValueError(f"frontier: deployment label {label!r} has a count or TP below 1")
    if parts[0] == "co":
        return Deployment(COLOCATED, colocated=made[0], precision=precision)
    return Deployment(DISAGG, prefill=made[0], decode=made[1], precision=precision)


def fitting_layouts(cfg: Config, tp_options: Sequence[int], gpus: int, budget: str = "frontier.gpus") -> list[Layout]:
    """Layouts (ascending) whose weights fit with room for KV, within one node and the budget."""
    fits = []
    for tp in sorted(set(tp_options)):
        if tp < 1 or tp > min(cfg.hardware.gpus_per_node, gpus) or cfg.model.num_heads % tp:
            continue
        try:
            kv_capacity_tokens(cfg.model, cfg.hardware, tp, cfg.cluster.gpu_memory_utilization)
        except ValueError as exc:
            log.info("TP%d skipped: %s", tp, exc)
            continue
        fits.append(Layout(tp))
    if not fits:
        raise ValueError(f"{budget.split('.')[0]}: no TP option in {list(tp_options)} fits {cfg.model.name} on "
                         f"{cfg.hardware.name} within {budget}={gpus}")
    return fits


def enumerate_deployments(layouts: Sequence[Layout], gpus: int, modes: Sequence[str] = FAMILIES) -> list[Deployment]:
    """Every colocated fleet (as many instances as the budget holds) and every P:D split that
    uses the whole budget exactly, colocated first, then by prefill layout, decode layout, P count."""
    out = []
    if COLOCATED in modes:
        out += [Deployment(COLOCATED, colocated=Side(lay, gpus // lay.gpus)) for lay in layouts if gpus >= lay.gpus]
    if DISAGG in modes:
        for pre in layouts:
            for dec in layouts:
                for n_p in range(1, (gpus - dec.gpus) // pre.gpus + 1):
                    rest = gpus - n_p * pre.gpus
                    if rest % dec.gpus == 0:
                        out.append(Deployment(DISAGG, prefill=Side(pre, n_p), decode=Side(dec, rest // dec.gpus)))
    unknown = sorted(set(modes) - set(FAMILIES))
    if unknown:
        raise ValueError(f"frontier: unknown mode(s) {unknown} (choose from {list(FAMILIES)})")
    return out


def frontier_deployments(cfg: Config) -> list[Deployment]:
    """The deployments `pdsim frontier` draws: frontier.deployments as given (each within the
    budget, each side's layout fitting the model), or every one the budget holds."""
    fr = cfg.frontier
    if not fr.deployments:
        deps = []
        for precision in fr.precisions or [""]:
            fits = fitting_layouts(with_precision(cfg, precision), fr.tp_options, fr.gpus)
            deps += [replace(d, precision=precision) for d in enumerate_deployments(fits, fr.gpus, fr.modes)]
        if not deps:
            raise ValueError(f"frontier: no deployment of modes {list(fr.modes)} fits frontier.gpus={fr.gpus}")
        return deps
    deps = [parse_label(label) for label in fr.deployments]
    for dep in deps:
        if dep.gpus > fr.gpus:
            raise ValueError(f"frontier: deployment {dep.label} needs {dep.gpus} GPUs, over frontier.gpus={fr.gpus}")
        for side in dep.sides:
            fitting_layouts(with_precision(cfg, dep.precision), [side.layout.tp], fr.gpus)
    return deps


def deployment_config(cfg: Config, dep: Deployment) -> Config:
    """`cfg` with its cluster shaped as `dep` and the model at its precision (other fields kept)."""
    cfg = with_precision(cfg, dep.precision)
    c = cfg.cluster
    if dep.mode == COLOCATED:
        assert dep.colocated is not None
        cluster = replace(c, mode=COLOCATED, total_instances=0, colocated=dep.colocated.count,
                          colocated_tp=dep.colocated.layout.tp)
    else:
        assert dep.prefill is not None and dep.decode is not None
        cluster = replace(c, mode=DISAGG, total_instances=0, prefill=dep.prefill.count, decode=dep.decode.count,
                          prefill_tp=dep.prefill.layout.tp, decode_tp=dep.decode.layout.tp)
    return replace(cfg, cluster=cluster)
