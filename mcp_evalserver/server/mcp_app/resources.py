"""The campaign and set resources: the spec's schema, a report, a trajectory, a task, a set's
leaderboard."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from mcp_evalserver.server.mcp_app.calls import call_service, service_of
from mcp_evalserver.server.mcp_app.failures import resource_errors
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.set_tools import LEADERBOARD_URI, leaderboard
from mcp_evalserver.server.surface import SPEC_SCHEMA_URI
from mcp_evalserver.spec.campaign import spec_json_schema


def campaign_resources(app: MCPServer[Any]) -> None:
    @app.resource(SPEC_SCHEMA_URI, mime_type="application/schema+json")
    def campaign_schema() -> str:
        """The JSON schema of a campaign spec: what start_campaign and sweep_concurrency take
        as `spec` (and a spec file of `mcp-evalserver run`)."""
        return json.dumps(spec_json_schema(), indent=1)

    @app.resource("campaign://{campaign_id}/report", mime_type="text/markdown")
    async def campaign_report(campaign_id: str, ctx: Context[EvalService, Any]) -> str:
        """A campaign's report in Markdown: status, pass rate, one row per task."""
        with resource_errors():
            return await call_service(ctx, EvalService.report, campaign_id=campaign_id)

    @app.resource(
        "campaign://{campaign_id}/trajectories/{trajectory_id}", mime_type="application/json"
    )
    async def campaign_trajectory(
        campaign_id: str, trajectory_id: str, ctx: Context[EvalService, Any]
    ) -> str:
        """Where one trajectory stands: phase, outcome, score, attempts, usage."""
        with resource_errors():
            found = await call_service(
                ctx, EvalService.trajectory, campaign_id=campaign_id, trajectory_id=trajectory_id
            )
            return json.dumps(found, indent=2)

    @app.resource("campaign://{campaign_id}/tasks/{task_id}", mime_type="application/json")
    async def campaign_task(campaign_id: str, task_id: str, ctx: Context[EvalService, Any]) -> str:
        """One task's trajectories in a campaign, with their outcomes."""
        with resource_errors():
            found = await call_service(
                ctx, EvalService.task, campaign_id=campaign_id, task_id=task_id
            )
            return json.dumps(found, indent=2)

    @app.resource(LEADERBOARD_URI, mime_type="text/markdown")
    def set_leaderboard(set_id: str, ctx: Context[EvalService, Any]) -> str:
        """An evaluation set's leaderboard: per agent status, pass rate with its interval,
        cost, tokens, time; every pair's paired difference with Holm-adjusted p-values."""
        with resource_errors():
            return leaderboard(service_of(ctx), set_id)
