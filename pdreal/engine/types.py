"""The engine's plain data, free of torch so the HTTP and router processes can load it:
instance config, the request as dispatched, outputs, stats, step records, trace half-rows.
pdreal.engine.common re-exports all of it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from pdreal.model.sampling import SamplingParams
from pdsim.policy import StepLimits
from pdsim.trace import FIELD_NAMES


@dataclass(frozen=True)
class EngineConfig:
    """One instance's limits; names follow pdsim's ClusterConfig/PolicyConfig where they overlap."""

    instance_id: int = 0
    num_pages: int = 512
    page_size_tokens: int = 16
    max_running_requests: int = 32  # decode running batch
    max_prealloc_requests: int = 64  # decode: pre-allocated slots beyond the running batch
    max_prefill_tokens: int = 2048  # PrefillAdder token budget per forward
    chunk_size_tokens: int = 512  # chunked prefill (0 = off)
    new_token_ratio: float = 0.0  # prefill-side reserve (max_new_tokens is 1 there)
    decode_reserved_tokens: int = 0  # 0 = reserve each request's remaining output
    colocated_schedule: str = "mixed"  # colocated engine: mixed | prefill_priority (pdsim's names)
    batch_wait_iters: int = 0  # colocated engine: TensorRT-LLM's batch waiting (pdsim's cluster fields)
    batch_wait_tokens_ratio: float = 0.0
    recv_interval_steps: int = 1  # colocated engine: SGLang's scheduler receive interval (pdsim.policy.receive)
    prefix_cache: bool = True  # radix prefix cache on prefill / colocated engines (pdsim's cluster.prefix_cache)
    attention: str = "torch"
    dtype: str = "fp32"
    device: str = "cpu"
    tp_size: int = 1  # tensor-parallel ranks (pdreal/engine/tp_runner.py); each pool holds 1/tp of the KV heads

    @property
    def kv_capacity_tokens(self) -> int:
        return self.num_pages * self.page_size_tokens

    @property
    def limits(self) -> StepLimits:
        """The scheduling limits pdsim.policy plans under (the same fields as pdsim's)."""
        return StepLimits(
            page_size_tokens=self.page_size_tokens, max_running_requests=self.max_running_requests,
            max_prefill_tokens=self.max_prefill_tokens, chunk_size_tokens=self.chunk_size_tokens,
            prealloc_slots=self.max_prealloc_requests, new_token_ratio=self.new_token_ratio,
            decode_reserved_tokens=self.decode_reserved_tokens, schedule=self.colocated_schedule,
            batch_wait_iters=self.batch_wait_iters, batch_wait_tokens_ratio=self.batch_wait_tokens_ratio,
            recv_interval_steps=self.recv_interval_steps,
        )


@dataclass(frozen=True)
class EngineRequest:
    """A request as the router dispatches it to both halves (same room on both)."""

    request_id: int
    input_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    bootstrap_room: int = 0
    bootstrap_addr: str = ""  # decode side: the prefill manager's bootstrap address
    arrival_s: float = math.nan

    def __post_init__(self) -> None:
        if not self.input_ids:
            raise ValueError(f"request {self.request_id}: empty prompt")


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """Emitted by `step()`: new tokens of a request, and its trace half-row once finished."""

    request_id: int
    token_ids: tuple[int, ...] = ()
    finished: bool = False
    status: str = ""  # '' while running, else finished | failed | rejected
    failure_reason: str = ""
    row: dict[str, Any] | None = None
    logprobs: tuple[Any, ...] = ()  # per token of token_ids, when asked: [logprob, [[id, logprob], ...]]
    prompt_logprobs: tuple[Any, ...] = ()  # per prompt token, when asked (the first is None)


@dataclass(frozen=True, slots=True)
class EngineStats:
    queues: dict[str, int]
    kv_used_tokens: int
    kv_total_tokens: int
    num_finished: int
    num_failed: int


STEP_LOG_SIZE = 100_000


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One timed forward as served: pdsim's profile-row fields (totals over the batch) plus when
    it ended (monotonic clock). kind is prefill, decode, or mixed (a colocated forward of prefill
    chunks and decodes together); decode_seqs / decode_context_tokens are the decode part of the
    totals (all of them for a decode step, none for a prefill step)."""

    end_s: float
    kind: str
    num_seqs: int
    new_tokens: int
    context_tokens: int
    latency_s: float
    decode_seqs: int = 0
    decode_context_tokens: int = 0


def trace_row(**values: Any) -> dict[str, Any]:
    """A half-row of the trace, checked against the schema's field names."""
    unknown = sorted(set(values) - set(FIELD_NAMES))
    if unknown:
        raise KeyError(f"unknown trace fields {unknown}")
    return values


def merge_halves(prefill_row: dict[str, Any], decode_row: dict[str, Any]) -> dict[str, Any]:
    """One trace row from the prefill and decode half-rows of a request.

    Times and instance ids are the union; the request failed if either half failed (the prefill
    half's reason first) and was rejected if either half rejected it.
    """
    row = {**prefill_row, **{k: v for k, v in decode_row.items() if k not in ("status", "failure_reason")}}
    statuses = (prefill_row.get("status", ""), decode_row.get("status", ""))
    for status in ("rejected", "failed"):
        if status in statuses:
            half = prefill_row if statuses[0] == status else decode_row
            row.update(status=status, failure_reason=half.get("failure_reason", ""))
            break
    else:
        row.update(status="finished", failure_reason="")
    decode_finish = decode_row.get("finish_s", math.nan)
    row["finish_s"] = prefill_row.get("finish_s", math.nan) if math.isnan(decode_finish) else decode_finish
    return row
