"""A record of the scheduling decisions an executor carried out (off unless a caller asks).

pdsim's instances and pdreal's engines both write one when given a `DecisionLog`: the lockstep
test (tests/lockstep) runs both executors on one workload and compares the two logs entry by
entry. An entry is written when a plan changes something - a prefill forward, a decode or
colocated batch whose membership differs from the previous one, an admission, a join, a resume,
a retraction, a failure - so pdsim's multi-iteration spans and pdreal's one-step-at-a-time loop
write the same entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Decision:
    time_s: float
    instance: str  # "prefill:0", "decode:0", "colocated:0"
    kind: str  # prefill | decode | colocated
    detail: tuple[Any, ...]


@dataclass
class DecisionLog:
    entries: list[Decision] = field(default_factory=list)
    _last_batch: dict[str, tuple[int, ...]] = field(default_factory=dict)

    def prefill(self, time_s: float, instance: str, chunks: Iterable[Any]) -> None:
        """A prefill forward: (request_id, new_tokens, context_tokens, is_last) per chunk."""
        detail = tuple((c.request_id, c.new_tokens, c.context_tokens, c.is_last) for c in chunks)
        self.entries.append(Decision(time_s, instance, "prefill", detail))

    def decode(self, time_s: float, instance: str, plan: Any, request_id: Callable[[T], int]) -> None:
        """A decode step plan (pdsim.policy.decode_step.DecodeStepPlan), when it changes anything."""
        def ids(items: Iterable[T]) -> tuple[int, ...]:
            return tuple(request_id(r) for r in items)

        batch = ids(plan.batch)
        if not plan.changes and self._last_batch.get(instance, ()) == batch:
            return
        self._last_batch[instance] = batch
        g = plan.growth
        detail = (("resume", ids(plan.resume)), ("admit", ids(plan.admit)), ("join", ids(plan.join)),
                  ("finish_at_join", ids(plan.finish_at_join)), ("retract", ids(g.victims)),
                  ("fail", ids(g.failed)), ("batch", batch))
        self.entries.append(Decision(time_s, instance, "decode", detail))

    def colocated(self, time_s: float, instance: str, chunks: Iterable[Any], decodes: Iterable[int],
                  retracted: Iterable[int] = ()) -> None:
        """A colocated iteration: prefill chunks, decode request ids, retraction victims (written
        when there are chunks or victims, or the decode batch changed)."""
        chunk_detail = tuple((c.request_id, c.new_tokens, c.context_tokens, c.is_last) for c in chunks)
        batch, victims = tuple(decodes), tuple(retracted)
        if not chunk_detail and not victims and self._last_batch.get(instance, ()) == batch:
            return
        self._last_batch[instance] = batch
        detail = (("prefill", chunk_detail), ("decode", batch), ("retract", victims))
        self.entries.append(Decision(time_s, instance, "colocated", detail))
