"""The campaign server's tools and resources, registered on first use (`first_use`): this
module imports the engine, which the first answer does without."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from mcp_evalserver.server.mcp_app.campaign_tools import campaign_tools, export_tools
from mcp_evalserver.server.mcp_app.resources import campaign_resources
from mcp_evalserver.server.mcp_app.service_tools import service_tools
from mcp_evalserver.server.mcp_app.workspace_adapter import trajectory_tools
from mcp_evalserver.server.set_tools import SET_TOOLS
from mcp_evalserver.server.surface import tidy_for_models
from mcp_evalserver.server.tool_profiles import ToolProfile


def register_tools(app: MCPServer[Any], tools: ToolProfile) -> None:
    """Every tool and resource of the `tools` profile, in the order they are listed."""
    if tools == "all":
        campaign_tools(app)
    trajectory_tools(app)
    if tools == "all":
        export_tools(app)
        campaign_resources(app)
        service_tools(app, SET_TOOLS)
    tidy_for_models(app)
