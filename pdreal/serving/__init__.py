"""Serving layer: instance servers (prefill / decode / colocated), the bootstrap server, the router.

Processes (one role each, or all of them on one machine with `pdreal serve`):

    router    OpenAI-compatible API + /generate; tokenizes and detokenizes; admission and pair
              choice with pdsim.policy; dual dispatch; streams the decode half's tokens; /metrics
    prefill   HTTP process (/generate, /abort, /stats, /metrics, /steps) + the bootstrap server
              (PUT/GET /route, /health) that decode instances query, in front of its scheduler
              process (scheduler.py: engine loop, model, KV transfer engine) over ipc:// ZMQ
    decode    HTTP process + scheduler process; connection cache of bootstrap servers and a
              heartbeat checker that fails a dead prefill peer's in-flight requests
    colocated HTTP process + scheduler process (prefill and decode in one engine, no KV
              transfer); the router then sends each request to one colocated instance

The HTTP processes import aiohttp; only scheduler processes run the model.
"""
