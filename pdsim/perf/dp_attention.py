"""Attention data parallelism: an instance of dp ranks that meet at every MoE layer.

Under DP attention (SGLang `--enable-dp-attention`, TRT-LLM `enable_attention_dp`) an instance
of tp x dp GPUs runs dp ranks. Each rank holds its own requests and KV cache and runs attention,
the dense layers, the router and shared experts, and the LM head over its own tokens on its tp
GPUs; at every MoE layer all ranks meet: their hidden states are gathered over the instance's
GPUs (all-gather), the routed experts run over the instance's tokens split moe_tp x moe_ep ways,
and the outputs go back to their ranks (reduce-scatter). A step lasts as long as its busiest rank
plus the MoE layers (a decode step: the busiest rank holds ceil(n / dp) sequences at the
batch's mean KV length, one table lookup, compiled as TableStep):

    step = max over ranks (rank part) + moe_layers x (all-gather + experts(all tokens) + reduce-scatter)
           + overhead_s + overhead_per_seq_s x (sequences of the busiest rank)

With perf.moe_a2a=deepep (and EP > 1) the MoE layers are DeepEP's instead: dispatch + experts +
combine per layer, each rank moving only its own tokens (deepep.py, `moe_s`).

How a step's work spreads over the ranks (the assumption, stated): the scheduler of this
simulator keeps one batch per instance, and this model spreads it the way SGLang's round-robin
DP dispatch does on average: decodes evenly (ranks differ by at most one), prompt chunks largest
first onto the least-loaded rank (ties: the lowest rank), context in proportion to the decodes.
A prefill instance under cluster.prefill_dp_dispatch=bootstrap_room places its chunks itself
(each rank its own queue, pdsim.policy.dp_dispatch) and prices them with `prefill_ranks_time_s`.
Per-rank KV pools are not modelled (docs/MOE.md).

Collectives come from the set's NCCL tables (optables.OpTables.collective) by GPU count; past
the largest measured count, collectives.beyond_table_s adds the extra latency steps (none inside
one NVLink domain: NVLS; ring steps past it) and the bytes at the slowest link (a NIC outside
one NVLink domain).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pdsim.config import HardwareConfig
from pdsim.parallel import split_even
from pdsim.perf import spec
from pdsim.perf.base import PrefillItem, PrefillTimer
from pdsim.perf.collectives import beyond_table_s
from pdsim.perf.cost import ACTIVATION_BYTES
from pdsim.perf.deepep import DeepEpMoe
from pdsim.perf.measured import MeasuredModel
from pdsim.perf.steps.decode import CallStep, DecodeStep, TableStep

RankShare = tuple[tuple[PrefillItem, ...], int, int]  # (prompt chunks, decodes, their context tokens)
_MEMO_ENTRIES = 1 << 16


def spread(items: Sequence[PrefillItem], num_seqs: int, context_tokens: int, dp: int) -> list[RankShare]:
    """One step's work over dp ranks: decodes evenly (the first ranks take the remainder),
    then prompt chunks largest first onto the rank with the fewest tokens (lowest rank on ties)."""
    base, extra = divmod(num_seqs, dp)
    seqs = [base + (1 if r < extra else 0) for r in range(dp)]
    ctx = [context_tokens * n // num_seqs if num_seqs else 0 for n in seqs]
    ctx[0] += context_tokens - sum(ctx)
    load = list(seqs)
    chunks: list[list[PrefillItem]] = [[] for _ in range(dp)]
    for item in sorted(items, key=lambda it: -it[0]):
        r = min(range(dp), key=lambda i: (load[i], i))
        chunks[r].append(item)
        load[r] += item[0]
    return [(tuple(chunks[r]), seqs[r], ctx[r]) for r in range(dp)]


@dataclass(frozen=True, eq=False)
class DataParallelModel:
    """dp ranks of one MeasuredModel (its tp = the rank's TP, its MoE over tp x dp GPUs)."""

    rank: MeasuredModel
    dp: int
    hardware: HardwareConfig
    name: str = "measured"
    deepep: DeepEpMoe | None = None  # perf.moe_a2a=deepep: DeepEP dispatch/combine (deepep.py), else all-gather
    _memo: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.dp < 2:
            raise ValueError(f"perf: attention DP needs dp >= 2, got {self.dp}")
        for op in ("all_gather", "reduce_scatter"):
            if not self.rank.tables.collective(op):
                raise ValueError(f"perf: table set {self.rank.tables.source} has no NCCL {op} table, "
                                 f"which attention DP (dp={self.dp}) needs")

    @property
    def gpus(self) -> int:
        return self.rank.tp * self.dp

    def _remember(self, key: tuple, value: float) -> float:
        if len(self._memo) >= _MEMO_ENTRIES:
            self._memo.clear()
        self._memo[key] = value
        return value

    def collective_s(self, op: str, message_bytes: float) -> float:
        """One NCCL collective over the instance's GPUs (s)."""
        grids = self.rank.tables.collective(op)
        gpus = self.gpus
        if gpus in grids:
            return grids[gpus](message_bytes) / 1e3
        top = max(grids)
        return grids[top](message_bytes) / 1e3 + beyond_table_s(self.hardware, top, gpus, message_bytes, 1)

    def _moe_exchange_s(self, tokens: int) -> float:
        """All-gather of every rank's hidden states before an MoE layer, reduce-scatter after."""
        key = ("exchange", tokens)
        hit = self._memo.get(key)
        if hit is None:
            nbytes = tokens * self.rank.model.hidden_size * ACTIVATION_BYTES
            hit = self._remember(key, self.collective_s("all_gather", nbytes) + self.collective_s("reduce_scatter", nbytes))
        return hit

    def step_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        tokens = sum(n for n, _ in items) + num_seqs
        if tokens <= 0:
            return 0.0
        return self._shares_s(spread(items, num_seqs, context_tokens, self.dp), tokens, bool(items))

    def _shares_s(self, shares: Sequence[RankShare], tokens: int, prompt: bool) -> float:
        """A step whose work lies on the ranks as `shares` (`tokens` in all)."""
        busiest = max(self.rank.rank_s(*share) for share in shares)
        seqs = max(len(share[0]) + share[1] for share in shares)
        rank_tokens = max(sum(n for n, _ in chunks) + decodes for chunks, decodes, _ in shares)
        moe = self.moe_s(tokens, rank_tokens, prompt)
        return busiest + moe + self.rank.overhead_s + self.rank.overhead_per_seq_s * seqs

    def prefill_ranks_time_s(self, ranks: Sequence[Sequence[PrefillItem]]) -> float:
        """A prefill forward whose chunks the scheduler placed on the ranks itself (one item list
        per rank, pdsim.policy.dp_dispatch), not spread by this model."""
        if len(ranks) != self.dp:
            raise ValueError(f"perf: a forward over {len(ranks)} ranks on an instance of dp={self.dp}")
        tokens = sum(n for items in ranks for n, _ in items)
        if tokens <= 0:
            return 0.0
        key = ("ranks", tuple(tuple(items) for items in ranks))
        hit = self._memo.get(key)
        if hit is None:
            hit = self._remember(key, self._shares_s([(tuple(items), 0, 0) for items in ranks], tokens, True))
        return hit  # type: ignore[no-any-return]

    def moe_s(self, tokens: int, rank_tokens: int, prompt: bool) -> float:
        """Every MoE layer of one step: `tokens` over the instance, `rank_tokens` on its busiest
        rank; DeepEP's dispatch + experts + combine (`prompt`: normal kernels, else low-latency),
        else all-gather + experts over all tokens + reduce-scatter."""
        moe_layers = spec.num_moe_layers(self.rank.model)
        if self.deepep is not None:
            return moe_layers * self.deepep.layer_s(tokens, rank_tokens, prompt)
        return self.rank.moe_experts_s(tokens) + moe_layers * self._moe_exchange_s(tokens)

    # -- LatencyModel ----------------------------------------------------------------------
    def prefill_time_s(self, items: Sequence[PrefillItem]) -> float:
        key = tuple(items)
        hit = self._memo.get(key)
        if hit is None:
            hit = self._remember(key, self.step_time_s(items, 0, 0))
        return hit  # type: ignore[no-any-return]

    def decode_time_s(self, num_seqs: int, context_tokens: int) -> float:
        """A decode step: its busiest rank holds ceil(n / dp) sequences at the batch's mean KV
        length (decode_step compiles the same formula); the general step where attention is not
        one table lookup (sliding / linear layers, tables scaled from another GPU)."""
        if num_seqs <= 0:
            return 0.0
        if not self.rank.table_decode:
            return self.step_time_s((), num_seqs, context_tokens)
        busiest = split_even(num_seqs, self.dp)
        return self._decode_fixed_s(num_seqs) + self.rank.model.num_layers * (
            self.rank.generation_ms(busiest, context_tokens / num_seqs) / 1e3)

    def _decode_fixed_s(self, num_seqs: int) -> float:
        """The context-free part of a decode step of n sequences over the dp ranks."""
        key = ("decode_fixed", num_seqs)
        hit = self._memo.get(key)
        if hit is None:
            busiest = split_even(num_seqs, self.dp)
            hit = self._remember(key, self.rank.rank_fixed_s(busiest, busiest) + self.rank.mla_split_s(0, busiest)
                                 + self.moe_s(num_seqs, busiest, False)
                                 + self.rank.overhead_s + self.rank.overhead_per_seq_s * busiest)
        return hit  # type: ignore[no-any-return]

    def mixed_time_s(self, items: Sequence[PrefillItem], num_seqs: int, context_tokens: int) -> float:
        return self.step_time_s(items, num_seqs, context_tokens)

    def decode_step(self, num_seqs: int) -> DecodeStep:
        if not self.rank.table_decode:
            return CallStep(num_seqs, self.decode_time_s)
        busiest = split_even(num_seqs, self.dp)
        return TableStep(num_seqs, self._decode_fixed_s(num_seqs), self.rank.model.num_layers,
                         *self.rank.generation_row(busiest))

    def prefill_timer(self) -> PrefillTimer:
        return self.prefill_time_s

