"""The limits a scheduler plans under, and the names of the colocated schedules.

One frozen `StepLimits` per instance, built once from the configuration (pdsim: `cluster` +
`policy` groups; pdreal: `EngineConfig.limits`). Field names are pdsim's ClusterConfig /
PolicyConfig names, so one YAML drives both executors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Protocol

from pdsim.policy.batching import prefill_token_budget
from pdsim.policy.dp_dispatch import BALANCED, check_dispatch

MIXED: Final = "mixed"  # Sarathi-Serve / vLLM v1 / SGLang: prefill chunks and decodes share one budget
PREFILL_PRIORITY: Final = "prefill_priority"  # vLLM v0 (DistServe/Splitwise baseline): never mixed
SCHEDULES = (MIXED, PREFILL_PRIORITY)


def check_schedule(name: str, where: str = "cluster") -> str:
    """`name` if it is a colocated schedule, else ValueError naming the field and the choices."""
    if name not in SCHEDULES:
        raise ValueError(f"{where}: field 'colocated_schedule' has unknown value {name!r} (choose from {SCHEDULES})")
    return name


class ClusterLike(Protocol):
    """The fields of pdsim's ClusterConfig that scheduling reads."""

    page_size_tokens: int
    max_running_requests: int
    max_prefill_tokens: int
    chunk_size_tokens: int
    prealloc_slots: int
    colocated_schedule: str
    batch_wait_iters: int
    batch_wait_tokens_ratio: float
    recv_interval_steps: int
    adp_balance: bool
    adp_timeout_iters: int
    adp_batching_wait_iters: int
    prefill_dp_dispatch: str


class PolicyLike(Protocol):
    """The fields of pdsim's PolicyConfig that scheduling reads."""

    new_token_ratio: float
    decode_reserved_tokens: int


