"""DeepEP: the MoE layers of an attention-DP instance as SGLang runs them with
`--moe-a2a-backend deepep` (perf.moe_a2a=deepep).

Without it (perf.moe_a2a=allgather, dp_attention.py) every rank's hidden states are gathered to
every GPU, each GPU runs its experts over all the instance's tokens and the outputs are
reduce-scattered back. With DeepEP each rank sends a token only to the GPUs that hold its top-k
experts (dispatch) and gets the weighted expert outputs back (combine): a GPU computes only the
tokens routed to its experts, and nothing moves that a token's experts do not need. One MoE layer:

    dispatch(rank tokens) + experts(all tokens, EP) + combine(rank tokens)

Tables (extract_deepep.py, from AIConfigurator's SGLang wide-EP collections): `deepep_moe` (the
routed experts behind DeepEP by EP size and the tokens of all ranks: context = DeepEP's normal
mode, generation = its low-latency mode with masked grouped GEMMs) and `deepep_a2a` (dispatch
and combine per rank by the rank's tokens: ll and normal kernels). SGLang's `deepep_mode=auto`:
a step with prompt tokens runs the normal kernels and the context table, a decode-only step the
low-latency ones. The rank tokens are the busiest rank's (the step waits for it).

Assumptions, stated: the tables' routing (balanced unless perf.moe_distribution says otherwise);
no overlap of dispatch/combine with compute (SGLang's two-batch overlap is not modelled); the
dispatch tables were measured inside one node: past the NVLink domain the bytes that leave it
(dispatch fp8 in ll mode, bf16 otherwise; combine bf16) cross the NIC as well. The expert tables
cover DeepSeek-V3's shape in fp8_block only: another quant mode or expert shape takes that table
times the ratio of the set's standard fused-MoE tables (model's dtype and shape over the
measured ones) at the same EP and tokens, and the dispatch of another (hidden, top-k) the
measured curve at the tokens that move the same bytes. Neither rescaling has been held against
a measurement of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

import pandas as pd

from pdsim.config import HardwareConfig, ModelConfig
from pdsim.perf.collectives import nic_bytes_per_s_per_gpu, nvlink_domain_gpus
from pdsim.perf.loggrid import LogGrid
from pdsim.perf.optables import AIC_DIR, MoeShape, OpTables, table_file
from pdsim.perf.table_keys import moe_shape, moe_table_dtype

Scale = Callable[[float], float]  # the experts table's factor at a token count
HALF_BYTES, FP8_BYTES = 2, 1


@dataclass(frozen=True, eq=False)
class DeepEpTables:
    """One set's DeepEP rows (deepep_moe, deepep_a2a)."""

    source: str
    moe: pd.DataFrame
    a2a: pd.DataFrame


@cache
def load_deepep(name: str) -> DeepEpTables:
    """The DeepEP tables of table set `name`; a one-line error if it has none."""
    folder = AIC_DIR / name
    paths = {stem: table_file(folder, stem) for stem in ("deepep_moe", "deepep_a2a")}
    missing = [stem for stem, path in paths.items() if path is None]
    if missing:
        raise ValueError(f"perf: field 'moe_a2a' = 'deepep' needs DeepEP tables; table set {name} has no "
                         f"{' or '.join(missing)} (extract_deepep.py: SGLang sets of h100_sxm, b200_sxm, b300_sxm, gb300)")
    return DeepEpTables(name, pd.read_csv(paths["deepep_moe"]), pd.read_csv(paths["deepep_a2a"]))


