"""Serving layer: instance servers (prefill / decode / colocated), the bootstrap server, the router.

Processes (one role each, or all three on one machine with `pdreal serve`):

    router    OpenAI-compatible API + /generate; admission and pair choice with pdsim.policy;
              dual dispatch; streams the decode half's tokens back; /metrics
    prefill   engine loop thread + HTTP API (/generate, /abort, /stats, /metrics) + the
              bootstrap server (PUT/GET /route, /health) that decode instances query
    decode    engine loop thread + HTTP API; connection cache of bootstrap servers and a
              heartbeat checker that fails a dead prefill peer's in-flight requests
    colocated engine loop thread + HTTP API (prefill and decode in one engine, no KV transfer);
              the router then sends each request to one colocated instance (no dual dispatch)

Everything here imports aiohttp; torch is imported only by the instance process.
"""
