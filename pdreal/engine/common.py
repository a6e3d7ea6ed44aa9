"""What the engine loops share (prefill, decode, colocated): config, the request as dispatched,
outputs, the model runner."""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Collection, Iterable
from typing import Any

import torch

from pdreal.attention import AttentionBackend, make_backend
from pdreal.engine.types import (  # noqa: F401 - re-exported: the engines' plain data
    STEP_LOG_SIZE,
    EngineConfig,
    EngineRequest,
    EngineStats,
    RequestOutput,
    StepRecord,
    merge_halves,
    trace_row,
)
from pdreal.kv.pool import KVLayout, KVPool
from pdreal.kv.radix import CachedPrefix, RadixCache
from pdreal.model.batch import ForwardBatch, SeqChunk
from pdreal.model.llama import LlamaModel
from pdreal.model.sampling import SamplingParams
from pdsim.policy.views import pages_for
from pdsim.trace import STATUS_FINISHED

log = logging.getLogger(__name__)


class ModelRunner:
    """Model + KV pool + attention backend of one instance; `steps` keeps the last
    STEP_LOG_SIZE forwards' timings (the served step latencies, next to `pdreal profile`'s)."""

    def __init__(self, model: LlamaModel, config: EngineConfig) -> None:
        spec = model.spec
        dtype = model.dtype
        layout = KVLayout(spec.num_layers, config.num_pages, config.page_size_tokens,
                          spec.num_kv_heads, spec.head_dim, torch.empty((), dtype=dtype).element_size())
        self.model, self.config = model, config
        self.pool = KVPool(layout, dtype, model.device)
        self.attention: AttentionBackend = make_backend(config.attention, str(model.device))
        self.steps: deque[StepRecord] = deque(maxlen=STEP_LOG_SIZE)

    @property
    def page_size_tokens(self) -> int:
        return self.config.page_size_tokens

    def forward(self, chunks: list[SeqChunk], num_decodes: int | None = None) -> torch.Tensor:
        """Logits [len(chunks), vocab] of each chunk's last token. `num_decodes`: the last that many
        chunks are decodes (the caller knows; None = every chunk is a decode iff each adds one token
        to cached context)."""
        return self.forward_logits(chunks, num_decodes)[0]

    def forward_logits(self, chunks: list[SeqChunk], num_decodes: int | None = None
                       ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """(each chunk's last-token logits [len(chunks), vocab], per chunk the logits of every new
        token [new tokens, vocab] where it asked with `all_logits`, else None)."""
        if num_decodes is None:
            num_decodes = len(chunks) if all(len(c.token_ids) == 1 and c.start > 0 for c in chunks) else 0
        if not 0 <= num_decodes <= len(chunks):
            raise ValueError(f"num_decodes {num_decodes} outside 0..{len(chunks)} chunks")
        start = time.perf_counter()
        batch = ForwardBatch.build(chunks, self.page_size_tokens, self.model.device)
        logits = self.model.forward(batch, self.pool, self.attention)
        if logits.device.type == "cuda":
            torch.cuda.synchronize(logits.device)
        end = time.perf_counter()
        kind = "decode" if num_decodes == len(chunks) else "prefill" if num_decodes == 0 else "mixed"
        decodes = chunks[len(chunks) - num_decodes:]
        self.steps.append(StepRecord(time.monotonic(), kind, len(chunks), sum(len(c.token_ids) for c in chunks),
                                     sum(c.start for c in chunks), end - start, len(decodes),
                                     sum(c.start for c in decodes)))
        if logits.shape[0] == len(chunks):
            return logits, [logits[i:i + 1] if c.all_logits else None for i, c in enumerate(chunks)]
        full = [logits[row + 1 - len(c.token_ids):row + 1] if c.all_logits else None
                for c, row in zip(chunks, batch.last_rows, strict=True)]
        return logits[list(batch.last_rows)], full

    def offload_kv(self, pages: list[int], num_tokens: int) -> torch.Tensor:
        """Copy a retracted request's KV pages (holding num_tokens tokens) to host memory
        (SGLang decode's offload)."""
        return self.pool.read_pages(pages)

    def reload_kv(self, pages: list[int], host_kv: torch.Tensor) -> None:
        """Copy an offloaded request's KV back into its newly allocated pages."""
        self.pool.write_pages(pages, host_kv)

    def kv_manager(self, transfer: Any, hub: Any = None) -> Any:
        """The instance's KV-transfer manager over this runner's pool (a TransferConfig in, a
        KVManager out; the TP runner builds one per rank)."""
        from pdreal.transfer import make_kv_manager

        return make_kv_manager(transfer, self.pool, hub)

    def close(self) -> None:
        """Release what the runner owns beyond memory (the TP runner's rank processes)."""


def step_failure_reason(exc: BaseException) -> str:
    """The failure reason of the requests an engine step failed with `exc` (guarded steps)."""
    return f"engine step failed: {type(exc).__name__}: {exc}"[:500]


def unique_states(states: Iterable[Any]) -> list[Any]:
    """`states` without repeats (by identity), in order: the victims of a failed step."""
    seen: set[int] = set()
    out = []
    for s in states:
        if s is not None and id(s) not in seen:
            seen.add(id(s))
            out.append(s)
    return out


class GuardedStep:
    """`step()` for an engine whose iteration is `_step()`: an exception fails only the requests
    that step was working on (`_fail_step`, which frees their pages), and the engine goes on."""

    _batch: list[Any]
    _outputs: list[RequestOutput]

    def _step(self) -> None:
        raise NotImplementedError

    def _fail_step(self, exc: Exception) -> None:
        raise NotImplementedError

    def step(self) -> list[RequestOutput]:
        """One iteration; the outputs it produced (tokens, finished requests, the failed ones)."""
        self._batch = []
        try:
            self._step()
        except Exception as exc:  # noqa: BLE001 - one bad step must not take the instance down
            self._fail_step(exc)
        outputs, self._outputs = self._outputs, []
        return outputs


def step_victims(batch: Iterable[Any], live: Iterable[Any], exc: BaseException, engine_name: str
                 ) -> tuple[str, list[Any], set[int]]:
    """(reason, the requests a failed step takes down, their ids by identity): the step's batch
    if it had one, else every live request (the failure came from outside a forward); logged."""
    reason = step_failure_reason(exc)
    victims = [s for s in unique_states(list(batch) or live) if not s.done]
    log.exception("%s: %d request(s) failed: %s", engine_name, len(victims), reason)
    return reason, victims, {id(s) for s in victims}


def context_reason(req: EngineRequest, context_length: int) -> str:
    """Why any engine must reject `req` at once (prompt + max_new_tokens beyond the model's
    context length; 0 = unknown), or ''. The router answers such a request 400 before dispatch."""
    total = len(req.input_ids) + req.sampling.max_new_tokens
    if not context_length or total <= context_length:
        return ""
    return f"{total} tokens (prompt + max_new_tokens) exceed the model's context length ({context_length} tokens)"


def oversize_reason(req: EngineRequest, config: EngineConfig, num_pages: int, context_length: int = 0) -> str:
    """Why a generating engine must reject `req` at once (beyond the model's context length, or
    prompt + max_new_tokens need more pages than its pool of `num_pages` holds), or '' if it fits."""
    if context_reason(req, context_length):
        return context_reason(req, context_length)
    total = len(req.input_ids) + req.sampling.max_new_tokens
    if pages_for(total, config.page_size_tokens) <= num_pages:
        return ""
    return f"{total} tokens (prompt + max_new_tokens) exceed the KV pool ({config.kv_capacity_tokens} tokens)"


def stop_reached(output_ids: list[int], sampling: SamplingParams, eos_ids: Collection[int]) -> bool:
    """Whether a request is done: max_new_tokens generated, or (unless ignore_eos) its last token
    is an EOS or stop token. One rule for every engine loop and for generate()."""
    if len(output_ids) >= sampling.max_new_tokens:
        return True
    last = output_ids[-1] if output_ids else -1
    return not sampling.ignore_eos and (last in eos_ids or last in sampling.stop_token_ids)


def generation_row(req: EngineRequest, output_ids: list[int], token_times_s: list[float], status: str,
                   reason: str, finish_s: float, num_retractions: int, **fields: Any) -> dict[str, Any]:
    """The trace half-row of a request that generates tokens (decode or colocated side), with the
    engine-specific `fields` (mode, instances, transfer bytes, stage times). As in pdsim, a
    request has a last token only once it finished (token_times_s keeps what it emitted)."""
    return trace_row(
        request_id=req.request_id, input_tokens=len(req.input_ids),
        output_tokens=len(output_ids) if status == STATUS_FINISHED else req.sampling.max_new_tokens,
        bootstrap_room=req.bootstrap_room, arrival_s=req.arrival_s, status=status, failure_reason=reason,
        num_retractions=num_retractions, finish_s=finish_s, token_times_s=list(token_times_s),
        last_token_s=token_times_s[-1] if token_times_s and status == STATUS_FINISHED else math.nan, **fields)


def engine_stats(engine: Any, queues: dict[str, int]) -> EngineStats:
    """Queue lengths plus KV use in tokens (evictable prefix-cache pages not counted, as in
    pdsim), for /stats and /metrics (either engine)."""
    page = engine.config.page_size_tokens
    cache = getattr(engine, "cache", None)
    used = engine.allocator.num_used - (cache.evictable_pages if cache is not None else 0)
    return EngineStats(queues, used * page, engine.allocator.num_pages * page, engine.num_finished, engine.num_failed)


def make_cache(runner: Any, config: EngineConfig) -> RadixCache | None:
    """The radix prefix cache of a prefill or colocated engine (None when config.prefix_cache is off)."""
    return RadixCache(runner.pool.allocator, config.page_size_tokens) if config.prefix_cache else None


# A prompt-computing request's pages under its engine's optional prefix cache (prefill and
# colocated engines): `state` has req, pages, prefix, page_hashes, prefilled_tokens, cached_tokens.

def allocate_pages(cache: RadixCache | None, allocator: Any, num_pages: int) -> list[int] | None:
    """`num_pages` pages (the cache evicts unlocked blocks when short); None if they do not fit."""
    return cache.allocate(num_pages) if cache is not None else allocator.allocate(num_pages)


def lock_prefix(cache: RadixCache, state: Any, path: list[int], now: float, page_size_tokens: int) -> None:
    """A request about to start locks its cached prefix: those pages head its page table."""
    state.prefix = cache.lock(path, now)
    state.pages = list(state.prefix.pages)
    state.prefilled_tokens = state.cached_tokens = len(state.pages) * page_size_tokens


def release_pages(cache: RadixCache | None, allocator: Any, state: Any, complete: bool, now: float) -> None:
    """Free a request's pages; with the cache its full prompt pages stay cached when `complete`
    (its prompt's KV all computed)."""
    if cache is not None:
        cache.release(state.prefix, state.pages, state.page_hashes, len(state.req.input_ids), complete, now)
        state.prefix = CachedPrefix()
    else:
        allocator.free(state.pages)
    state.pages = []


def unlock_prefix(cache: RadixCache | None, allocator: Any, state: Any, now: float) -> None:
    """A request whose first chunk was dropped lets go of its prefix; it stays waiting."""
    release_pages(cache, allocator, state, False, now)
    state.prefilled_tokens = state.cached_tokens = 0


def check_engine_invariants(engine: Any, role: str) -> None:
    """No page leaked; every request accounted for; no transfer room left open when idle.

    `engine` is a PrefillEngine, DecodeEngine or ColocatedEngine: `live()` lists the requests it
    still holds; `kv` is its KV-transfer manager (None on a colocated engine: no rooms).
    """
    live = engine.live()
    cache = getattr(engine, "cache", None)
    if cache is None:
        engine.allocator.check_invariants(expected_used=sum(len(s.pages) for s in live))
    else:  # a live request's page table = its locked cached prefix, then pages of its own
        own = sum(len(s.pages) - len(s.prefix.pages) for s in live)
        engine.allocator.check_invariants(expected_used=own + cache.cached_pages)
        cache.check_invariants([s.prefix for s in live], final=not live)
    done = engine.num_finished + engine.num_failed
    if done + len(live) != engine.num_added:
        raise AssertionError(f"{role}: {engine.num_added} added, {done} done + {len(live)} live")
    if not live and engine.kv is not None and engine.kv.num_rooms():
        raise AssertionError(f"idle {role} engine still has {engine.kv.num_rooms()} transfer rooms")
