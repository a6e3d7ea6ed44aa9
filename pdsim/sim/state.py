"""Per-request simulation state and the hooks instances call back into the cluster.

One `SimRequest` per request carries both halves of its life (prefill side and decode side, or
the colocated instance), its KVPoll state and the trace timestamps; each attempt's prefill side
(`PromptState`), KV transfer (`KVSend`) and tier loads (`TierLoad`) are objects of their own,
made new per attempt: one unboxed float per trace
time column, NaN until marked (`mark`, `set_time`, `has_time` take the column's constant,
ROUTE_S .. FINISH_S; `time_column` maps a trace field's name to it).
A retry starts a new attempt on the same object: `reset_attempt` clears the per-attempt state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from librt.vecs import vec
from mypy_extensions import trait

from pdsim.policy.kvpoll import KVPoll
from pdsim.policy.prefix_cache import BlockNode
from pdsim.sim.network import Flow
from pdsim.sim.records import FLOAT_COLUMNS, INT_COLUMNS, OBJECT_COLUMNS, SimRecorder
from pdsim.workload.request import Request


@trait
class InstanceSide:
    """An instance as the cluster and router reach it through a request (`SimRequest.prefill`,
    `.decode`); pdsim.sim.instance.InstanceBase is one. A mypyc trait, not `Any`: compiled,
    these calls and reads are direct, not calls by name. A role implements what reaches it."""

    name: str
    index: int
    alive: bool
    view_stale: bool

    def dispatch(self, sr: SimRequest) -> None:
        """The router sent `sr` here (it arrives after a control-plane hop: `arrive`)."""
        raise NotImplementedError

    def arrive(self, sr: SimRequest, attempt: int) -> None:
        raise NotImplementedError

    def release(self, sr: SimRequest) -> None:
        """Forget an aborted request and free what it holds here."""
        raise NotImplementedError

    def on_transfer_info(self, sr: SimRequest, attempt: int) -> None:
        """(Prefill) the decode side pre-allocated and sent its page indices."""
        raise NotImplementedError

    def on_transfer_success(self, sr: SimRequest) -> None:
        """(Prefill) the KV transfer succeeded."""
        raise NotImplementedError

    def on_kv_arrived(self, sr: SimRequest) -> None:
        """(Decode) the request's KV arrived."""
        raise NotImplementedError


@dataclass(init=False, slots=True, eq=False)
class PromptState:
    """The prefill side of one attempt (prefill instance, or a colocated instance's prompt
    processing): what its prefix cache holds and what is prefilled."""

    ready: bool  # the decode side sent its transfer info (prefill_end hand-off: at once)
    match: list[BlockNode]  # the prefix-cache blocks locked for it
    cached_tokens: int  # prompt tokens it does not compute (cache hit + tier loads)
    tokens: int  # tokens to prefill (colocated recompute after retraction: more)
    prefilled: int
    pages: int  # pages held on the prefill side

    def __init__(self, tokens: int) -> None:
        self.ready = False
        self.match = []
        self.cached_tokens = self.prefilled = self.pages = 0
        self.tokens = tokens


@dataclass(init=False, slots=True, eq=False)
class KVSend:
    """The KV transfer of one attempt, prefill -> decode (cluster.py's send_kv and its flows)."""

    pages: int  # pages sent so far
    flows: list[Flow]
    flows_pending: int
    last_sent: bool
    fail: bool  # the injected transfer failure (faults.transfer_failure_prob) of this attempt
    transfer_bytes: int

    def __init__(self) -> None:
        self.pages = self.flows_pending = self.transfer_bytes = 0
        self.flows = []
        self.last_sent = self.fail = False


@dataclass(init=False, slots=True, eq=False)
class TierLoad:
    """KV loaded from the host / SSD tiers or the cluster store (kv_tiers.py) for one attempt:
    the pending plan, the pages it fills by loading, what was loaded."""

    plan: Any  # a kv_tiers.TierPlan until committed
    pages: int
    loaded_tokens: tuple[int, ...]  # host, ssd, store
    kv_load_s: float
    skipped_tokens: int

    def __init__(self) -> None:
        self.plan = None
        self.pages = self.skipped_tokens = 0
        self.loaded_tokens = (0, 0, 0)
        self.kv_load_s = 0.0


