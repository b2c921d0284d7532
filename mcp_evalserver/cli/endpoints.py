"""A `command` agent's MCP endpoint, for the campaigns the command line runs."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.server.trajectory.endpoint import ServedTrajectory


def serve_trajectory(context: TrajectoryContext) -> AbstractAsyncContextManager[ServedTrajectory]:
    """Serves one trajectory's endpoint (`server.mcp_app.serve_trajectory`)."""
    # Imported here: the MCP SDK is needed only by campaigns whose agent has an endpoint.
    from mcp_evalserver.server.mcp_app import serve_trajectory as serve

    return serve(context)
