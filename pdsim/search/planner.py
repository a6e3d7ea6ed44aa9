"""Placement planner (`pdsim plan`): the P:D split and layout per side for a GPU budget.

DistServe-style placement search, with the simulator as the goodput oracle. A layout is TP, or
TP x attention DP ranks with MoE expert parallelism (pdsim.search.deployments.Layout: every
combination of plan.tp_options, plan.dp_options and plan.ep_options that fits the model).

1. Per role and layout (those whose weights fit one instance), the goodput of ONE instance:
   prefill = 1 prefill instance of layout L beside helper decode instances of the helper layout
   (`helper_layout`: the most GPUs, plain TP first, so decode is not the bottleneck), decode =
   the mirror image, colocated = one colocated instance. The fleet's goodput is attributed to
   the measured instance. Helpers start at `helper_instances` and double until they offer
   HEADROOM x the measured rate of the helper layout.
2. Candidates: every (L_p, L_d, n_p) with as many decode instances n_d as the rest of the
   budget holds; estimated goodput min(n_p * g_p, n_d * g_d), so the best estimates are the
   splits that balance the two sides' rates. Colocated: gpus // gpus(L) instances of layout L,
   estimate n * g_c(L).
3. The `verify_top` best estimates of each mode are re-measured with a full-fleet goodput search;
   the recommendation is the best verified fleet of either mode (ties: fewer GPUs, then
   disaggregated), and the gain is the best disaggregated goodput over the best colocated one.
4. Probe size: a probe whose arrivals span fewer than `MIN_LIFETIMES` unloaded request
   lifetimes (num_requests / rate < MIN_LIFETIMES x the fleet's lone-request latency) never
   loads the fleet to steady state, and its goodput comes out too high. By default
   (plan.num_requests=0) every probe is sized for its fleet and rate (`ProbeSize`):
   ceil(MIN_LIFETIMES x lone latency x rate) requests, within [plan.min_requests,
   plan.max_requests]. A goodput whose probe was still too small (the cap bound, or a fixed
   plan.num_requests forced it) is flagged (`Plan.small_probes`) and the output warns.

`plan(cfg, evaluate)` takes the goodput oracle as an argument (`simulated_goodput` by default)
so the arithmetic can be tested with a closed-form stub.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pdsim.config import Config
from pdsim.parallel import Parallel
from pdsim.search.deployments import Layout, fitting_layouts, layout_fields

log = logging.getLogger(__name__)

PREFILL, DECODE, COLOCATED, DISAGG = "prefill", "decode", "colocated", "disaggregated"
HEADROOM = 2.0  # helpers must offer this many times the measured instance's goodput
MIN_LIFETIMES = 20.0  # a probe's arrival window must span this many lone-request latencies
MAX_DOUBLINGS = 3
# goodput oracle: (config, a rate to start the search from) -> goodput in req/s
Evaluate = Callable[[Config, float], float]


@dataclass(frozen=True, slots=True)
class RoleGoodput:
    """The goodput of one instance of `role` at layout TP x DP with EP."""

    role: str
    tp: int
    goodput_rps: float
    dp: int = 1
    moe_ep: int = 1
    moe_a2a: str = ""

    @property
    def layout(self) -> Layout:
        return Layout(self.tp, self.dp, self.moe_ep, self.moe_a2a)

    @property
    def per_gpu_rps(self) -> float:
        return self.goodput_rps / self.layout.gpus

    @property
    def label(self) -> str:
        """`prefill TP4`, `decode TP1xDP8/EP8`."""
        return f"{self.role} {self.layout.text}"


@dataclass(frozen=True, slots=True)
class Candidate:
    """One fleet: disaggregated (prefill, decode > 0) or colocated (colocated > 0); each side's
    layout in the cluster's field names ({side}_tp, {side}_dp, {side}_moe_ep, {side}_moe_a2a)."""

    mode: str
    estimate_rps: float
    prefill: int = 0
    decode: int = 0
    colocated: int = 0
    prefill_tp: int = 1
    decode_tp: int = 1
    colocated_tp: int = 1
    goodput_rps: float = math.nan  # measured on the full fleet (nan: not verified)
    prefill_dp: int = 1
    decode_dp: int = 1
    colocated_dp: int = 1
    prefill_moe_ep: int = 1
    decode_moe_ep: int = 1
    colocated_moe_ep: int = 1
    prefill_moe_a2a: str = ""
    decode_moe_a2a: str = ""
    colocated_moe_a2a: str = ""

    def layout(self, side: str) -> Layout:
        """The layout of `side` (prefill, decode, colocated)."""
        return Layout(getattr(self, f"{side}_tp"), getattr(self, f"{side}_dp"), getattr(self, f"{side}_moe_ep"),
                      getattr(self, f"{side}_moe_a2a"))

    @property
    def gpus(self) -> int:
        if self.mode == COLOCATED:
            return self.colocated * self.layout(COLOCATED).gpus
        return self.prefill * self.layout(PREFILL).gpus + self.decode * self.layout(DECODE).gpus

    @property
    def label(self) -> str:
        """`colocated x2 (TP8)`, `1P(TP8/EP8) 2D(TP1xDP8/EP8)`."""
        if self.mode == COLOCATED:
            return f"colocated x{self.colocated} ({self.layout(COLOCATED).text})"
        return f"{self.prefill}P({self.layout(PREFILL).text}) {self.decode}D({self.layout(DECODE).text})"


