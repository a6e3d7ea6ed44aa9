"""The control plane's shared secret.

An instance's mutating endpoints - `PUT /route` (bootstrap registration), `POST /generate` and
`POST /abort` (what the router sends) - answer 401 unless the request carries the token of
`node.token_file` in the `X-PDReal-Token` header. Read-only endpoints (/health, /stats, /metrics,
/steps, GET /route) stay open. A node bound beyond loopback must have a token file
(`ServeConfig.validate`); `pdreal serve` (role=all) writes a fresh one for its children.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # aiohttp loads only where a server is built (the config imports this module)
    from aiohttp import web

TOKEN_HEADER = "X-PDReal-Token"
PROTECTED = frozenset({("PUT", "/route"), ("POST", "/generate"), ("POST", "/abort")})
Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps a listener on this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str) -> str:
    """The token in `path` ('' when no path is configured); ValueError names an unusable file."""
    if not path:
        return ""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise ValueError(f"node.token_file {path!r}: {exc.strerror}") from None
    if len(token) < 16:
        raise ValueError(f"node.token_file {path!r}: the token must be at least 16 characters, got {len(token)}")
    return token


def write_token(path: Path) -> str:
    """Write a fresh random token to `path`, readable by its owner only."""
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def token_middleware(token: str) -> Any:
    """aiohttp middleware: PROTECTED requests need `token` (no check when it is '')."""
    from aiohttp import web

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token and (request.method, request.path) in PROTECTED:
            given = request.headers.get(TOKEN_HEADER, "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                why = "missing" if not given else "wrong"
                return web.json_response({"error": f"{request.method} {request.path}: control token {why} "
                                                   f"(header {TOKEN_HEADER}, node.token_file)"}, status=401)
        return await handler(request)

    return check


def with_token(app: web.Application, token: str) -> web.Application:
    if token:
        app.middlewares.append(token_middleware(token))
    return app
