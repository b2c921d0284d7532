"""The HTTP server assembled: MCP at `/mcp`, the dashboard at `/`, `/healthz`, behind the Host
check and the bearer token (`transport.http`), served by uvicorn on one socket."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import uvicorn
from starlette.types import ASGIApp

from mcp_evalserver.server.dashboard.web import dashboard_routes
from mcp_evalserver.server.mcp_app import http_app
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.server.transport.http import (
    BearerAuth,
    HostGuard,
    allowed_host_names,
    listening_socket,
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
    stderr: TextIO = sys.stderr,
) -> None:
    """Serves until cancelled or signalled; prints the URL once listening (port 0 = any free).

    Clients get `privileges` (default: no plugins, no host paths).

    Raises:
        InvalidInput: the address cannot be bound.
    """
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
    )
    # httptools, not uvicorn's pure-Python h11: parsing and writing each request was ~0.2 ms
    # of the server's CPU per tool call (bench/mcp.py).
    config = uvicorn.Config(
        app, http="httptools", log_level="warning", lifespan="on", timeout_graceful_shutdown=5
    )
    display = f"[{host}]" if ":" in host else host
    # Scripts read the URL as the last word of the first line: keep it so.
    print(f"mcp-evalserver: serving MCP at http://{display}:{bound_port}/mcp", file=stderr)
    print(f"mcp-evalserver: dashboard at http://{display}:{bound_port}/", file=stderr)
    stderr.flush()
    await uvicorn.Server(config).serve(sockets=[sock])


def build_http_app(
    state_dir: Path,
    *,
    host: str,
    token: str,
    allowed_hosts: Sequence[str] = (),
    ray_address: str | None = None,
    resume_running: bool = False,
    privileges: Privileges | None = None,
) -> ASGIApp:
    """MCP at `/mcp`, the dashboard at `/`, `/healthz`: behind the Host check and the token.

    Token holders get `privileges` (default: no plugins, no host paths).
    """
    app = http_app(
        state_dir,
        host,
        allowed_hosts,
        ray_address,
        resume_running=resume_running,
        privileges=privileges,
    )
    app.router.routes.extend(dashboard_routes(state_dir, token))
    return HostGuard(BearerAuth(app, token), allowed_host_names(host, allowed_hosts))