@dataclass(init=False, slots=True, eq=False)
class SimRequest:
    """A request across its attempts: identity, its instances, KVPoll state, trace times; the
    per-attempt state of each side in its own object (`prompt`, `send`, `load`), the decode
    side's as fields (read per running request per step: one load, not two)."""

    req: Request
    rid: int  # = req.request_id; a slot, not a property (read in hot loops)
    times: vec[float]  # TIME_COLUMNS' values (NaN: not marked), read by record_row as they are
    attempt: int
    bootstrap_room: int
    prefill: InstanceSide | None  # PrefillInstance | ColocatedInstance (set by the router)
    decode: InstanceSide | None  # DecodeInstance (disaggregated)
    poll: KVPoll
    done: bool
    prompt: PromptState
    send: KVSend
    load: TierLoad
    # decode side
    handshaken: bool
    generated: int
    kv_tokens: int
    d_pages: int
    num_retractions: int  # (over all attempts)
    token_times: list[float] | None

    def __init__(self, req: Request, prompt_tokens: int = 0, token_times: list[float] | None = None) -> None:
        """A request's state before its first attempt (explicit, not dataclass-generated: a
        compiled __init__, ~13x cheaper than the generated one run as Python)."""
        self.req = req
        self.rid = req.request_id
        self.times = _NO_TIMES[:]  # (a copy)
        self.attempt = 0
        self.bootstrap_room = -1
        self.done = False
        self.num_retractions = 0
        self._clear_attempt(prompt_tokens)
        self.token_times = token_times

    def prefill_side(self) -> InstanceSide:
        """The instance the router placed this attempt's prefill on."""
        if self.prefill is None:
            raise RuntimeError(f"request {self.rid} (attempt {self.attempt}) has no prefill instance")
        return self.prefill

    def decode_side(self) -> InstanceSide:
        """The instance the router placed this attempt's decode on (disaggregated mode)."""
        if self.decode is None:
            raise RuntimeError(f"request {self.rid} (attempt {self.attempt}) has no decode instance")
        return self.decode

    def mark(self, time: int, t: float) -> None:
        """Set trace time `time` (a TIME_COLUMNS index: ROUTE_S .. FINISH_S) once (first
        occurrence wins)."""
        if math.isnan(self.times[time]):
            self.times[time] = t

    def set_time(self, time: int, t: float) -> None:
        """Set trace time `time` (over an earlier one)."""
        self.times[time] = t

    def has_time(self, time: int) -> bool:
        return not math.isnan(self.times[time])

    def marked_times(self) -> list[str]:
        """The names of the times marked so far, in column order."""
        return [name for k, name in enumerate(TIME_COLUMNS) if not math.isnan(self.times[k])]

    def reset_attempt(self) -> None:
        """Forget per-attempt state before the router re-dispatches a failed request."""
        self.attempt += 1
        self.times = _NO_TIMES[:]
        self._clear_attempt(self.req.input_tokens)
        if self.token_times is not None:
            self.token_times = []

    def _clear_attempt(self, prompt_tokens: int) -> None:
        """The per-attempt state as it is before an attempt starts."""
        self.prefill = self.decode = None
        self.poll = KVPoll.Bootstrapping
        self.prompt = PromptState(prompt_tokens)
        self.send = KVSend()
        self.load = TierLoad()
        self.handshaken = False
        self.generated = self.kv_tokens = self.d_pages = 0


class SimHooks:
    """What instances need from the cluster (implemented by `pdsim.sim.cluster.Simulation`). A base
    class, not a Protocol: compiled, calls through it are direct, where a Protocol's are calls by
    name."""

    health_epoch: int  # counts health_changed() calls

    def after(self, delay_s: float, fn: Any, *args: Any) -> None:
        """Call fn(*args) delay_s from now."""
        raise NotImplementedError

    def finish(self, sr: SimRequest) -> None:
        raise NotImplementedError

    def abort(self, sr: SimRequest, reason: str, retryable: bool = False) -> None:
        raise NotImplementedError

    def reject(self, sr: SimRequest, reason: str) -> None:
        raise NotImplementedError

    def send_kv(self, sr: SimRequest, pages: int, is_last: bool) -> None:
        raise NotImplementedError

    def transfer_ready(self, sr: SimRequest) -> None:
        raise NotImplementedError

    def health_changed(self) -> None:
        """An instance's routability (health or draining) changed: routers rebuild health views."""
        raise NotImplementedError