def fleet(mode: str, estimate_rps: float, **sides: tuple[int, Layout]) -> Candidate:
    """A candidate from (count, layout) per side: fleet(DISAGG, 0.0, prefill=(1, lay), decode=(4, top))."""
    fields: dict[str, Any] = {}
    for side, (count, layout) in sides.items():
        fields.update({side: count, **layout_fields(side, layout)})
    return Candidate(mode, estimate_rps, **fields)


@dataclass(frozen=True)
class Plan:
    gpus: int
    roles: tuple[RoleGoodput, ...]
    disaggregated: tuple[Candidate, ...]  # verified, best first
    colocated: tuple[Candidate, ...]
    small_probes: tuple[str, ...] = ()  # labels of measurements whose probe was too small

    @property
    def best(self) -> Candidate | None:
        """The recommendation: the best verified fleet of either mode (goodput > 0)."""
        cands = [c for c in (self.best_disaggregated, self.best_colocated) if c is not None and c.goodput_rps > 0]
        return min(cands, key=lambda c: (-c.goodput_rps, c.gpus, c.mode != DISAGG), default=None)

    @property
    def best_disaggregated(self) -> Candidate | None:
        return self.disaggregated[0] if self.disaggregated else None

    @property
    def best_colocated(self) -> Candidate | None:
        return self.colocated[0] if self.colocated else None

    @property
    def gain(self) -> float:
        """Best disaggregated goodput / best colocated goodput (nan when either is missing or 0)."""
        best = self.best_disaggregated
        if best is None or self.best_colocated is None or self.best_colocated.goodput_rps <= 0:
            return math.nan
        return best.goodput_rps / self.best_colocated.goodput_rps


def plan_layouts(cfg: Config) -> list[Layout]:
    """Layouts (ascending) of plan.tp_options x dp_options x ep_options that fit the model
    within the budget (pdsim.search.deployments.layout_problem)."""
    p = cfg.plan
    return fitting_layouts(cfg, p.tp_options, p.gpus, "plan.gpus", dp_options=p.dp_options, ep_options=p.ep_options,
                           a2a_options=p.a2a_options)


def fitting_tps(cfg: Config) -> list[int]:
    """The attention TPs (ascending) of the fitting layouts."""
    return sorted({layout.tp for layout in plan_layouts(cfg)})


def helper_layout(layouts: Sequence[Layout]) -> Layout:
    """The layout of the other side's helpers: the most GPUs, plain TP first, then the larger TP
    (with TP options only: the largest TP)."""
    return max(layouts, key=lambda lay: (lay.gpus, lay.parallel.plain_tp, lay.tp, -lay.dp, -lay.moe_ep))


