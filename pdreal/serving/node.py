"""Start one role of a serve config in this process and keep it up until SIGTERM / SIGINT.

When the HTTP server listens, the process prints one line on stdout,
`PDREAL_READY {"role": ..., "url": ..., "pid": ...}`, which `launch.py` (and any script) waits
for; logs go to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from typing import Any

from aiohttp import web

from pdreal.serving.config import DEFAULT_NUM_PAGES, ServeConfig

log = logging.getLogger(__name__)
READY_PREFIX = "PDREAL_READY "


def engine_config(cfg: ServeConfig, role: str) -> Any:
    """The EngineConfig of a `role` instance (prefill | decode | colocated) from the serve config."""
    from pdreal.engine.common import EngineConfig

    c, n = cfg.cluster, cfg.node
    pages = n.num_pages or (-(-c.kv_capacity_tokens // c.page_size_tokens) if c.kv_capacity_tokens else DEFAULT_NUM_PAGES)
    colocated = role == "colocated"  # its prefill reserves KV for its own decodes, as in pdsim
    return EngineConfig(
        instance_id=n.instance_id, num_pages=pages, page_size_tokens=c.page_size_tokens,
        max_running_requests=c.max_running_requests,
        max_prealloc_requests=n.max_prealloc_requests or c.prealloc_slots or c.max_running_requests,
        max_prefill_tokens=c.max_prefill_tokens, chunk_size_tokens=c.chunk_size_tokens,
        new_token_ratio=cfg.policy.new_token_ratio if colocated else 0.0,
        decode_reserved_tokens=cfg.policy.decode_reserved_tokens, attention=n.attention, dtype=n.dtype,
        device=n.device, colocated_schedule=c.colocated_schedule,
    )


def model_source(cfg: ServeConfig) -> Any:
    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import ModelSource

    n = cfg.node
    if n.model == "smollm2":
        return ModelSource("smollm2", dtype=n.dtype, device=n.device)
    return ModelSource("random", spec=catalog_spec(n.model), seed=n.model_seed, dtype=n.dtype, device=n.device)


def build_instance(cfg: ServeConfig, role: str) -> Any:
    """The HTTP process of one instance; its scheduler process (the model, KV pool, transfer
    manager and engine) starts with the app (instance.py, scheduler.py)."""
    from pdreal.serving.instance import InstanceServer

    return InstanceServer(role, cfg, engine_config(cfg, role))


async def run_app(app: web.Application, cfg: ServeConfig, role: str) -> None:
    """Listen, announce readiness on stdout, run until SIGTERM/SIGINT, then clean up."""
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, cfg.node.host, cfg.node.port)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://{cfg.node.public_host}:{port}"
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(READY_PREFIX + json.dumps({"role": role, "url": url, "pid": os.getpid()}), flush=True)
    log.info("%s listening on %s", role, url)
    await stop.wait()
    await runner.cleanup()


def serve_role(cfg: ServeConfig) -> int:
    """Run the node's role (prefill | decode | colocated | router) in this process until stopped."""
    role = cfg.node.role
    if role in ("prefill", "decode", "colocated"):
        server = build_instance(cfg, role)
        asyncio.run(run_app(server.app(), cfg, role))
        return 0
    if role == "router":
        from pdreal.serving.api import build_router

        router = build_router(cfg)
        asyncio.run(run_app(router.app(), cfg, role))
        return 0
    print(f"pdreal serve: node.role={role!r} runs in-process only for prefill, decode, colocated, router",
          file=sys.stderr)
    return 2
