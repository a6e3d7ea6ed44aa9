"""Prefill and colocated step plans: which chunks run, which decodes run with them.

- `prefill_budget`: the one budget formula (token budget left after the running decodes, KV free
  minus the decodes' reservation, requests left under max_running_requests).
- `plan_prefill_step`: a prefill instance's forward (the chunked request first, then the
  waiting queue; prefix-cache hits arrive in the candidates' `prefilled_tokens`);
  `plan_ranked_prefill_step` the same when each attention-DP rank takes the requests its
  bootstrap room sends it (SGLang's prefill under PD; pdsim.policy.dp_dispatch).
- `plan_colocated_step`: one colocated iteration under either schedule -
  mixed (Sarathi-Serve / vLLM v1 / SGLang): first the running decodes get their next pages
  (retracting when short), then the PrefillAdder fills the budget left after one token per
  decode, and every decode runs in the same forward;
  prefill_priority (vLLM v0): a prefill batch runs alone whenever one can be formed; otherwise
  the decodes' pages grow and a decode-only iteration runs (if the growth failed every decode,
  the KV it freed goes to a prefill batch in the same iteration).
- `batch_waits`: TensorRT-LLM's batch waiting under the mixed schedule: while decodes run, the
  planned prompts are held back (a decode-only iteration) until they and the decodes fill
  `batch_wait_tokens_ratio` of the token budget or they have been held `batch_wait_iters`
  iterations; the executor keeps the count (`ColocatedStepPlan.waited_after`).
- under attention DP with TensorRT-LLM's balance (`limits.adp_timeout_iters`), the planned prompts
  run only when every rank has one, or at the timeout's turn (pdsim.policy.adp_balance; TensorRT-LLM
  then does no batch waiting); the executor keeps the counters (`ColocatedStepPlan.adp`) and tells
  the ranks (`DpRanks`).

Each planner reads its executor through a protocol of pdsim.policy.executors
(`PrefillExecutor`, `ColocatedExecutor`); the colocated planner tells its executor when to apply
the page growth, because what the PrefillAdder sees afterwards (free KV, the prefix cache's
answer for a retracted request) is the executor's own state. No simpy, no clock, no I/O.
"""

from __future__ import annotations

from typing import ClassVar, Final, Generic, TypeVar

from pdsim.policy.adp_balance import ADP_START, AdpCounters, DpRanks, adp_gate
from pdsim.policy.batching import (
    PrefillBatch,
    PrefillBudget,
    decode_reservation_tokens,
    form_prefill_batch,
)
from pdsim.policy.dp_dispatch import form_ranked_prefill_batch, prefill_dp_rank
from pdsim.policy.executors import ColocatedExecutor, PrefillExecutor, RankedPrefillExecutor
from pdsim.policy.limits import MIXED, StepLimits
from pdsim.policy.memory import plan_page_growth
from pdsim.policy.record import Record

T = TypeVar("T")
EMPTY = PrefillBatch((), "empty")


def prefill_budget(
    limits: StepLimits, free_kv_tokens: int, num_decodes: int = 0, reserved_kv_tokens: int = 0,
    num_running: int = 0,
) -> PrefillBudget | None:
    """The PrefillAdder's budget for one forward, or None when nothing can be added.

    Token budget: limits.prefill_token_budget minus one token per running decode; memory: free KV
    minus the decodes' reservation; requests: max_running_requests minus those running.
    """
    tokens = max(0, limits.prefill_token_budget - num_decodes)
    requests = limits.max_running_requests - num_running
    if tokens <= 0 or requests <= 0:
        return None
    return PrefillBudget(
        max_prefill_tokens=tokens, chunk_size_tokens=limits.chunk_size_tokens,
        page_size_tokens=limits.page_size_tokens, free_kv_tokens=free_kv_tokens,
        reserved_kv_tokens=reserved_kv_tokens, new_token_ratio=limits.new_token_ratio, max_requests=requests,
    )


def plan_prefill_step(limits: StepLimits, ex: PrefillExecutor) -> PrefillBatch:
    """A prefill instance's next forward over its candidates (chunked request first, then FIFO)."""
    budget = prefill_budget(limits, ex.free_kv_tokens())
    return form_prefill_batch(ex.prefill_candidates(), budget) if budget is not None else EMPTY


def plan_ranked_prefill_step(limits: StepLimits, ex: RankedPrefillExecutor) -> PrefillBatch:
    """Under limits.prefill_dp_dispatch = bootstrap_room: the next forward with each rank filling its own
    budget from the requests its bootstrap room sends it (every chunked request first, then
    FIFO; pdsim.policy.dp_dispatch). A chunk's rank is prefill_dp_rank of its request's room."""
    budget = prefill_budget(limits, ex.free_kv_tokens())
    if budget is None:
        return EMPTY
    dp = limits.dp_ranks
    ranked = ((prefill_dp_rank(ex.bootstrap_room(v.request_id), dp), v) for v in ex.prefill_candidates())
    return form_ranked_prefill_batch(ranked, budget, dp)[0]