@dataclass(frozen=True, eq=False)
class DeepEpMoe:
    """One MoE layer behind DeepEP for one model and EP size (layer_s)."""

    tables: DeepEpTables
    standard: OpTables  # the set's fused-MoE tables: the rescaling of another dtype or shape
    model: ModelConfig
    moe_ep: int
    hardware: HardwareConfig
    distribution: str = "balanced"
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for phase in ("context", "generation"):
            self._experts_grid(phase)  # fail at build time, not in the middle of a run
        for mode in ("ll", "normal"):
            self._a2a_grids(mode)

    def layer_s(self, tokens: int, rank_tokens: int, prompt: bool) -> float:
        """One MoE layer (s): `tokens` over all ranks, `rank_tokens` on the busiest rank, normal
        kernels if the step has prompt tokens (`prompt`), else low-latency ones."""
        key = (tokens, rank_tokens, prompt)
        hit = self._memo.get(key)
        if hit is None:
            phase, mode = ("context", "normal") if prompt else ("generation", "ll")
            grid, scale = self._experts_grid(phase)
            dispatch, combine, per_token = self._a2a_grids(mode)
            moved = rank_tokens * per_token
            hit = (grid(self.moe_ep, tokens) * scale(tokens) + dispatch(moved) + combine(moved)) / 1e3
            hit += self._beyond_domain_s(rank_tokens, FP8_BYTES if mode == "ll" else HALF_BYTES)
            self._memo[key] = hit
        return hit  # type: ignore[no-any-return]

    def _experts_grid(self, phase: str) -> tuple[LogGrid, Scale]:
        key = ("experts", phase)
        if key not in self._memo:
            rows = self.tables.moe[(self.tables.moe.phase == phase)
                                   & (self.tables.moe.distribution == self.distribution)]
            if rows.empty:
                raise ValueError(f"perf: {self.tables.source} deepep_moe has no {phase} rows with routing "
                                 f"{self.distribution!r}")
            dtype, shape = moe_table_dtype(self.model), moe_shape(self.model)
            exact = rows[(rows.moe_dtype == dtype) & _shape_mask(rows, shape)]
            ref = exact if len(exact) else rows[rows.moe_dtype == rows.moe_dtype.iloc[0]]
            h, i, k, e = (int(ref[c].iloc[0]) for c in ("hidden_size", "inter_size", "topk", "num_experts"))
            ref_shape = (h, i, k, e)
            ref = ref[_shape_mask(ref, ref_shape)]
            grid = LogGrid.from_frame(ref, ("moe_ep_size", "num_tokens"), f"{self.tables.source} deepep_moe")
            scale = _unscaled if len(exact) else self._rescale(dtype, shape, str(ref.moe_dtype.iloc[0]), ref_shape)
            self._memo[key] = grid, scale
        return self._memo[key]  # type: ignore[no-any-return]

    def _rescale(self, dtype: str, shape: MoeShape, ref_dtype: str, ref_shape: MoeShape) -> Scale:
        ours = self.standard.moe_grid(dtype, shape, 1, self.moe_ep, self.distribution)
        theirs = self.standard.moe_grid(ref_dtype, ref_shape, 1, self.moe_ep, self.distribution)
        if ours is None or theirs is None:
            raise ValueError(f"perf: DeepEP experts of {self.model.name} ({dtype}, shape {shape}) are not in "
                             f"{self.tables.source} deepep_moe, and its fused-MoE table has no EP{self.moe_ep} "
                             f"rows of {'that shape' if ours is None else ref_dtype} to rescale the measured one")
        return lambda tokens: ours(tokens) / theirs(tokens)

    def _a2a_grids(self, mode: str) -> tuple[LogGrid, LogGrid, float]:
        """(dispatch, combine) over the rank's tokens for `mode`, and the tokens' scale: the
        model's (hidden, top-k) as tokens of the measured key that move the same bytes."""
        key = ("a2a", mode)
        if key not in self._memo:
            rows = self.tables.a2a[self.tables.a2a["mode"] == mode]
            if rows.empty:
                raise ValueError(f"perf: {self.tables.source} deepep_a2a has no {mode} rows")
            m = self.model
            want = (m.hidden_size, m.num_active_experts, m.num_experts)
            keys = rows[["hidden_size", "topk", "num_experts"]].drop_duplicates().itertuples(index=False, name=None)
            best = min(keys, key=lambda k: (k[:2] != want[:2], abs(math.log(k[2] / max(want[2], 1))), k))
            part = rows[(rows.hidden_size == best[0]) & (rows.topk == best[1]) & (rows.num_experts == best[2])]
            what = f"{self.tables.source} deepep_a2a {mode}"
            dispatch = LogGrid.from_frame(part.assign(latency_ms=part.dispatch_ms), ("num_tokens",), what)
            combine = LogGrid.from_frame(part.assign(latency_ms=part.combine_ms), ("num_tokens",), what)
            self._memo[key] = dispatch, combine, (want[0] * want[1]) / (best[0] * best[1])
        return self._memo[key]  # type: ignore[no-any-return]

    def _beyond_domain_s(self, rank_tokens: int, dispatch_bytes: int) -> float:
        """The bytes that leave the NVLink domain (EP wider than it) at the NIC's speed."""
        domain, nic = nvlink_domain_gpus(self.hardware), nic_bytes_per_s_per_gpu(self.hardware)
        if self.moe_ep <= domain or nic <= 0:
            return 0.0
        sent = rank_tokens * self.model.num_active_experts * self.model.hidden_size * (dispatch_bytes + HALF_BYTES)
        return sent * (self.moe_ep - domain) / self.moe_ep / nic


def _unscaled(tokens: float) -> float:
    return 1.0


def _shape_mask(rows: pd.DataFrame, shape: MoeShape) -> pd.Series:
    hidden, inter, topk, experts = shape
    return ((rows.hidden_size == hidden) & (rows.inter_size == inter) & (rows.topk == topk)
            & (rows.num_experts == experts))
