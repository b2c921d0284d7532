"""Serving the MCP app and the dashboard over HTTP: uvicorn on a pre-bound socket, behind a
bearer token.

The token comes from `--token`, else `$MCP_EVALSERVER_TOKEN`, else it is generated and printed
once to stderr. A server bound beyond loopback without a token given is refused: a generated
token printed on a shared machine's terminal is not a secret worth trusting the network with.

A browser cannot send a bearer header with a page load, so the dashboard's login form trades
the token for an HttpOnly, SameSite=Strict session cookie whose value is derived from the token
(never the token itself, never in a URL). The cookie opens the dashboard's pages only; `/mcp`
takes the bearer header alone. Every path but `/healthz` and `/readyz` answers only requests
whose Host (and Origin, when sent) names this server: DNS-rebinding protection, as the MCP
transport has it.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import os
import resource
import secrets
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_evalserver.errors import InvalidInput

TOKEN_ENV = "MCP_EVALSERVER_TOKEN"

#: Liveness: 200 while the process serves, from the moment it listens (`starting.py`).
HEALTH_PATH = "/healthz"
#: Readiness: 200 once the app has loaded and its service started, 503 until then.
READY_PATH = "/readyz"
#: Paths answered without a token (a load balancer's health check carries none).
OPEN_PATHS = frozenset({HEALTH_PATH, READY_PATH})
#: Paths answered without a token but behind the Host check: the dashboard's login form.
LOGIN_PATH = "/login"
#: The dashboard's session cookie; its value is `session_value(token)`.
SESSION_COOKIE = "mcp_evalserver_session"
#: Paths the session cookie never opens: MCP clients send the bearer header.
BEARER_ONLY_PREFIXES = ("/mcp",)


def session_value(token: str) -> str:
    """The session cookie's value: derived from the token, so the token is never stored."""
    return hmac.new(token.encode(), b"mcp-evalserver dashboard session", hashlib.sha256).hexdigest()


def _cookie(headers: dict[bytes, bytes], name: str) -> bytes:
    for part in headers.get(b"cookie", b"").split(b";"):
        key, _, value = part.strip().partition(b"=")
        if key == name.encode():
            return value
    return b""


class BearerAuth:
    """ASGI middleware: `Authorization: Bearer <token>`, or on dashboard paths the session
    cookie, else 401 (a browser asking for a page is sent to the login form instead)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()
        self._session = session_value(token).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path == LOGIN_PATH:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"authorization", b"")
        # Constant-time comparisons: the secrets must not leak through response timing.
        if hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        cookie = _cookie(headers, SESSION_COOKIE)
        dashboard = not path.startswith(BEARER_ONLY_PREFIXES)
        if dashboard and cookie and hmac.compare_digest(cookie, self._session):
            await self.app(scope, receive, send)
            return
        if dashboard and not given and b"text/html" in headers.get(b"accept", b""):
            await _respond(send, 303, b"", [(b"location", LOGIN_PATH.encode())])
            return
        reason = "missing bearer token" if not given else "invalid bearer token"
        body = json.dumps(
            {
                "error": "unauthorized",
                "error_description": f"{reason}: send `Authorization: Bearer <token>` (the "
                f"token given with --token or ${TOKEN_ENV}, or printed when the server started)",
            }
        ).encode()
        await _respond(
            send,
            401,
            body,
            [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="mcp-evalserver"'),
            ],
        )


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def allowed_host_names(host: str, allowed_hosts: Sequence[str] = ()) -> list[str]:
    """The Host header values a request may carry: loopback names, the bound host, and
    `allowed_hosts` (`name` or `name:port`); each also with any port (`name:*`)."""
    names = ["127.0.0.1", "localhost", "[::1]", f"[{host}]" if ":" in host else host]
    names += list(allowed_hosts)
    return sorted({entry for name in names for entry in (name, f"{name}:*")})


def host_allowed(value: str, allowed: Sequence[str]) -> bool:
    """Whether a Host header value matches one of `allowed` (`name:*` takes any port)."""
    if value in allowed:
        return True
    name, _, port = value.rpartition(":")
    return bool(name) and port.isdigit() and f"{name}:*" in allowed


class HostGuard:
    """ASGI middleware: a request must name this server in its Host header, and in its Origin
    when it sends one, else 421/403: a page on a rebound DNS name cannot read the dashboard."""

    def __init__(self, app: ASGIApp, allowed: Sequence[str]) -> None:
        self.app = app
        self._allowed = list(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        host = headers.get(b"host", b"").decode("latin-1")
        origin = headers.get(b"origin", b"").decode("latin-1")
        origin_host = (
            origin.partition("://")[2] if origin.startswith(("http://", "https://")) else ""
        )
        if not host_allowed(host, self._allowed):
            await _respond(send, 421, b"unknown Host header: use an address this server "
                           b"serves, or start it with --allow-host NAME", [])  # fmt: skip
            return
        if origin and not host_allowed(origin_host, self._allowed):
            await _respond(send, 403, b"cross-origin requests are refused", [])
            return
        await self.app(scope, receive, send)


def is_loopback(host: str) -> bool:
    """Whether `host` only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def resolve_token(given: str | None, host: str, stderr: TextIO | None = None) -> str:
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
    stderr = stderr or sys.stderr  # read when called: a test's capture replaces it
    print(f"mcp-evalserver: bearer token (shown once): {token}", file=stderr, flush=True)
    return token


#: Connections a listening socket queues before accepting: thousands of agents connect at
#: once when a campaign of thousands starts (the kernel caps it at net.core.somaxconn).
BACKLOG = 4096


def listening_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A bound, listening TCP socket whose connections have Nagle's algorithm off;
    `reuse_port`: one of several listeners of that port (`--workers N`).

    Raises:
        InvalidInput: the address cannot be bound.
    """
    sock = bound_socket(host, port, reuse_port=reuse_port)
    sock.listen(BACKLOG)
    return sock


def bound_socket(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A TCP socket bound to `host:port`, not yet listening, whose connections will have
    Nagle's algorithm off; `reuse_port`: the port is shared (SO_REUSEPORT).

    Raises:
        InvalidInput: the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say
    # they are TCP, and with Nagle on, a response's body waits ~40 ms behind its headers for
    # the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    return sock


def unix_listening_socket(path: Path) -> socket.socket:
    """A listening unix socket at `path` (mode 0600: only this user's processes connect)."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    path.chmod(0o600)
    sock.listen(BACKLOG)
    return sock


def raise_fd_limit() -> int:
    """Raises this process's open-file limit to its hard limit (each held connection is a
    descriptor: 10,000 idle agents are 10,000); returns the limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard
