"""Deployments to compare on one GPU budget: colocated fleets and P:D splits, named by labels.

A deployment is a fleet shape: colocated (n instances of one layout) or disaggregated (n_p
prefill instances of one layout, n_d decode instances of another). A layout is how one instance
is parallelised (pdsim/parallel.py): attention TP x attention DP ranks, the MoE layers' expert
parallelism EP over all of its TP x DP GPUs. Precision is a property of the whole deployment
(both sides serve the same checkpoint): `Deployment.precision`, a `@GEMM[.kvKV]` label suffix
(docs/PRECISION.md), enumerated over `frontier.precisions`.

Labels are the hydra sweep values of `pdsim frontier` (no commas, no spaces). A side is
`tpA[dpB][epC][A2A]xN`: N instances of attention TP A, B DP ranks (omitted: 1), EP C (omitted: 1),
their MoE exchange A2A (`deepep` or `allgather`; omitted: perf.moe_a2a; DP and EP above 1 only):

    co-tp4x4                  4 colocated instances at TP4
    pd-tp4x2-tp8x1            2 prefill instances at TP4, 1 decode instance at TP8
    co-tp2x8@fp8.kvfp8        8 colocated instances at TP2, fp8 GEMMs and an fp8 KV cache
    pd-tp8ep8x1-tp1dp8ep8x2   1 prefill instance at TP8/EP8, 2 decode instances at TP1xDP8/EP8
    pd-tp1dp8ep8x1-tp1dp8ep8deepepx2   ... the decode instances reaching their experts by DeepEP
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pdsim.config import GEMM_QUANTS, KV_DTYPES, Config
from pdsim.parallel import MOE_A2A_CHOICES, Parallel
from pdsim.perf import build_latency_model, instance_kv_capacity_tokens

log = logging.getLogger(__name__)

COLOCATED, DISAGG = "colocated", "disaggregated"
FAMILIES = (COLOCATED, DISAGG)
_SIDE = re.compile(r"tp(\d+)(?:dp(\d+))?(?:ep(\d+))?(allgather|deepep)?x(\d+)$")


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    """How one instance is parallelised: attention TP x DP ranks, MoE EP over all its GPUs, and
    how its DP ranks reach their experts ("" = perf.moe_a2a)."""

    tp: int = 1
    dp: int = 1
    moe_ep: int = 1
    moe_a2a: str = ""

    @property
    def parallel(self) -> Parallel:
        return Parallel(self.tp, self.dp, self.moe_ep, self.moe_a2a)

    @property
    def gpus(self) -> int:
        return self.parallel.gpus

    @property
    def token(self) -> str:
        """tp4, tp1dp8ep8, tp1dp8ep8deepep: the label's part (dp / ep omitted when 1)."""
        return (f"tp{self.tp}" + (f"dp{self.dp}" if self.dp != 1 else "") + (f"ep{self.moe_ep}" if self.moe_ep != 1 else "")
                + self.moe_a2a)

    @property
    def text(self) -> str:
        """TP4, TP1xDP8/EP8, TP1xDP8/EP8 deepep."""
        return self.parallel.text + (f" {self.moe_a2a}" if self.moe_a2a else "")


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
    name, _, precision = label.partition("@")
    parse_precision(precision)
    parts = name.split("-")
    sides = [_SIDE.match(p) for p in parts[1:]]
    if parts[0] not in ("co", "pd") or len(sides) != (1 if parts[0] == "co" else 2) or not all(sides):
        raise ValueError(f"frontier: deployment label {label!r} is not co-SIDE or pd-SIDE-SIDE "
                         f"(SIDE = tpA[dpB][epC][deepep|allgather]xN, e.g. co-tp4x4, pd-tp8ep8x1-tp1dp8ep8x2)")
    made = [Side(_layout(m), int(m.group(5))) for m in sides if m is not None]
    if any(min(s.count, s.layout.tp, s.layout.dp, s.layout.moe_ep) < 1 for s in made):
        raise ValueError(f"frontier: deployment label {label!r} has a count, TP, DP or EP below 1")
    if any(s.layout.moe_a2a and not s.layout.parallel.moe_exchange for s in made):
        raise ValueError(f"frontier: deployment label {label!r} names a MoE exchange on a side without both "
                         f"DP and EP above 1")
    if parts[0] == "co":
        return Deployment(COLOCATED, colocated=made[0], precision=precision)
    return Deployment(DISAGG, prefill=made[0], decode=made[1], precision=precision)


def _layout(side: re.Match[str]) -> Layout:
    """The layout of a label's side match (tp, dp, ep, exchange)."""
    tp, dp, ep = (int(g or 1) for g in side.groups()[:3])
    return Layout(tp, dp, ep, side.group(4) or "")


