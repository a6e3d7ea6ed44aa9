"""Starting a planned prefill batch: shared by prefill and colocated instances.

The step planner (pdsim.policy) chose the chunks; here new requests lock their cached prefix and
leave the waiting queue, and every chunk gets its pages, in plan order. A chunk that does not fit
(its KV loads or pages) ends the batch there: it and the later new requests release what they
took and wait for the next step.
"""

from __future__ import annotations

from mypy_extensions import trait

from pdsim.policy import PrefillChunk
from pdsim.policy.prefix_cache import BlockNode
from pdsim.sim.prompt_kv import PromptKV
from pdsim.sim.state import PREFILL_START_S, SimRequest

Planned = list[tuple[SimRequest, int, PrefillChunk]]  # (request, its attempt, its chunk) per chunk started


@trait
class ChunkOwner:
    """What `start_chunks` uses of a prefill or colocated instance (a trait: compiled, its
    attributes are read directly, not looked up by name as through a Protocol)."""

    waiting: dict[int, SimRequest]
    kv: PromptKV


def start_chunks(inst: ChunkOwner, chunks: tuple[PrefillChunk, ...], matches: dict[int, list[BlockNode]],
                 now: float, carried: tuple[SimRequest, ...]) -> Planned:
    """Lock new requests' prefixes, allocate every chunk's pages; drop what does not fit.

    Shared by prefill and colocated instances. New requests leave the waiting queue here, now;
    `carried`: the instance's part-prefilled (chunked) requests, which keep what they hold.
    """
    by_id = {sr.rid: sr for sr in carried}
    for chunk in chunks:
        if chunk.request_id not in by_id:
            sr = inst.waiting[chunk.request_id]
            inst.kv.begin(sr, matches.get(sr.rid, []), now)
            by_id[sr.rid] = sr
    carried_ids = {sr.rid for sr in carried}
    planned: Planned = []
    for i, chunk in enumerate(chunks):
        sr = by_id[chunk.request_id]
        if not inst.kv.allocate(sr, chunk.new_pages + sr.load.pages):
            for later in chunks[i:]:
                other = by_id[later.request_id]
                if other.rid not in carried_ids:
                    inst.kv.release(other, now)
            break
        if sr.rid in inst.waiting:
            del inst.waiting[sr.rid]
            sr.mark(PREFILL_START_S, now)
            inst.kv.commit_load(sr)
        planned.append((sr, sr.attempt, chunk))
    return planned
