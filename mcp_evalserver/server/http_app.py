"""The HTTP server assembled: MCP at `/mcp`, the dashboard at `/`, `/healthz`, behind the Host
check and the bearer token (`transport.http`), served by uvicorn on one socket."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_evalserver.server.dashboard.web import dashboard_routes
from mcp_evalserver.server.front.service import WorkerConfig
from mcp_evalserver.server.front.sessions import PinnedSessions, worker_socket
from mcp_evalserver.server.mcp_app import http_app
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.server.surface import ToolProfile
from mcp_evalserver.server.transport.http import (
    BACKLOG,
    BearerAuth,
    HostGuard,
    allowed_host_names,
    listening_socket,
    raise_fd_limit,
    unix_listening_socket,
)


async def serve_http(
    state_dir: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str,
    allowed_hosts: Sequence[str] = (),
    ray_address: str | None = None,
    resume_running: bool = False,
    privileges: Privileges | None = None,
    tools: ToolProfile = "all",
    stderr: TextIO = sys.stderr,
) -> None:
    """Serves until cancelled or signalled; prints the URL once listening (port 0 = any free).

    Clients get `privileges` (default: no plugins, no host paths) and the `tools` profile.

    Raises:
        InvalidInput: the address cannot be bound.
    """
    raise_fd_limit()
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    app = build_http_app(
        state_dir,
        host=host,
        token=token,
        allowed_hosts=allowed_hosts,
        ray_address=ray_address,
        resume_running=resume_running,
        privileges=privileges,
        tools=tools,
    )
    display = f"[{host}]" if ":" in host else host
    # Scripts read the URL as the last word of the first line: keep it so.
    print(f"mcp-evalserver: serving MCP at http://{display}:{bound_port}/mcp", file=stderr)
    print(f"mcp-evalserver: dashboard at http://{display}:{bound_port}/", file=stderr)
    stderr.flush()
    await uvicorn.Server(_config(app)).serve(sockets=[sock])


def serve_worker(
    worker: WorkerConfig,
    state_dir: Path,
    *,
    host: str,
    port: int,
    token: str,
    allowed_hosts: Sequence[str] = (),
    ray_address: str | None = None,
    resume_running: bool = False,
    privileges: Privileges | None = None,
    tools: ToolProfile = "all",
    ready: Callable[[], None],
) -> None:
    """Serves as `worker` of `--workers N` (front/workers.py) on `port`, shared with the
    others by SO_REUSEPORT, and on its own unix socket for the requests they pass it (its
    sessions'); calls `ready` once it listens and its app has started."""
    raise_fd_limit()
    sockets = [
        listening_socket(host, port, reuse_port=True),
        unix_listening_socket(worker_socket(worker.run_dir, worker.index)),
    ]
    app = build_http_app(
        state_dir,
        host=host,
        token=token,
        allowed_hosts=allowed_hosts,
        ray_address=ray_address,
        resume_running=resume_running,
        privileges=privileges,
        worker=worker,
        tools=tools,
    )
    server = uvicorn.Server(_config(_ReadyWhenStarted(app, ready)))
    anyio.run(functools.partial(server.serve, sockets=sockets))


def _config(app: ASGIApp) -> uvicorn.Config:
    # httptools, not uvicorn's pure-Python h11: parsing and writing each request was ~0.2 ms
    # of the server's CPU per tool call (bench/mcp.py). No keep-alive timeout to speak of: an
    # agent's client keeps its connection while its model thinks (minutes), and an idle
    # connection costs the server a few kilobytes.
    return uvicorn.Config(
        app,
        http="httptools",
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=3600,
        backlog=BACKLOG,
    )


class _ReadyWhenStarted:
    """ASGI middleware: calls `ready` once the app's lifespan has started."""

    def __init__(self, app: ASGIApp, ready: Callable[[], None]) -> None:
        self.app = app
        self._ready = ready

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def noting_send(message: Message) -> None:
            await send(message)
            if message["type"] == "lifespan.startup.complete":
                self._ready()

        await self.app(scope, receive, noting_send)


def build_http_app(
    state_dir: Path,
    *,
    host: str,
    token: str,
    allowed_hosts: Sequence[str] = (),
    ray_address: str | None = None,
    resume_running: bool = False,
    privileges: Privileges | None = None,
    worker: WorkerConfig | None = None,
    tools: ToolProfile = "all",
) -> ASGIApp:
    """MCP at `/mcp`, the dashboard at `/`, `/healthz`: behind the Host check and the token.

    Token holders get `privileges` (default: no plugins, no host paths) and the `tools`
    profile. As `worker` of
    `--workers N`, handshake-era sessions are pinned to the worker that opened them
    (front/sessions.py).
    """
    app = http_app(
        state_dir,
        host,
        allowed_hosts,
        ray_address,
        resume_running=resume_running,
        privileges=privileges,
        worker=worker,
        tools=tools,
    )
    app.router.routes.extend(dashboard_routes(state_dir, token))
    guarded: ASGIApp = HostGuard(BearerAuth(app, token), allowed_host_names(host, allowed_hosts))
    if worker is not None and worker.workers > 1:
        guarded = PinnedSessions(guarded, worker.index, worker.run_dir)
    return guarded
