"""The MCP surface: every `mcp` import of the project lives in this package.

Each campaign tool is a thin function over `EvalService` (`campaign_tools`, `resources`). The
workspace tools are registered from their one declaration (`agents.tool_table`) by
`workspace_adapter`: over `ExternalTrajectories` with a claim id (externally driven
trajectories), and by `create_trajectory_server` over one trajectory's `ScopedTrajectory` for a
`command` agent's program. One decorator (`failures.tool_errors`) turns errors into tool errors:
an `EvalServerError` carries its message (which says what to do next); anything else is logged
with a reference id that the error text repeats, and the server keeps serving.

The names below load with the module that defines them, on first use: `serve_stdio` answers its
first request before the engine is imported (`first_use`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each public name and the module that defines it.
_PUBLIC = {
    "create_server": "app",
    "http_app": "app",
    "serve_stdio": "app",
    "tool_errors": "failures",
    "session_connection": "log_notifications",
    "create_trajectory_server": "trajectory_server",
    "serve_trajectory": "trajectory_server",
    "trajectory_http_app": "trajectory_server",
}

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

if TYPE_CHECKING:
    from mcp_evalserver.server.mcp_app.app import create_server, http_app, serve_stdio
    from mcp_evalserver.server.mcp_app.failures import tool_errors
    from mcp_evalserver.server.mcp_app.log_notifications import session_connection
    from mcp_evalserver.server.mcp_app.trajectory_server import (
        create_trajectory_server,
        serve_trajectory,
        trajectory_http_app,
    )


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