def candidate_config(cfg: Config, cand: Candidate) -> Config:
    cluster = replace(
        cfg.cluster, total_instances=0, mode="colocated" if cand.mode == COLOCATED else "disaggregated",
        prefill=max(1, cand.prefill), decode=max(1, cand.decode), colocated=max(1, cand.colocated),
        **{k: v for side in (PREFILL, DECODE, COLOCATED) for k, v in layout_fields(side, cand.layout(side)).items()},
    )
    return replace(cfg, cluster=cluster)


def role_fleet(role: str, layout: Layout, helper: Layout, helpers: int) -> Candidate:
    """The fleet that measures one instance of `role` at `layout`."""
    if role == PREFILL:
        return fleet(DISAGG, 0.0, prefill=(1, layout), decode=(helpers, helper))
    if role == DECODE:
        return fleet(DISAGG, 0.0, prefill=(helpers, helper), decode=(1, layout))
    return fleet(COLOCATED, 0.0, colocated=(1, layout))


def _measure(cfg: Config, role: str, layout: Layout, helper: Layout, helpers: int, evaluate: Evaluate) -> float:
    g = evaluate(candidate_config(cfg, role_fleet(role, layout, helper, helpers)), cfg.search.start_rps)
    log.info("one %s instance at %s (%d helpers): %.4g req/s", role, layout.text, helpers, g)
    return g


def helper_counts(cfg: Config, top: int | Layout, evaluate: Evaluate) -> tuple[dict[str, int], dict[str, float]]:
    """Helpers per measured role, doubled until they offer HEADROOM x the measured instance's rate.

    Returns the helper counts and the goodputs of one prefill / one decode instance at the
    helper layout `top` (a TP: plain TP).
    """
    top = top if isinstance(top, Layout) else Layout(top)
    other = {PREFILL: DECODE, DECODE: PREFILL}
    helpers = {PREFILL: cfg.plan.helper_instances, DECODE: cfg.plan.helper_instances}
    g = {role: _measure(cfg, role, top, top, helpers[role], evaluate) for role in (PREFILL, DECODE)}
    for doublings in range(MAX_DOUBLINGS + 1):
        short = [r for r in (PREFILL, DECODE) if g[r] > 0 and HEADROOM * g[r] > helpers[r] * g[other[r]]]
        if not short:
            return helpers, g
        if doublings == MAX_DOUBLINGS:
            break
        for role in short:
            helpers[role] *= 2
            g[role] = _measure(cfg, role, top, top, helpers[role], evaluate)
    log.warning("plan: helpers still within %gx of the measured rates after %d doublings: %s",
                HEADROOM, MAX_DOUBLINGS, helpers)
    return helpers, g


def measure_roles(cfg: Config, layouts: Sequence[Layout], evaluate: Evaluate, colocated: bool) -> list[RoleGoodput]:
    top = helper_layout(layouts)
    helpers, at_top = helper_counts(cfg, top, evaluate)
    out = []
    for role in (PREFILL, DECODE):
        for lay in layouts:
            g = at_top[role] if lay == top else _measure(cfg, role, lay, top, helpers[role], evaluate)
            out.append(RoleGoodput(role, lay.tp, g, lay.dp, lay.moe_ep, lay.moe_a2a))
    if colocated:
        out += [RoleGoodput(COLOCATED, lay.tp, _measure(cfg, COLOCATED, lay, top, 0, evaluate), lay.dp, lay.moe_ep,
                            lay.moe_a2a)
                for lay in layouts]
    return out


