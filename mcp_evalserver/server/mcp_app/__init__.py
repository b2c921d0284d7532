"""The MCP surface: every `mcp` import of the project lives in this package.

Each campaign tool is a thin function over `EvalService` (`campaign_tools`, `resources`). The
workspace tools are registered from their one declaration (`agents.tool_table`) by
`workspace_adapter`: over `ExternalTrajectories` with a claim id (externally driven
trajectories), and by `create_trajectory_server` over one trajectory's `ScopedTrajectory` for a
`command` agent's program. One decorator (`failures.tool_errors`) turns errors into tool errors:
an `EvalServerError` carries its message (which says what to do next); anything else is logged
with a reference id that the error text repeats, and the server keeps serving.
"""

from mcp_evalserver.server.mcp_app.app import create_server, http_app, serve_stdio
from mcp_evalserver.server.mcp_app.failures import tool_errors
from mcp_evalserver.server.mcp_app.log_notifications import session_connection
from mcp_evalserver.server.mcp_app.trajectory_server import (
    create_trajectory_server,
    serve_trajectory,
    trajectory_http_app,
)

__all__ = [
    "create_server",
    "create_trajectory_server",
    "http_app",
    "serve_stdio",
    "serve_trajectory",
    "session_connection",
    "tool_errors",
    "trajectory_http_app",
]
