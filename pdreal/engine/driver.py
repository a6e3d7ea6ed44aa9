"""Drive engines in one process until every request is done: a prefill and a decode engine
(`run_disaggregated`), or one colocated engine (`run_colocated`).

Used by tests, `pdreal profile` and `pdreal generate` with the `local` or `fake` transfer backends
(both engines in one process); the multi-process path is pdreal.workers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from pdreal.engine.colocated import ColocatedEngine
from pdreal.engine.common import EngineRequest, RequestOutput, merge_halves
from pdreal.engine.decode import DecodeEngine
from pdreal.engine.prefill import PrefillEngine


@dataclass
class RequestResult:
    request_id: int
    token_ids: list[int] = field(default_factory=list)
    prompt_logprobs: tuple[Any, ...] = ()  # when asked (SamplingParams.prompt_logprobs)
    prefill_row: dict[str, Any] | None = None
    decode_row: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.prefill_row is not None and self.decode_row is not None

    @property
    def row(self) -> dict[str, Any]:
        return merge_halves(self.prefill_row or {}, self.decode_row or {})


def collect(results: dict[int, RequestResult], outputs: list[RequestOutput], side: str) -> None:
    for out in outputs:
        result = results[out.request_id]
        if side == "decode":
            result.token_ids.extend(out.token_ids)
        result.prompt_logprobs = result.prompt_logprobs or out.prompt_logprobs
        if out.finished:
            setattr(result, f"{side}_row", out.row)


def run_disaggregated(prefill: PrefillEngine, decode: DecodeEngine, requests: list[EngineRequest],
                      timeout_s: float = 120.0) -> dict[int, RequestResult]:
    """Dispatch every request to both engines (dual dispatch) and step both until all are done."""
    results = {r.request_id: RequestResult(r.request_id) for r in requests}
    for req in requests:
        prefill.add_request(req)
        decode.add_request(replace(req, bootstrap_addr=prefill.kv.bootstrap_addr))
    deadline = time.monotonic() + timeout_s
    while not all(r.done for r in results.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(not r.done for r in results.values())} requests unfinished after {timeout_s} s")
        collect(results, prefill.step(), "prefill")
        collect(results, decode.step(), "decode")
        if not (prefill.ready_to_run() or decode.ready_to_run()):
            time.sleep(0.0005)
    return results


@dataclass
class ColocatedResult:
    request_id: int
    token_ids: list[int] = field(default_factory=list)
    row: dict[str, Any] | None = None
    prompt_logprobs: tuple[Any, ...] = ()  # when asked (SamplingParams.prompt_logprobs)


def run_colocated(engine: ColocatedEngine, requests: list[EngineRequest], add_every_steps: int = 0,
                  timeout_s: float = 120.0) -> dict[int, ColocatedResult]:
    """Add the requests (all at once, or one every `add_every_steps` steps) and step until all
    are done."""
    results = {r.request_id: ColocatedResult(r.request_id) for r in requests}
    pending = list(requests)
    deadline, steps = time.monotonic() + timeout_s, 0
    while pending or any(r.row is None for r in results.values()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{sum(r.row is None for r in results.values())} requests unfinished after {timeout_s} s")
        while pending and (add_every_steps <= 0 or steps % add_every_steps == 0):
            engine.add_request(pending.pop(0))
            if add_every_steps > 0:
                break
        for out in engine.step():
            results[out.request_id].token_ids.extend(out.token_ids)
            results[out.request_id].prompt_logprobs += out.prompt_logprobs
            if out.finished:
                results[out.request_id].row = out.row
        steps += 1
    return results
