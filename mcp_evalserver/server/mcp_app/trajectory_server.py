"""A `command` agent's MCP server: the workspace tools of one trajectory, over loopback HTTP."""

from __future__ import annotations

import functools
from contextlib import AbstractAsyncContextManager
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from mcp_evalserver import __version__
from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS
from mcp_evalserver.server.mcp_app.json_answers import answer_json_unless_streaming
from mcp_evalserver.server.mcp_app.workspace_adapter import add_workspace_tool, returns_of
from mcp_evalserver.server.surface import as_models_read_it
from mcp_evalserver.server.trajectory.endpoint import ServedTrajectory, serve_trajectory_endpoint
from mcp_evalserver.server.trajectory.scoped import ScopedTrajectory

TRAJECTORY_INSTRUCTIONS = """\
You are the agent of one evaluation trajectory. Work in its private workspace with \
sandbox_exec / read_file / edit_file / write_file / search / list_files / get_diff, then submit \
(the workspace's diff is handed in, with an answer if you give one). These tools reach this \
trajectory only."""


def create_trajectory_server(trajectory: ScopedTrajectory) -> MCPServer[Any]:
    """An MCP server whose tools act on one trajectory only: no tool takes a trajectory id."""
    app: MCPServer[Any] = MCPServer(
        "mcp-evalserver-trajectory", version=__version__, instructions=TRAJECTORY_INSTRUCTIONS
    )

    for tool in WORKSPACE_TOOLS:
        run = functools.partial(trajectory.call, tool)
        add_workspace_tool(
            app, tool, "scoped", run, returns_of(getattr(ScopedTrajectory, tool.name))
        )
    as_models_read_it(app)
    return app


def trajectory_http_app(trajectory: ScopedTrajectory) -> Starlette:
    """The streamable-HTTP app (MCP at `/mcp`) of one trajectory, for a loopback listener.

    DNS-rebinding protection is on: only loopback Host (and Origin) headers are accepted.
    """
    hosts = [entry for name in ("127.0.0.1", "localhost") for entry in (name, f"{name}:*")]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )
    server = create_trajectory_server(trajectory)
    http = server.streamable_http_app(host="127.0.0.1", transport_security=security)
    answer_json_unless_streaming(server)
    return http


def serve_trajectory(context: TrajectoryContext) -> AbstractAsyncContextManager[ServedTrajectory]:
    """A `command` agent's endpoint for one trajectory, serving `create_trajectory_server`."""
    return serve_trajectory_endpoint(context, trajectory_http_app)
