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

from pdreal.serving.auth import read_token, with_token
from pdreal.serving.config import DEFAULT_NUM_PAGES, ServeConfig
from pdreal.serving.native_log import filtered_stderr

log = logging.getLogger(__name__)
READY_PREFIX = "PDREAL_READY "
SHUTDOWN_DRAIN_S = 1.0  # on SIGTERM, in-flight handlers get this long before they are cancelled


def engine_config(cfg: ServeConfig, role: str) -> Any:
    """The EngineConfig of a `role` instance (prefill | decode | colocated) from the serve config."""
    from pdreal.engine.types import EngineConfig

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
        device=n.device, colocated_schedule=c.colocated_schedule, prefix_cache=c.prefix_cache,
        batch_wait_iters=c.batch_wait_iters, batch_wait_tokens_ratio=c.batch_wait_tokens_ratio,
        recv_interval_steps=c.recv_interval_steps,
        tp_size=getattr(c, f"{role}_tp"),
    )


def model_source(cfg: ServeConfig) -> Any:
    from pdreal.model.spec import catalog_spec
    from pdreal.model.weights import ModelSource

    n = cfg.node
    if n.model == "smollm2":
        return ModelSource("smollm2", dtype=n.dtype, device=n.device)
    return ModelSource("random", spec=catalog_spec(n.model), seed=n.model_seed, dtype=n.dtype, device=n.device)


def build_engine(cfg: Any, role: str, progress: Any) -> tuple[Any, dict[str, Any], Any]:
    """(engine, facts, KV-events publisher or None) of one instance: model, KV pool, transfer
    manager (none when colocated), engine; `progress(text)` reports each stage."""
    import torch

    from pdreal.engine.tp_runner import make_runner

    n = cfg.node
    torch.set_num_threads(n.threads)
    config = engine_config(cfg, role)
    progress(f"loading model {n.model}" + (f" on {config.tp_size} TP ranks" if config.tp_size > 1 else ""))
    runner = make_runner(model_source(cfg), config)
    spec, layout = runner.model.spec, runner.pool.layout  # a TP rank's pool holds 1/tp_size of the heads
    facts = {"model": spec.name, "vocab_size": spec.vocab_size, "eos_token_ids": list(spec.eos_token_ids),
             "context_length": spec.context_length,
             "kv_capacity_tokens": config.kv_capacity_tokens, "tp_size": config.tp_size,
             "kv_bytes_per_token": 2 * layout.num_layers * layout.page_bytes * config.tp_size // layout.page_size_tokens,
             "threads": n.threads, "scheduler_pid": os.getpid()}
    if role == "colocated":
        from pdreal.engine.colocated import ColocatedEngine

        return ColocatedEngine(runner, config), facts, None
    from pdreal.engine.decode import DecodeEngine
    from pdreal.engine.prefill import PrefillEngine
    from pdreal.transfer import TransferConfig

    progress(f"starting the {n.transfer_backend} transfer engine on {n.public_host}")
    transfer = TransferConfig(backend=n.transfer_backend, host=n.public_host, protocol=n.transfer_protocol,
                              device_name=n.transfer_device, bootstrap_timeout_s=cfg.faults.bootstrap_timeout_s,
                              token=read_token(n.token_file))
    with filtered_stderr():  # Mooncake's start-up line about its own segment (native_log.py)
        kv = runner.kv_manager(transfer)
    engine = (PrefillEngine if role == "prefill" else DecodeEngine)(runner, kv, config)
    facts.update(transfer_backend=n.transfer_backend, transfer_protocol=n.transfer_protocol,
                 bootstrap_addr=kv.bootstrap_addr)
    events = None
    if isinstance(engine, PrefillEngine) and cfg.kv_events_enabled:  # (role prefill)
        from pdreal.serving.kv_feed import InstanceEvents

        events = InstanceEvents.start(config.instance_id, n.host, n.public_host, n.kv_events_port,
                                      config.page_size_tokens)
        engine.kv_events = events.tracker
        facts["kv_events"] = events.endpoints
    return engine, facts, events


def build_instance(cfg: ServeConfig, role: str) -> Any:
    """The HTTP process of one instance; its scheduler process (the model, KV pool, transfer
    manager and engine) starts with the app (instance.py, scheduler.py)."""
    from pdreal.serving.instance import InstanceServer

    return InstanceServer(role, cfg, engine_config(cfg, role))


async def run_app(app: web.Application, cfg: ServeConfig, role: str) -> None:
    """Listen, announce readiness on stdout, run until SIGTERM/SIGINT, then clean up."""
    # handler_cancellation: a client that closes its connection cancels its handler (streamed or
    # not), which aborts its request; shutdown_timeout: how long in-flight handlers may drain
    runner = web.AppRunner(app, handle_signals=False, handler_cancellation=True,
                           shutdown_timeout=SHUTDOWN_DRAIN_S)
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
        app = with_token(server.app(), read_token(cfg.node.token_file))  # the control plane's secret
        asyncio.run(run_app(app, cfg, role))
        return 0
    if role == "router":
        from pdreal.serving.api import build_router

        router = build_router(cfg)
        asyncio.run(run_app(router.app(), cfg, role))
        return 0
    print(f"pdreal serve: node.role={role!r} runs in-process only for prefill, decode, colocated, router",
          file=sys.stderr)
    return 2