def disaggregated_candidates(roles: Sequence[RoleGoodput], gpus: int) -> list[Candidate]:
    """Every P:D fleet filling the budget (decode takes the rest), best estimate first."""
    pre = [r for r in roles if r.role == PREFILL and r.goodput_rps > 0]
    dec = [r for r in roles if r.role == DECODE and r.goodput_rps > 0]
    cands = []
    for p in pre:
        for d in dec:
            p_gpus, d_gpus = p.layout.gpus, d.layout.gpus
            for n_p in range(1, (gpus - d_gpus) // p_gpus + 1):
                n_d = (gpus - n_p * p_gpus) // d_gpus
                est = min(n_p * p.goodput_rps, n_d * d.goodput_rps)
                cands.append(fleet(DISAGG, est, prefill=(n_p, p.layout), decode=(n_d, d.layout)))
    return rank(cands, key=lambda c: c.estimate_rps)


def colocated_candidates(roles: Sequence[RoleGoodput], gpus: int) -> list[Candidate]:
    cands = [fleet(COLOCATED, (gpus // r.layout.gpus) * r.goodput_rps, colocated=(gpus // r.layout.gpus, r.layout))
             for r in roles if r.role == COLOCATED and r.goodput_rps > 0 and gpus // r.layout.gpus > 0]
    return rank(cands, key=lambda c: c.estimate_rps)


def rank(cands: Sequence[Candidate], key: Callable[[Candidate], float]) -> list[Candidate]:
    """Highest key first; ties: fewer GPUs, then smaller layouts (TP, DP, EP), then fewer prefill instances."""
    return sorted(cands, key=lambda c: (-key(c), c.gpus, c.layout(PREFILL), c.layout(DECODE), c.layout(COLOCATED),
                                        c.prefill))


def verify(cfg: Config, cands: Sequence[Candidate], evaluate: Evaluate, top: int) -> tuple[Candidate, ...]:
    checked = []
    for cand in cands[:top]:
        g = evaluate(candidate_config(cfg, cand), max(cand.estimate_rps, cfg.search.start_rps))
        log.info("%s: estimated %.4g, measured %.4g req/s", cand.label, cand.estimate_rps, g)
        checked.append(replace(cand, goodput_rps=g))
    return tuple(rank(checked, key=lambda c: c.goodput_rps))


def simulated_goodput(cfg: Config, start_rps: float) -> float:
    """The default oracle: a goodput search (pdsim.search.task.goodput_search) from `start_rps`,
    each probe sized by `ProbeSize` for this fleet."""
    from pdsim.search.task import goodput_search

    size, lone_s = ProbeSize.of(cfg), fleet_lone_s(cfg)
    searched = replace(cfg, search=replace(cfg.search, start_rps=start_rps))
    return goodput_search(searched, requests_at=lambda rate: size.requests(rate, lone_s)).goodput_rps


@dataclass(frozen=True, slots=True)
class ProbeSize:
    """Requests per probe: `fixed` (> 0), or arrivals spanning MIN_LIFETIMES lone-request latencies
    at the probed rate, within [min_requests, max_requests]."""

    fixed: int
    min_requests: int
    max_requests: int

    @classmethod
    def of(cls, cfg: Config) -> ProbeSize:
        return cls(cfg.plan.num_requests, cfg.plan.min_requests, cfg.plan.max_requests)

    def requests(self, rate_rps: float, lone_s: float) -> int:
        if self.fixed > 0:
            return self.fixed
        wanted = math.ceil(MIN_LIFETIMES * lone_s * rate_rps) if math.isfinite(lone_s * rate_rps) else self.max_requests
        return int(min(self.max_requests, max(self.min_requests, wanted)))

    def too_small(self, rate_rps: float, lone_s: float) -> bool:
        """Whether a probe at `rate_rps` spans fewer than MIN_LIFETIMES lone latencies of arrivals."""
        return rate_rps > 0 and self.requests(rate_rps, lone_s) / rate_rps < MIN_LIFETIMES * lone_s


def planning_config(cfg: Config) -> Config:
    """The config the planner simulates: plan.num_requests requests per probe (when fixed), rates
    from plan.min_rate_rps."""
    if cfg.plan.gpus < 1 or cfg.plan.verify_top < 1 or cfg.plan.helper_instances < 1:
        raise ValueError(
            f"plan: gpus={cfg.plan.gpus}, verify_top={cfg.plan.verify_top} and "
            f"helper_instances={cfg.plan.helper_instances} must be >= 1"
        )
    if cfg.plan.num_requests < 0 or not 1 <= cfg.plan.min_requests <= cfg.plan.max_requests:
        raise ValueError(f"plan: num_requests={cfg.plan.num_requests} must be >= 0 and min_requests="
                         f"{cfg.plan.min_requests} <= max_requests={cfg.plan.max_requests}, both >= 1")
    if cfg.plan.num_requests > 0:
        cfg = replace(cfg, scenario=replace(cfg.scenario, num_requests=cfg.plan.num_requests))
    search = replace(cfg.search, min_rate_rps=max(cfg.search.min_rate_rps, cfg.plan.min_rate_rps))
    return replace(cfg, search=search)


def lone_parts_s(cfg: Config, tp: int | Parallel) -> tuple[float, float]:
    """(prefill, decode) latency of one mean-sized request on idle instances of TP `tp` (or of a
    Parallel layout): its prompt's prefill, and every decode step at half its output's context."""
    from pdsim.perf import build_latency_model
    from pdsim.workload import build_workload

    wl = build_workload(cfg.scenario, cfg.seed, cfg.data_dir)
    prompt, output = int(wl.input_tokens.mean()), int(wl.output_tokens.mean())
    lat = build_latency_model(cfg.perf, cfg.model, cfg.hardware, tp, data_dir=cfg.data_dir)
    return lat.prefill_time_s([(prompt, 0)]), max(0, output - 1) * lat.decode_time_s(1, prompt + output // 2)


# (prefill, decode) lone latencies of a layout: its TP when plain, else its Parallel
Parts = Callable[[int | Parallel], tuple[float, float]]


def fleet_lone_s(cfg: Config, parts: Parts | None = None) -> float:
    """A lone request's latency on `cfg`'s fleet: prefill at the prefill (or colocated) layout,
    decode at the decode (or colocated) layout."""
    parts = parts or (lambda key: lone_parts_s(cfg, key))
    c = cfg.cluster

    def key(side: str) -> int | Parallel:
        p = c.parallel(side)
        return p.tp if p.plain_tp else p

    if c.mode == COLOCATED:
        return sum(parts(key(COLOCATED)))
    return parts(key(PREFILL))[0] + parts(key(DECODE))[1]


def small_probes(cfg: Config, measured: Sequence[tuple[str, Config, float]], parts: Parts) -> list[str]:
    """Labels of (label, fleet config, goodput) measurements whose probe at the goodput was too
    small (`ProbeSize.too_small`: a fixed plan.num_requests, or the plan.max_requests cap)."""
    size = ProbeSize.of(cfg)
    return [label for label, fleet, g in measured if size.too_small(g, fleet_lone_s(fleet, parts))]


def plan(cfg: Config, evaluate: Evaluate = simulated_goodput) -> Plan:
    """Measure roles, rank fleets under plan.gpus, verify the best of each mode."""
    cfg = planning_config(cfg)
    layouts = plan_layouts(cfg)
    roles = measure_roles(cfg, layouts, evaluate, cfg.plan.colocated)
    disagg = verify(cfg, disaggregated_candidates(roles, cfg.plan.gpus), evaluate, cfg.plan.verify_top)
    coloc = verify(cfg, colocated_candidates(roles, cfg.plan.gpus), evaluate, cfg.plan.verify_top)
    return Plan(cfg.plan.gpus, tuple(roles), disagg, coloc, tuple(flag_small(cfg, layouts, roles, (*disagg, *coloc))))


def flag_small(cfg: Config, layouts: Sequence[Layout], roles: Sequence[RoleGoodput],
               fleets: Sequence[Candidate]) -> list[str]:
    """Labels of the role measurements and verified fleets whose probes were too small (warned)."""
    top = helper_layout(layouts)
    measured = [(r.label, candidate_config(cfg, role_fleet(r.role, r.layout, top, 1)), r.goodput_rps) for r in roles]
    measured += [(c.label, candidate_config(cfg, c), c.goodput_rps) for c in fleets]
    cache: dict[int | Parallel, tuple[float, float]] = {}
    small = small_probes(cfg, measured, lambda key: cache.setdefault(key, lone_parts_s(cfg, key)))
    if small:
        log.warning("plan: probes too small to load these fleets to steady state: %s (%s)", ", ".join(small),
                    "raise plan.num_requests, or 0 to size them" if cfg.plan.num_requests else "raise plan.max_requests")
    return small