def layout_problem(cfg: Config, layout: Layout, gpus: int, budget: str = "frontier.gpus") -> str:
    """Why `layout` cannot serve `cfg`'s model within `gpus` ("" when it can): TP beyond one node
    (DP ranks may span nodes), more GPUs than the budget, a layout the model does not divide
    (EP on a dense model), weights that leave no room for KV, or (DP / EP only) a perf model that
    cannot express it."""
    if min(layout.tp, layout.dp, layout.moe_ep) < 1:
        return "TP, DP and EP must be >= 1"
    if layout.tp > cfg.hardware.gpus_per_node:
        return f"TP{layout.tp} is more than one node ({cfg.hardware.gpus_per_node} GPUs of {cfg.hardware.name})"
    if layout.gpus > gpus:
        return f"needs {layout.gpus} GPUs, over {budget}={gpus}"
    model, parallel = cfg.model, layout.parallel
    try:
        parallel.validate(model.num_heads, model.num_experts, model.name, "")
        instance_kv_capacity_tokens(model, cfg.hardware, parallel, cfg.cluster.gpu_memory_utilization,
                                    cfg.cluster.max_running_requests)
        if not parallel.plain_tp:
            build_latency_model(cfg.perf, model, cfg.hardware, parallel, data_dir=cfg.data_dir)
    except ValueError as exc:  # Parallel.validate names cluster fields: say it as a layout
        return re.sub(r"^cluster: field '(\w+)' = (\d+) ", r"\1 \2 ", str(exc).splitlines()[0])
    return ""


def fitting_layouts(cfg: Config, tp_options: Sequence[int], gpus: int, budget: str = "frontier.gpus",
                    dp_options: Sequence[int] = (1,), ep_options: Sequence[int] = (1,),
                    a2a_options: Sequence[str] = ("",)) -> list[Layout]:
    """Layouts (ascending) of every (TP, DP, EP, MoE exchange) option that `layout_problem` lets
    through; the others are logged with their reason. An exchange option applies to DP x EP
    layouts only (`Parallel.moe_exchange`); the others keep perf.moe_a2a."""
    unknown = [a for a in a2a_options if a not in MOE_A2A_CHOICES]
    if unknown:
        raise ValueError(f"{budget.split('.')[0]}: a2a_options {unknown} not in {list(MOE_A2A_CHOICES)}")
    fits: list[Layout] = []
    dropped: dict[Layout, str] = {}
    plain = {Layout(t, d, e) for t in tp_options for d in dp_options for e in ep_options}
    layouts = {replace(lay, moe_a2a=a) if lay.parallel.moe_exchange else lay for lay in plain for a in a2a_options}
    for layout in sorted(layouts):
        why = layout_problem(cfg, layout, gpus, budget)
        if why:
            log.info("%s skipped: %s", layout.text, why)
            dropped[layout] = why
        else:
            fits.append(layout)
    wide = [f"{lay.text}: {why}" for lay, why in dropped.items() if not lay.parallel.plain_tp]
    if wide and all(lay.parallel.plain_tp for lay in fits):
        log.warning("no DP / EP layout fits, plain TP only: %s", "; ".join(wide))
    if not fits:
        options = f"TP option in {list(tp_options)}"
        if list(dp_options) != [1] or list(ep_options) != [1]:
            options += f" x DP option in {list(dp_options)} x EP option in {list(ep_options)}"
        if list(a2a_options) != [""]:
            options += f" x MoE exchange in {list(a2a_options)}"
        raise ValueError(f"{budget.split('.')[0]}: no {options} fits {cfg.model.name} on {cfg.hardware.name} "
                         f"within {budget}={gpus} ({'; '.join(f'{lay.text}: {why}' for lay, why in dropped.items())})")
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
            fits = fitting_layouts(with_precision(cfg, precision), fr.tp_options, fr.gpus,
                                   dp_options=fr.dp_options, ep_options=fr.ep_options)
            deps += [replace(d, precision=precision) for d in enumerate_deployments(fits, fr.gpus, fr.modes)]
        if not deps:
            raise ValueError(f"frontier: no deployment of modes {list(fr.modes)} fits frontier.gpus={fr.gpus}")
        return deps
    deps = [parse_label(label) for label in fr.deployments]
    for dep in deps:
        if dep.gpus > fr.gpus:
            raise ValueError(f"frontier: deployment {dep.label} needs {dep.gpus} GPUs, over frontier.gpus={fr.gpus}")
        for side in dep.sides:
            lay = side.layout
            fitting_layouts(with_precision(cfg, dep.precision), [lay.tp], fr.gpus, dp_options=[lay.dp],
                            ep_options=[lay.moe_ep], a2a_options=[lay.moe_a2a])
    return deps


def deployment_config(cfg: Config, dep: Deployment) -> Config:
    """`cfg` with its cluster shaped as `dep` and the model at its precision (other fields kept)."""
    cfg = with_precision(cfg, dep.precision)
    c = cfg.cluster
    if dep.mode == COLOCATED:
        assert dep.colocated is not None
        cluster = replace(c, mode=COLOCATED, total_instances=0, colocated=dep.colocated.count,
                          **layout_fields(COLOCATED, dep.colocated.layout))
    else:
        assert dep.prefill is not None and dep.decode is not None
        cluster = replace(c, mode=DISAGG, total_instances=0, prefill=dep.prefill.count, decode=dep.decode.count,
                          **layout_fields("prefill", dep.prefill.layout), **layout_fields("decode", dep.decode.layout))
    return replace(cfg, cluster=cluster)


def layout_fields(side: str, layout: Layout) -> dict[str, Any]:
    """The cluster fields of one side's layout: {side}_tp, {side}_dp, {side}_moe_ep, {side}_moe_a2a."""
    return {f"{side}_tp": layout.tp, f"{side}_dp": layout.dp, f"{side}_moe_ep": layout.moe_ep,
            f"{side}_moe_a2a": layout.moe_a2a}
