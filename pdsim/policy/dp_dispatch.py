"""Which attention-DP rank of a prefill instance takes a prompt, and each rank's own batch.

A prefill instance of dp attention-DP ranks (SGLang `--enable-dp-attention`) runs one forward
for all ranks at once: the ranks meet at every MoE layer, so a forward lasts as long as its
busiest rank. How prompts reach the ranks decides how busy that rank is:

- `balanced` (the default; pdsim.perf.dp_attention.spread): one batch of dp ranks' worth of
  budget, spread over the ranks largest chunk first. The best a dispatcher could do.
- `bootstrap_room` (SGLang's prefill server under PD disaggregation: its DataParallelController
  sends a request to rank `bootstrap_room % dp`, `follow_bootstrap_room`): the rank is fixed by
  the request's random bootstrap room, and each rank schedules its own queue under its own
  budget (each DP rank runs its own scheduler and PrefillAdder). A rank whose queue is empty
  idles through the forward; one with a deep queue fills its budget. Under a light load the
  forward is set by the rank that drew the most prompts, not by the mean.

`form_ranked_prefill_batch` is the second rule's batch: per rank, that rank's chunked request
first, then its waiting requests in FIFO order, until its adder closes; the ranks share the
instance's free KV (pdsim keeps one KV pool per instance: per-rank pools are not modelled).
Pure and deterministic: no simpy, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from pdsim.policy.batching import PrefillAdder, PrefillBatch, PrefillBudget, PrefillChunk
from pdsim.policy.views import RequestView

BALANCED: Final = "balanced"
BOOTSTRAP_ROOM: Final = "bootstrap_room"
DISPATCHES: Final = (BALANCED, BOOTSTRAP_ROOM)


def check_dispatch(name: str, where: str = "cluster") -> str:
    """`name` if it is a prefill DP dispatch rule, else ValueError naming the field and choices."""
    if name not in DISPATCHES:
        raise ValueError(f"{where}: field 'prefill_dp_dispatch' has unknown value {name!r} (choose from {DISPATCHES})")
    return name


def prefill_dp_rank(bootstrap_room: int, dp_ranks: int) -> int:
    """The rank SGLang's prefill DP controller sends a request to: bootstrap_room mod dp."""
    if dp_ranks < 1:
        raise ValueError(f"dp dispatch: dp_ranks must be >= 1, got {dp_ranks}")
    if bootstrap_room < 0:
        raise ValueError(f"dp dispatch: bootstrap_room must be >= 0, got {bootstrap_room}")
    return bootstrap_room % dp_ranks


def rank_budget(budget: PrefillBudget, dp_ranks: int) -> PrefillBudget:
    """One rank's share of an instance budget that holds dp ranks' worth of each limit."""
    return PrefillBudget(
        max_prefill_tokens=budget.max_prefill_tokens // dp_ranks, chunk_size_tokens=budget.chunk_size_tokens // dp_ranks,
        page_size_tokens=budget.page_size_tokens, free_kv_tokens=budget.free_kv_tokens,
        reserved_kv_tokens=budget.reserved_kv_tokens, new_token_ratio=budget.new_token_ratio,
        max_requests=budget.max_requests // dp_ranks if budget.max_requests > 0 else 0,
    )


def form_ranked_prefill_batch(candidates: Iterable[tuple[int, RequestView]], budget: PrefillBudget,
                              dp_ranks: int) -> tuple[PrefillBatch, tuple[int, ...]]:
    """(the forward's batch, each chunk's rank) for (rank, request) candidates in scheduling
    order, each rank filling its own share of `budget` (rank_budget) from its own requests.
    Consumption stops once every rank's adder has closed."""
    share = rank_budget(budget, dp_ranks)
    adders = [PrefillAdder(share) for _ in range(dp_ranks)]
    kv_left = budget.free_kv_tokens - budget.reserved_kv_tokens
    open_ranks = dp_ranks
    order: list[int] = []
    for rank, req in candidates:
        if not 0 <= rank < dp_ranks:
            raise ValueError(f"dp dispatch: request {req.request_id} on rank {rank}, outside 0..{dp_ranks - 1}")
        adder = adders[rank]
        if adder.closed:
            continue
        adder.kv_left_tokens = kv_left  # the ranks draw on one pool
        before = len(adder.chunks)
        adder.add(req)
        kv_left = adder.kv_left_tokens
        if len(adder.chunks) > before:
            order.append(rank)
        if adder.closed:
            open_ranks -= 1
            if open_ranks == 0:
                break
    return _merge(adders, order)


def _merge(adders: list[PrefillAdder], order: list[int]) -> tuple[PrefillBatch, tuple[int, ...]]:
    """The ranks' chunks in the order they were added, and the batch's stop reason: the first
    closed rank's, else "empty" / "token_budget" as one adder would say."""
    taken = [0] * len(adders)
    chunks: list[PrefillChunk] = []
    for rank in order:
        chunks.append(adders[rank].chunks[taken[rank]])
        taken[rank] += 1
    batches = [a.batch() for a in adders]
    reasons = [b.stop_reason for b in batches if b.stop_reason != "empty"]
    return PrefillBatch(tuple(chunks), reasons[0] if reasons else "empty"), tuple(order)
