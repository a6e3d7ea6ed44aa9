"""KV transfer: the KVPoll state machine, page-granular chunk sends and their network flows.

Lifecycle of one request's transfer (SGLang `KVPoll`, shared by sender and receiver):

    Bootstrapping (prefill got the request) -> WaitingForInput (decode pre-allocated and sent
    its TransferInfo) -> Transferring (first chunk on the wire) -> Success (last chunk + aux
    arrived); any non-terminal state -> Failed. Values only grow, except Failed (=0, which wins
    a TP all-reduce MIN); Success and Failed are terminal and sticky.

Each prefill chunk sends pages as soon as its forward ends: a non-last chunk only the full
pages computed so far, the last chunk every remaining page (a partial page travels whole) plus the
aux metadata. Prefix-cached pages travel with the first chunk (the decode side has no cache).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pdsim.config import ModelConfig
from pdsim.perf.spec import kv_bytes_per_token_per_rank, state_bytes_per_request_per_rank
from pdsim.policy.kvpoll import TERMINAL, KVPoll, KVPollError, advance_poll  # noqa: F401  (re-exported)
from pdsim.policy.views import pages_for
from pdsim.sim.network import Flow, Network
from pdsim.sim.topology import Topology


def chunk_pages_to_send(
    prefilled_tokens: int, input_tokens: int, pages_sent: int, page_size_tokens: int, is_last: bool
) -> int:
    """Pages a chunk sends: full pages computed so far (non-last) or every remaining page (last)."""
    if is_last:
        total = pages_for(input_tokens, page_size_tokens)
    else:
        total = prefilled_tokens // page_size_tokens
    return max(0, total - pages_sent)


def wire_bytes_per_token(model: ModelConfig, decode_tp: int) -> int:
    """KV bytes per token on the wire for the whole decode instance: what its ranks store.

    GQA/MHA heads split over decode ranks (replicated when decode_tp exceeds the KV heads, so
    more bytes travel); MLA's latent is not split, so each decode rank receives a full copy.
    """
    return math.ceil(kv_bytes_per_token_per_rank(model, decode_tp) * decode_tp)


def state_wire_bytes(model: ModelConfig, decode_tp: int) -> int:
    """Linear-attention state bytes one request sends with its last KV chunk (hybrid models; 0
    otherwise): each of the decode ranks receives its heads' share of the fixed state."""
    return state_bytes_per_request_per_rank(model, decode_tp) * decode_tp


class TransferService:
    """Starts the network flows of chunk sends between named instances."""

    def __init__(
        self, network: Network, topology: Topology, page_size_tokens: int, link_latency_s: float,
        aux_bytes: int,
    ) -> None:
        self.network = network
        self.topology = topology
        self.page_size_tokens = page_size_tokens
        self.link_latency_s = link_latency_s
        self.aux_bytes = aux_bytes

    def send(
        self, src: str, dst: str, pages: int, bytes_per_token: int, is_last: bool,
        on_done: Callable[[], None], src_rank: int = 0, dst_rank: int = 0,
    ) -> tuple[Flow, int]:
        """Send `pages` (+ aux when last) from DP rank `src_rank` of `src` to rank `dst_rank` of
        `dst`; returns the flow and the bytes it carries."""
        nbytes = pages * self.page_size_tokens * bytes_per_token + (self.aux_bytes if is_last else 0)
        path = self.topology.path(src, dst, src_rank, dst_rank)
        flow = self.network.start_flow(path, nbytes, self.link_latency_s, on_done)
        return flow, nbytes
