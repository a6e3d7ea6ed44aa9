"""Requests and the columnar workload that yields them."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain, repeat
from typing import NamedTuple

import numpy as np

ITER_CHUNK_REQUESTS = 4096  # requests whose columns iteration holds as Python lists at a time


class Request(NamedTuple):
    """One request as the router sees it.

    `hash_ids` are prefix block hashes (equal ids = shareable KV), each covering
    `block_tokens` prompt tokens (the last block may be partial); empty when unknown.
    (A NamedTuple: immutable and hashable like a frozen dataclass, and built ~6x faster, once
    per simulated request, than a frozen dataclass's field-by-field __init__.)
    """

    request_id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = 512
    session_id: int = -1


_new_tuple = tuple.__new__  # Request's fields in order, as a tuple -> a Request (no field checks)


@dataclass(frozen=True)
class Workload:
    """Requests held column-wise (one copy of the data); iterating yields `Request`s lazily.

    `hash_offsets` / `hash_values` store the prefix block hashes in CSR form: request i owns
    `hash_values[hash_offsets[i]:hash_offsets[i+1]]`.
    """

    name: str
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    session_id: np.ndarray
    hash_offsets: np.ndarray
    hash_values: np.ndarray
    block_tokens: int = 512

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    def __iter__(self) -> Iterator[Request]:
        # a chunk at a time (Python numbers are ~4x the memory of the arrays: a chunk's worth is
        # held, not the whole workload's), each request built at C level, with no Python frame
        # (a Request(...) call runs the NamedTuple's __new__, a Python function, per request)
        chunks = range(0, len(self), ITER_CHUNK_REQUESTS)
        return chain.from_iterable(map(self._chunk, chunks))

    def _chunk(self, start: int) -> Iterator[Request]:
        """Requests start .. start + ITER_CHUNK_REQUESTS - 1, lazily, from lists of their columns."""
        stop = min(start + ITER_CHUNK_REQUESTS, len(self))
        offsets = self.hash_offsets[start:stop + 1]
        hashes = tuple(self.hash_values[offsets[0]:offsets[-1]].tolist())
        bounds = (offsets - offsets[0]).tolist()
        hash_ids = map(hashes.__getitem__, map(slice, bounds[:-1], bounds[1:]))
        fields = zip(range(start, stop), self.arrival_s[start:stop].tolist(),
                     self.input_tokens[start:stop].tolist(), self.output_tokens[start:stop].tolist(),
                     hash_ids, repeat(self.block_tokens), self.session_id[start:stop].tolist())
        return map(_new_tuple, repeat(Request), fields)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    def mean_rate_rps(self) -> float:
        return (len(self) - 1) / self.duration_s if self.duration_s > 0 else float("nan")


def make_workload(
    name: str,
    arrival_s: np.ndarray,
    input_tokens: np.ndarray,
    output_tokens: np.ndarray,
    session_id: np.ndarray | None = None,
    hash_lists: list[np.ndarray] | None = None,
    block_tokens: int = 512,
) -> Workload:
    """Assemble a Workload from plain arrays (hash_lists: one int array per request)."""
    n = int(np.asarray(arrival_s).shape[0])
    if hash_lists is None:
        offsets = np.zeros(n + 1, dtype=np.int64)
        values = np.zeros(0, dtype=np.int64)
    else:
        lengths = np.fromiter((len(h) for h in hash_lists), dtype=np.int64, count=n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.concatenate(hash_lists).astype(np.int64) if n and offsets[-1] else np.zeros(0, np.int64)
    return Workload(
        name=name,
        arrival_s=np.asarray(arrival_s, dtype=np.float64),
        input_tokens=np.asarray(input_tokens, dtype=np.int64),
        output_tokens=np.asarray(output_tokens, dtype=np.int64),
        session_id=np.full(n, -1, np.int64) if session_id is None else np.asarray(session_id, np.int64),
        hash_offsets=offsets,
        hash_values=values,
        block_tokens=block_tokens,
    )
