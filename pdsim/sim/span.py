"""Skip-ahead: a running decode batch advances several iterations with one simpy event.

A `Span` is k >= 1 iterations of a batch whose membership cannot change before its last boundary:
no request finishes, no page growth runs short (retraction), no pre-allocation becomes possible,
the waiting queue cannot join. Its boundaries `b_1 .. b_k` (float additions in simpy's order) are
read by index from its `SpanTimes` (spantimes.py: the end computed when the span is planned, the
boundaries before it when first read) and the instance sleeps on one timeout until `b_end` (= b_k;
simpy's clock lands on it exactly, see hop_delay). The boundaries in between are *virtual*: the
tokens they produce and the KV pages they grow (evicting prefix-cache blocks where the pool is
full) are applied lazily (`settle`) when the span ends or when something must see the exact state
earlier (a request aborted, a crash, a cache-aware router reading the prefix cache).

Anything that changes what the next boundary would do (a new request handshaken, KV arrived, a
reload done, a request released) calls `notify`; during a span that *truncates* it: the end
moves to the first boundary at or after now and the waiting process is re-armed to wake there
(`rearm`), so the step path's next boundary is where the instance wakes. Router and sampler
views read the pages the virtual boundaries have grown without settling (`pending_pages`).

Ties: a virtual boundary at exactly the current time counts as not yet passed. The step path
orders such a tie by simpy's event ids (which event was scheduled first), which a skipped boundary
does not have; with real-valued step times exact float ties between a boundary and another event
do not occur in practice (tests/sim/test_skip_ahead.py compares whole traces of both paths).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Generator
from dataclasses import dataclass
from typing import Any

import simpy
from librt.vecs import vec
from mypy_extensions import i64, trait

from pdsim.sim.events import SimEnvironment, Wait, now_s, rearm, timeout
from pdsim.sim.pagegrowth import PageGrowth
from pdsim.sim.spantimes import MAX_SPAN_ITERATIONS, SpanTimes
from pdsim.sim.state import FIRST_TOKEN_S, InstanceSide, SimRequest
from pdsim.sim.steptime import StepSeries


def hop_delay(now_s: float, target_s: float) -> tuple[float, bool]:
    """The next timeout delay towards the absolute time target_s >= now_s, and whether it lands
    exactly there. simpy schedules at now + delay, and target - now is exact once now >= target/2
    (Sterbenz), so from there one hop lands on target_s; earlier, hop half-way first."""
    delay = target_s - now_s
    if now_s + delay == target_s:
        return delay, True
    return delay / 2, False


@dataclass(init=False, slots=True, eq=False)
class Span:
    times: SpanTimes  # step_0 .. step_{k-1}, b_0 (start) .. b_k (spantimes.py)
    growth: PageGrowth | None  # None for a single iteration
    end: int  # the boundary the instance wakes at (k, or earlier once truncated)
    first_finish: int  # no request makes its last token before this many iterations
    settled: int  # virtual boundaries 1..settled are applied
    _due: int  # the last answer of due() (time only moves forward)
    end_s: float  # b_end

    def __init__(self, times: SpanTimes, growth: PageGrowth | None, end: int, first_finish: int = 1) -> None:
        self.times = times
        self.growth = growth
        self.end = end
        self.first_finish = first_finish
        self.settled = 0
        self._due = 0
        self.end_s = times.bound(end)

    def due(self, now_s: float) -> int:
        """Virtual boundaries passed strictly before now_s (never the end)."""
        j, last = self._due, self.end - 1
        if j < last:
            j = self.times.last_before(now_s, j, last)
            self._due = j
        return j

    def pending_pages(self, now_s: float) -> int:
        """Pages grown by boundaries passed but not yet settled."""
        j = self.due(now_s)
        if j <= self.settled or self.growth is None:
            return 0
        return self.growth.pages(j) - self.growth.pages(self.settled)

    def truncate(self, now_s: float) -> bool:
        """End at the first boundary at or after now_s; True if the end moved earlier."""
        first = self.times.first_at_or_after(now_s)  # (then at least 1 and settled + 1: no max())
        if first <= self.settled:
            first = self.settled + 1
        if first < 1:
            first = 1
        if first < self.end:
            self.end = first
            self.end_s = self.times.bound(first)
            return True
        return False


class SpanPlanner:
    """Plans, waits out and truncates the spans of one instance's running batch."""

    def __init__(self, env: SimEnvironment, series: StepSeries, page_size_tokens: int, skip_ahead: bool) -> None:
        self.events = env.events
        self.series = series  # (shared by the instances of one latency model)
        self.page = page_size_tokens
        self.max_iterations = MAX_SPAN_ITERATIONS if skip_ahead else 1
        self.span: Span | None = None
        self.process: simpy.Process | None = None

    def limit(self, running: Collection[SimRequest], free_pages: int) -> tuple[int, PageGrowth | None, int]:
        """Iterations the batch runs before a request finishes or its page growth at a boundary
        needs more than `free_pages` (at most max_iterations), its page growth, and the
        iterations until its first finish (or more than max_iterations)."""
        k, page = self.max_iterations, self.page
        if k <= 1:
            return 1, None, 1
        first_finish = k + 1
        counts = vec[i64]([0] * (page + 1))  # (unboxed: PageGrowth keeps it, span.py reads it natively)
        for sr in running:  # one pass: the first finish and the KV lengths modulo the page
            left = sr.req.output_tokens - sr.generated
            if left < first_finish:
                first_finish = left
            counts[sr.kv_tokens % page] += 1
        k = min(k, first_finish)
        if k <= 1:
            return 1, None, first_finish
        growth = PageGrowth.from_residues(counts, page)
        if growth.pages(k - 1) > free_pages:
            k = growth.first_over(free_pages, k)
        return k, growth, first_finish

    def begin(
        self, n: int, ctx_tokens: int, k: int, growth: PageGrowth | None, first_extra_s: float = 0.0,
        first_finish: int = 1,
    ) -> Span:
        """Plan k iterations; the first takes first_extra_s longer (a KV reload before it).
        first_finish: as from `limit` (1 when unknown: every span end checks for finishes)."""
        times = self.series.span(n, ctx_tokens, k, now_s(self.events), first_extra_s)
        span = Span(times, growth if k > 1 else None, k, first_finish)
        self.span = span
        return span

    def sleep_through(self, owner: BatchOwner, span: Span) -> Generator[Wait, Any, bool]:
        """simpy sub-process: sleep until the span's (possibly moved) end. Returns (via
        `yield from`) whether the owner is still alive; the owner's router view is marked stale
        after the wait (before it, by the owner's batch size, set as the span began)."""
        events = self.events
        while True:
            yield timeout(events, hop_delay(now_s(events), span.end_s)[0])  # (truncate may move it: rearm)
            if now_s(events) == span.end_s:
                owner.view_stale = True
                return owner.alive

    def run_span(self, owner: BatchOwner, span: Span) -> Generator[Wait, Any, bool]:
        """simpy sub-process: sleep through `span`, then apply its iterations up to the last one.

        Returns (via `yield from`) whether the owner is still alive; a dead owner's span is left
        unsettled. The owner's router view is marked stale before and after the wait.
        """
        if not (yield from self.sleep_through(owner, span)):
            return False
        self.settle(owner, span.end - 1)
        self.span = None
        return True

    def truncate(self) -> None:
        """Something changed what the next boundary does: wake there instead of at the end."""
        span, process = self.span, self.process
        if span is None or process is None:
            return
        now = now_s(self.events)
        if span.truncate(now) and not self.events.is_active(process):
            rearm(process, self.events, hop_delay(now, span.end_s)[0])

    def pending_pages(self) -> int:
        return self.span.pending_pages(now_s(self.events)) if self.span is not None else 0

    def view_valid_until_s(self) -> float:
        """Until when pending_pages() keeps its current value: the next virtual boundary."""
        span = self.span
        if span is None:
            return math.inf
        j = span.due(now_s(self.events))
        return span.times.bound(j + 1) if j + 1 < span.end else math.inf

    def settle(self, owner: BatchOwner, upto: int) -> None:
        """Apply the span's virtual boundaries settled+1..upto to `owner`'s running batch:
        one token per request per boundary, the pages each grows, the iterations' busy time."""
        span = self.span
        if span is None or upto <= span.settled:
            return
        d, page, first = upto - span.settled, self.page, span.settled + 1
        times: list[float] | None = None
        for sr in owner.running.values():
            kv = sr.kv_tokens
            grow = (kv + d) // page - kv // page
            sr.kv_tokens = kv + d
            if sr.generated == 0:  # a prefill that made no token: the first comes from decode
                sr.mark(FIRST_TOKEN_S, span.times.bound(first))
            sr.generated += d
            if grow:
                owner.add_pages(sr, grow)
            if sr.token_times is not None:
                if times is None:
                    times = span.times.bounds(first, upto)
                sr.token_times.extend(times)
        span.settled = upto
        owner.advanced(d, span.times.add_steps(owner.busy_s, first, upto + 1))

    def finish(self, owner: BatchOwner) -> list[SimRequest]:
        """At the span's end (now): its virtual boundaries settled+1..end-1 (as `settle`) and its
        last iteration, in one pass over the batch. The last iteration adds one more token per
        request and grows no page (the next plan grows them). Returns the requests whose last
        output token that was, in batch order; the span is over."""
        span = self.span
        assert span is not None, "finish without a span"
        self.span = None
        end, first = span.end, span.settled + 1
        d, page = end - first, self.page  # virtual boundaries to apply, then the last iteration
        times: list[float] | None = None
        done: list[SimRequest] = []
        check = end >= span.first_finish  # (else no request can have made its last token)
        for sr in owner.running.values():
            kv = sr.kv_tokens
            grow = (kv + d) // page - kv // page
            sr.kv_tokens = kv + d + 1
            generated = sr.generated
            if generated == 0:  # a prefill that made no token: the first comes from decode
                sr.mark(FIRST_TOKEN_S, span.times.bound(first))
            generated += d + 1
            sr.generated = generated
            if grow:
                owner.add_pages(sr, grow)
            if sr.token_times is not None:
                if times is None:
                    times = span.times.bounds(first, end)  # b_end is now
                sr.token_times.extend(times)
            if check and generated >= sr.req.output_tokens:
                done.append(sr)
        span.settled = end - 1
        if d:
            owner.advanced(d, span.times.add_steps(owner.busy_s, first, end))
        return done

    def settle_now(self, owner: BatchOwner) -> None:
        """Apply every virtual boundary passed before now (before the batch changes)."""
        if self.span is not None:
            self.settle(owner, self.span.due(now_s(self.events)))


@trait
class BatchOwner(InstanceSide):
    """The instance whose running batch SpanPlanner.settle advances (decode and colocated
    instances). A mypyc trait, not a Protocol: compiled, its attributes and methods are reached
    directly, where a Protocol's are looked up by name."""

    running: dict[int, SimRequest]
    busy_s: float  # (alive and view_stale: InstanceSide's)

    def add_pages(self, sr: SimRequest, pages: int) -> None:
        """Grow `sr`'s KV by `pages` pages (they are known to be free)."""
        raise NotImplementedError

    def advanced(self, iterations: int, busy_s: float) -> None:
        """The batch ran `iterations` more iterations, which took it to busy_s: update counters."""
        raise NotImplementedError