class ColocatedStepPlan(Record, Generic[T]):
    FIELDS: ClassVar[tuple[str, ...]] = ("prefill", "decodes", "held", "adp")

    def __init__(self, prefill: PrefillBatch, decodes: tuple[T, ...], held: bool = False,
                 adp: AdpCounters = ADP_START) -> None:
        self.prefill: Final = prefill
        self.decodes: Final = decodes
        self.held: Final = held  # prompts were ready but batch waiting held them back
        self.adp: Final = adp  # the attention-DP balance's counters after this iteration

    @property
    def empty(self) -> bool:
        return not self.prefill.chunks and not self.decodes

    def waited_after(self, waited_iters: int) -> int:
        """The executor's batch-wait count after this iteration: one more when it held prompts
        back, 0 once prompts run beside decodes (TensorRT-LLM resets it then), else unchanged."""
        if self.held:
            return waited_iters + 1
        return 0 if self.prefill.chunks and self.decodes else waited_iters


def batch_waits(limits: StepLimits, batch: PrefillBatch, num_decodes: int, waited_iters: int) -> bool:
    """Whether TensorRT-LLM's batch waiting holds `batch` back this iteration: only beside running
    decodes (an idle engine never waits), until the prompts' new tokens plus one per decode reach
    `batch_wait_tokens_ratio` x max_prefill_tokens or `waited_iters` reaches `batch_wait_iters`."""
    if not batch.chunks or num_decodes == 0 or (limits.batch_wait_iters, limits.batch_wait_tokens_ratio) == (0, 0.0):
        return False
    tokens = sum(c.new_tokens for c in batch.chunks) + num_decodes
    return waited_iters < limits.batch_wait_iters and tokens < limits.batch_wait_tokens_ratio * limits.max_prefill_tokens


def plan_colocated_decodes(limits: StepLimits, ex: ColocatedExecutor[T]) -> tuple[T, ...]:
    """Grow the running decodes' pages (retracting when short) and return the decode batch; the
    decode half of `plan_colocated_step`, also what an executor runs when a planned prefill
    batch could not start after all."""
    plan = plan_page_growth(ex.running_requests(), ex.free_pages(), limits.page_size_tokens,
                            ex.kv_tokens, ex.request_view)
    ex.apply_growth(plan)
    return tuple(ex.running_requests())


def _prefill(limits: StepLimits, ex: ColocatedExecutor[T], num_decodes: int) -> PrefillBatch:
    running = len(ex.running_requests())
    reserved = decode_reservation_tokens(ex.remaining_outputs(), limits.new_token_ratio)
    budget = prefill_budget(limits, ex.free_kv_tokens(), num_decodes, reserved, running)
    return form_prefill_batch(ex.prefill_candidates(), budget) if budget is not None else EMPTY


def adp_holds(limits: StepLimits, batch: PrefillBatch, ranks: DpRanks | None,
              counters: AdpCounters) -> tuple[bool, AdpCounters]:
    """The attention-DP balance's verdict on `batch` (adp_balance.adp_gate): whether it is held
    back this iteration, and the counters after. Each TensorRT-LLM rank schedules its own prompts
    under its own budget, so a rank counts as having a prompt when one waits there (this one
    batch over all ranks may not reach it); a rank's max_batch_size is its share of
    limits.max_running_requests."""
    if ranks is None:
        raise ValueError(f"limits: attention-DP balance over {limits.dp_ranks} ranks needs the executor's ranks")
    running = ranks.running_per_rank()
    prompt_ranks = sum(1 for n in ranks.waiting_per_rank() if n > 0) if batch.chunks else 0
    decode_ranks = sum(1 for n in running if n > 0)
    slots_free = max(running, default=0) < limits.max_running_requests // limits.dp_ranks
    return adp_gate(limits.dp_ranks, prompt_ranks, decode_ranks, slots_free, counters,
                    limits.adp_timeout_iters, limits.adp_batching_wait_iters)


def plan_colocated_step(limits: StepLimits, ex: ColocatedExecutor[T], waited_iters: int = 0,
                        adp: AdpCounters = ADP_START, ranks: DpRanks | None = None) -> ColocatedStepPlan[T]:
    """One colocated iteration under `limits.schedule` (see the module docstring); `waited_iters`:
    the iterations batch waiting has held prompts back so far (`batch_waits`); `adp` / `ranks`:
    the attention-DP balance's counters so far and the executor's ranks (`adp_holds`; read only
    when limits.adp_timeout_iters is set)."""
    if limits.schedule == MIXED:
        decodes = plan_colocated_decodes(limits, ex)
        batch = _prefill(limits, ex, len(decodes))
        if limits.adp_timeout_iters:
            held, after = adp_holds(limits, batch, ranks, adp)
            return ColocatedStepPlan(EMPTY if held else batch, decodes, adp=after)
        if batch_waits(limits, batch, len(decodes), waited_iters):
            return ColocatedStepPlan(EMPTY, decodes, held=True)
        return ColocatedStepPlan(batch, decodes)
    batch = _prefill(limits, ex, 0)
    if batch.chunks:
        return ColocatedStepPlan(batch, ())
    decodes = plan_colocated_decodes(limits, ex)
    if not decodes:  # the growth failed the last decodes: their KV is free for a prefill now
        return ColocatedStepPlan(_prefill(limits, ex, 0), ())
    return ColocatedStepPlan(batch, decodes)
