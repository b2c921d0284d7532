"""The HTTP app assembled: MCP at `/mcp`, the dashboard at `/`, behind the Host check and the
bearer token (`transport.http`); `http_server` serves it (and answers `/healthz` itself)."""

from __future__ import annotations

from pathlib import Path

from starlette.types import ASGIApp

from mcp_evalserver.server.dashboard.web import dashboard_routes
from mcp_evalserver.server.front.sessions import PinnedSessions
from mcp_evalserver.server.front.worker_config import WorkerConfig
from mcp_evalserver.server.http_options import HttpOptions
from mcp_evalserver.server.mcp_app import http_app
from mcp_evalserver.server.transport.http import BearerAuth, HostGuard, allowed_host_names


def build_http_app(
    state_dir: Path, options: HttpOptions, worker: WorkerConfig | None = None
) -> ASGIApp:
    """MCP at `/mcp`, the dashboard at `/`: behind the Host check and `options.token`.

    Token holders get `options.privileges()` and the `options.tools` profile. As `worker` of
    `--workers N`, handshake-era sessions are pinned to the worker that opened them
    (front/sessions.py).
    """
    app = http_app(
        state_dir,
        options.host,
        options.allowed_hosts,
        options.ray_address,
        resume_running=options.resume_running,
        privileges=options.privileges(),
        worker=worker,
        tools=options.tools,
    )
    app.router.routes.extend(dashboard_routes(state_dir, options.token))
    hosts = allowed_host_names(options.host, options.allowed_hosts)
    guarded: ASGIApp = HostGuard(BearerAuth(app, options.token), hosts)
    if worker is not None and worker.workers > 1:
        guarded = PinnedSessions(guarded, worker.index, worker.run_dir)
    return guarded
