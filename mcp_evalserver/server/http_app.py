"""The HTTP app assembled: MCP at `/mcp`, the dashboard at `/`, behind the Host check and the
bearer token (`transport.http`); `http_server` serves it (and answers `/healthz` itself)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from starlette.types import ASGIApp

from mcp_evalserver.server.dashboard.web import dashboard_routes
from mcp_evalserver.server.front.sessions import PinnedSessions
from mcp_evalserver.server.front.worker_config import WorkerConfig
from mcp_evalserver.server.mcp_app import http_app
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.server.tool_profiles import ToolProfile
from mcp_evalserver.server.transport.http import BearerAuth, HostGuard, allowed_host_names


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
    """MCP at `/mcp`, the dashboard at `/`: behind the Host check and the token.

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
