"""Two scheduling semantics that differ between SGLang (pdsim's defaults) and DistServe.

- `cluster.prefill_emits_token`: SGLang's and vLLM's prefill forward samples the first output
  token, so decode runs output_tokens - 1 iterations. DistServe's simulator's prefill makes no
  token: decode runs output_tokens iterations and the first token comes from the first of them.
- `cluster.kv_handoff`: `prealloc` (SGLang) routes each request to both halves at once; decode
  handshakes and pre-allocates the pages before the prefill forward may run (the prefill side
  waits in its bootstrap queue) and the KV moves into those pages. `prefill_end` (DistServe)
  lets the prefill run at once and hands the request to decode when its prefill ends; decode
  allocates its pages then (through the same allocatable-tokens rule), after the KV arrived.

Instances read the knobs through these helpers, in one place each.
"""

from __future__ import annotations

from pdsim.config import ClusterConfig

HANDOFFS = ("prealloc", "prefill_end")


def tokens_after_prefill(cluster: ClusterConfig) -> int:
    """Output tokens a request holds when its prefill ends (1: prefill samples the first)."""
    return 1 if cluster.prefill_emits_token else 0


def handoff_at_prefill_end(cluster: ClusterConfig) -> bool:
    return cluster.kv_handoff == "prefill_end"


def validate_handoff(cluster: ClusterConfig) -> None:
    if cluster.kv_handoff not in HANDOFFS:
        raise ValueError(f"cluster: field 'kv_handoff' has unknown value {cluster.kv_handoff!r} (choose from {HANDOFFS})")