@dataclass(frozen=True, slots=True)
class StepLimits:
    """Per-instance scheduling limits.

    max_running_requests: the running batch (decode / colocated) and the prefill batch's request
    count; prealloc_slots: decode pre-allocation slots beyond the running batch
    (SGLang's DecodeReqToTokenPool); new_token_ratio: the share of a request's remaining output
    held back when it is admitted to a prefill forward; decode_reserved_tokens: the decode side's
    per-request reserve (0 = each request's remaining output); batch_wait_iters /
    batch_wait_tokens_ratio: TensorRT-LLM's batch waiting on a colocated engine (0 = off;
    prefill_step.batch_waits); recv_interval_steps: SGLang's scheduler receive interval
    (pdsim.policy.receive; 1 = every iteration); dp_ranks: the instance's attention-DP ranks;
    adp_timeout_iters / adp_batching_wait_iters: TensorRT-LLM's attention-DP balance
    (pdsim.policy.adp_balance; timeout 0 = off, as it is at one rank); prefill_dp_dispatch: how a
    prefill instance's attention-DP ranks get their prompts (pdsim.policy.dp_dispatch: balanced, or
    bootstrap_room as SGLang's prefill under PD; read by the prefill planner only).
    """

    page_size_tokens: int = 16
    max_running_requests: int = 256
    max_prefill_tokens: int = 8192
    chunk_size_tokens: int = 8192
    prealloc_slots: int = 256
    new_token_ratio: float = 0.0
    decode_reserved_tokens: int = 0
    schedule: str = MIXED
    batch_wait_iters: int = 0
    batch_wait_tokens_ratio: float = 0.0
    recv_interval_steps: int = 1
    dp_ranks: int = 1
    adp_timeout_iters: int = 0
    adp_batching_wait_iters: int = 0
    prefill_dp_dispatch: str = BALANCED

    def __post_init__(self) -> None:
        for name in ("page_size_tokens", "max_running_requests", "max_prefill_tokens", "prealloc_slots",
                     "recv_interval_steps", "dp_ranks"):
            if getattr(self, name) < 1:
                raise ValueError(f"limits: field {name!r} must be >= 1, got {getattr(self, name)}")
        for name in ("batch_wait_iters", "adp_timeout_iters", "adp_batching_wait_iters"):
            if getattr(self, name) < 0:
                raise ValueError(f"limits: field {name!r} must be >= 0, got {getattr(self, name)}")
        if self.adp_timeout_iters and self.dp_ranks < 2:
            raise ValueError(f"limits: attention-DP balance (adp_timeout_iters {self.adp_timeout_iters}) needs "
                             f"dp_ranks >= 2, got {self.dp_ranks}")
        if not 0.0 <= self.batch_wait_tokens_ratio <= 1.0:
            raise ValueError(f"limits: field 'batch_wait_tokens_ratio' must be in [0, 1], got {self.batch_wait_tokens_ratio}")
        check_schedule(self.schedule)
        check_dispatch(self.prefill_dp_dispatch)

    @property
    def prefill_token_budget(self) -> int:
        """New tokens per prefill forward (batching.prefill_token_budget)."""
        return prefill_token_budget(self.max_prefill_tokens, self.chunk_size_tokens)

    @classmethod
    def from_config(cls, cluster: ClusterLike, policy: PolicyLike, ranks: int = 1,
                    iterations_per_step: float = 1.0) -> StepLimits:
        """pdsim's cluster + policy groups (prealloc_slots 0 = max_running_requests). An instance
        of `ranks` attention-DP ranks (each with its own scheduler in SGLang / TRT-LLM) schedules
        one batch with `ranks` ranks' worth of each per-rank limit (docs/MOE.md).
        `iterations_per_step`: the executor's iterations per engine decode step (pdsim with MTP:
        the acceptance length, as it spreads a verify step over that many iterations; 1 else); the
        limits an engine counts in steps (batch_wait_iters, recv_interval_steps) are counted in
        the executor's iterations (`steps_as_iterations`). cluster.adp_balance applies from 2 ranks
        on (TensorRT-LLM's balance needs attention DP); it needs a timeout of at least 1."""
        if ranks < 1:
            raise ValueError(f"limits: ranks must be >= 1, got {ranks}")
        if cluster.adp_balance and cluster.adp_timeout_iters < 1:
            raise ValueError(f"cluster: field 'adp_timeout_iters' must be >= 1 with adp_balance, got {cluster.adp_timeout_iters}")
        balance = cluster.adp_balance and ranks > 1
        running = cluster.max_running_requests * ranks
        return cls(
            page_size_tokens=cluster.page_size_tokens, max_running_requests=running,
            max_prefill_tokens=cluster.max_prefill_tokens * ranks, chunk_size_tokens=cluster.chunk_size_tokens * ranks,
            prealloc_slots=(cluster.prealloc_slots * ranks) or running,
            new_token_ratio=policy.new_token_ratio, decode_reserved_tokens=policy.decode_reserved_tokens,
            schedule=cluster.colocated_schedule,
            batch_wait_iters=steps_as_iterations(cluster.batch_wait_iters, iterations_per_step),
            batch_wait_tokens_ratio=cluster.batch_wait_tokens_ratio,
            recv_interval_steps=steps_as_iterations(cluster.recv_interval_steps, iterations_per_step),
            dp_ranks=ranks,
            adp_timeout_iters=steps_as_iterations(cluster.adp_timeout_iters, iterations_per_step) if balance else 0,
            adp_batching_wait_iters=(steps_as_iterations(cluster.adp_batching_wait_iters, iterations_per_step)
                                     if balance else 0),
            prefill_dp_dispatch=cluster.prefill_dp_dispatch,
        )


def steps_as_iterations(steps: int, iterations_per_step: float) -> int:
    """`steps` engine steps as executor iterations: a count above 1 times the iterations a step
    spans, rounded (0 and 1, "off" and "every iteration", stay as they are)."""
    if not iterations_per_step >= 1.0:
        raise ValueError(f"limits: iterations_per_step must be >= 1, got {iterations_per_step}")
    return steps if steps <= 1 else max(1, round(steps * iterations_per_step))