# the order in which record_row gives a row's integers (records.INT_COLUMNS: checked below)
_INT_ORDER: Final = (
    "request_id", "session_id", "input_tokens", "output_tokens", "cached_prefix_tokens", "cached_tokens_gpu",
    "cached_tokens_host", "cached_tokens_ssd", "cached_tokens_store", "kv_load_skipped_tokens",
    "prefill_instance", "decode_instance", "bootstrap_room", "transfer_bytes", "num_retractions",
)
_OBJECT_ORDER: Final = ("mode", "status", "failure_reason", "token_times_s")
# the float columns read from a request's marked times (the other two come from the request)
TIME_COLUMNS: Final = FLOAT_COLUMNS[2:]  # (after arrival_s and kv_load_s: checked below)
# SimRequest.times' indices, a constant per trace time, named after it in capitals (compiled, a
# literal: no lookup by name; tests/sim/test_records.py holds them to TIME_COLUMNS)
ROUTE_S: Final = 0
BOOTSTRAP_ENTER_S: Final = 1
BOOTSTRAP_LEAVE_S: Final = 2
PREFILL_WAITING_ENTER_S: Final = 3
PREFILL_START_S: Final = 4
PREFILL_END_S: Final = 5
INFLIGHT_ENTER_S: Final = 6
INFLIGHT_LEAVE_S: Final = 7
PREALLOC_ENTER_S: Final = 8
PREALLOC_LEAVE_S: Final = 9
TRANSFER_QUEUE_ENTER_S: Final = 10
TRANSFER_QUEUE_LEAVE_S: Final = 11
TRANSFER_START_S: Final = 12
TRANSFER_END_S: Final = 13
DECODE_WAITING_ENTER_S: Final = 14
RUNNING_ENTER_S: Final = 15
FIRST_TOKEN_S: Final = 16
LAST_TOKEN_S: Final = 17
FINISH_S: Final = 18
_TIME_INDEX: Final = {name: k for k, name in enumerate(TIME_COLUMNS)}
_NO_TIMES: Final = vec[float]([math.nan] * len(TIME_COLUMNS))  # (copied: a request's times to start)
if FLOAT_COLUMNS[:2] != ("arrival_s", "kv_load_s") or INT_COLUMNS != _INT_ORDER or OBJECT_COLUMNS != _OBJECT_ORDER:
    raise ImportError(f"pdsim.sim.state: the trace schema's columns {FLOAT_COLUMNS} / {INT_COLUMNS} / "
                      f"{OBJECT_COLUMNS} moved")


def record_row(recorder: SimRecorder, sr: SimRequest, mode: str, status: str, reason: str) -> None:
    """Record the trace row of a request that reached a terminal status (see pdsim.trace),
    value by value into the recorder's columns: no dict, list or Python number per value. Times
    not marked are NaN. A value a column cannot hold is refused, and nothing of the row is
    kept."""
    recorder.check_row(sr.rid, status)
    try:
        recorder.put_float_at(0, sr.req.arrival_s)
        recorder.put_float_at(1, sr.load.kv_load_s)
        recorder.put_floats_at(2, sr.times)
        _put_ints(recorder, sr, mode, status)
    except BaseException:  # (a count outside int64, say: nothing of the row is kept)
        recorder.drop_partial_row()
        raise
    recorder.end_row(sr.rid, [mode, status, reason, sr.token_times])


def time_column(name: str) -> int:
    """The SimRequest.times index of trace time `name` (a KeyError naming it if none)."""
    column = _TIME_INDEX.get(name, -1)
    if column < 0:
        raise KeyError(f"{name!r} is not a trace time (pdsim.trace: {', '.join(TIME_COLUMNS)})")
    return column


def _put_ints(recorder: SimRecorder, sr: SimRequest, mode: str, status: str) -> None:
    """The row's INT_COLUMNS (_INT_ORDER), a call per value (a tuple of them would box each)."""
    req, loaded, cached = sr.req, sr.load.loaded_tokens, sr.prompt.cached_tokens
    recorder.put_int(req.request_id)
    recorder.put_int(req.session_id)
    recorder.put_int(req.input_tokens)
    recorder.put_int(sr.generated if status == "finished" else req.output_tokens)
    recorder.put_int(cached)
    recorder.put_int(cached - (loaded[0] + loaded[1] + loaded[2]))
    recorder.put_int(loaded[0])
    recorder.put_int(loaded[1])
    recorder.put_int(loaded[2])
    recorder.put_int(sr.load.skipped_tokens)
    recorder.put_int(sr.prefill.index if sr.prefill is not None else -1)
    recorder.put_int(_decode_index(sr, mode))
    recorder.put_int(sr.bootstrap_room)
    recorder.put_int(sr.send.transfer_bytes)
    recorder.put_int(sr.num_retractions)


def _decode_index(sr: SimRequest, mode: str) -> int:
    """The decode instance's index (colocated: the one instance's), or -1."""
    if mode == "colocated" and sr.prefill is not None:
        return sr.prefill.index
    return sr.decode.index if sr.decode is not None else -1
