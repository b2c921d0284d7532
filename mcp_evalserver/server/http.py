"""Serving the MCP app over HTTP: uvicorn on a pre-bound socket, behind a bearer token.

The token comes from `--token`, else `$MCP_EVALSERVER_TOKEN`, else it is generated and printed
once to stderr. A server bound beyond loopback without a token given is refused: a generated
token printed on a shared machine's terminal is not a secret worth trusting the network with.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_evalserver.errors import InvalidInput

TOKEN_ENV = "MCP_EVALSERVER_TOKEN"

#: Paths answered without a token (a load balancer's health check carries none).
OPEN_PATHS = frozenset({"/healthz"})


class BearerAuth:
    """ASGI middleware: HTTP requests need `Authorization: Bearer <token>`, else 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        # Constant-time comparison: the token must not leak through response timing.
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        reason = "missing bearer token" if not given else "invalid bearer token"
        body = json.dumps(
            {
                "error": "unauthorized",
                "error_description": f"{reason}: send `Authorization: Bearer <token>` (the "
                f"token given with --token or ${TOKEN_ENV}, or printed when the server started)",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="mcp-evalserver"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_token(given: str | None, host: str, stderr: TextIO = sys.stderr) -> str:
    """The token to require: given, from the environment, or generated (loopback only).

    Raises:
        InvalidInput: binding beyond loopback without a token, or an empty token.
    """
    token = given if given is not None else os.environ.get(TOKEN_ENV)
    if token is not None:
        if len(token) < 16:
            raise InvalidInput("the bearer token must be at least 16 characters")
        return token
    if not is_loopback(host):
        raise InvalidInput(
            f"refusing to serve on {host} without a token: pass --token or set ${TOKEN_ENV} "
            "(clients send it as `Authorization: Bearer <token>`)"
        )
    token = secrets.token_urlsafe(32)
    print(f"mcp-evalserver: bearer token (shown once): {token}", file=stderr, flush=True)
    return token


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket whose connections have Nagle's algorithm off.

    Raises:
        InvalidInput: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say
    # they are TCP, and with Nagle on, a response's body waits ~40 ms behind its headers for
    # the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(512)
    return sock


async def serve_http(
    state_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str,
    allowed_hosts: Sequence[str] = (),
    ray_address: str | None = None,
    stderr: TextIO = sys.stderr,
) -> None:
    """Serves until cancelled or signalled; prints the URL once listening (port 0 = any free).

    Raises:
        InvalidInput: the address cannot be bound.
    """
    import uvicorn

    from mcp_evalserver.server.mcp_app import http_app

    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    app = BearerAuth(http_app(state_dir, host, allowed_hosts, ray_address), token)
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    display = f"[{host}]" if ":" in host else host
    print(f"mcp-evalserver: serving MCP at http://{display}:{bound_port}/mcp", file=stderr)
    stderr.flush()
    await uvicorn.Server(config).serve(sockets=[sock])
