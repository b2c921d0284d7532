"""The workspace tools are declared once (`agents.tool_table`): the claim-id MCP tools, a
trajectory endpoint's MCP tools and the `openai` agent's function tools are all made from it.

`test_surface_unchanged.py` proves the surfaces are what they were; these prove they have one
source: what the table says is what every surface shows, and a change to it shows everywhere.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client

from mcp_evalserver.agents import workspace_tools
from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS, Audience, WorkspaceTool
from mcp_evalserver.agents.workspace_tools import tool_schemas
from mcp_evalserver.server.mcp_app import (
    create_server,
    create_trajectory_server,
    trajectory_server,
    workspace_adapter,
)
from mcp_evalserver.server.trajectories import ExternalTrajectories
from mcp_evalserver.server.trajectory.scoped import ScopedTrajectory

pytestmark = pytest.mark.anyio

NAMES = [tool.name for tool in WORKSPACE_TOOLS]


async def listed(server: Any) -> dict[str, dict[str, Any]]:
    async with Client(server) as client:
        tools = (await client.list_tools()).tools
    return {tool.name: tool.model_dump(mode="json", exclude_none=True) for tool in tools}


async def surfaces(tmp_path: Path) -> dict[Audience, dict[str, dict[str, Any]]]:
    scoped = ScopedTrajectory(cast(TrajectoryContext, None))  # listing reaches no trajectory
    return {
        "claimed": await listed(create_server(tmp_path)),
        "scoped": await listed(create_trajectory_server(scoped)),
    }


def openai_tools() -> dict[str, dict[str, Any]]:
    """Every function tool the `openai` agent may offer, whatever its task and configuration."""
    offered: dict[str, dict[str, Any]] = {}
    for workspace in (False, True):
        for checkpoints in (False, True):
            for schema in tool_schemas(workspace, checkpoints):
                offered.setdefault(schema["function"]["name"], schema["function"])
    return offered


async def test_both_mcp_servers_list_the_tables_tools_as_it_declares_them(tmp_path: Path) -> None:
    for audience, tools in (await surfaces(tmp_path)).items():
        leading = ["claim_id"] if audience == "claimed" else []
        for tool in WORKSPACE_TOOLS:
            listed_tool = tools[tool.name]
            assert listed_tool["description"] == tool.description(audience)
            schema = listed_tool["input_schema"]
            names = [*leading, *(p.name for p in tool.parameters_for(audience))]
            assert list(schema["properties"]) == names, (audience, tool.name)
            required = [*leading, *(p.name for p in tool.parameters_for(audience) if p.required)]
            assert schema.get("required", []) == required, (audience, tool.name)
            hints = listed_tool["annotations"]
            assert hints["read_only_hint"] is (tool.effect == "reads"), (audience, tool.name)
            destructive = tool.effect in ("overwrites", "edits", "runs")
            assert hints["destructive_hint"] is destructive, (audience, tool.name)
    scoped_names = set((await surfaces(tmp_path))["scoped"])
    assert scoped_names == set(NAMES), "a trajectory's endpoint serves the workspace tools only"


def test_the_openai_tools_name_the_same_tools_with_the_same_parameters() -> None:
    by_model_name = {model.name: tool for tool in WORKSPACE_TOOLS for model in tool.models}
    offered = openai_tools()
    assert set(offered) == set(by_model_name)
    for name, function in offered.items():
        tool = by_model_name[name]
        parameters = {p.name for p in tool.parameters}
        assert set(function["parameters"]["properties"]) <= parameters, name
    assert by_model_name["exec"].name == "sandbox_exec", "the model's `exec` is sandbox_exec"


def test_every_tool_has_a_handler_on_each_mcp_surface_taking_its_parameters() -> None:
    for tool in WORKSPACE_TOOLS:
        for audience, handlers in (("claimed", ExternalTrajectories), ("scoped", ScopedTrajectory)):
            taken = inspect.signature(getattr(handlers, tool.name)).parameters
            names = [name for name in taken if name not in ("self", "claim_id")]
            expected = [p.name for p in tool.parameters_for(cast(Audience, audience))]
            assert names == expected, (audience, tool.name)


async def test_a_change_to_the_table_shows_on_all_three_surfaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def reworded(tool: WorkspaceTool) -> WorkspaceTool:
        models = tuple(dataclasses.replace(m, description=f"new: {m.name}") for m in tool.models)
        return dataclasses.replace(
            tool, claimed=f"claimed {tool.name}", scoped=f"scoped {tool.name}", models=models
        )

    table = tuple(reworded(tool) for tool in WORKSPACE_TOOLS)
    monkeypatch.setattr(workspace_adapter, "WORKSPACE_TOOLS", table)
    monkeypatch.setattr(trajectory_server, "WORKSPACE_TOOLS", table)
    monkeypatch.setattr(workspace_tools, "WORKSPACE_TOOLS", table)

    now = await surfaces(tmp_path)
    for audience in ("claimed", "scoped"):
        assert {n: now[audience][n]["description"] for n in NAMES} == {
            n: f"{audience} {n}" for n in NAMES
        }
    assert {n: f["description"] for n, f in openai_tools().items()} == {
        n: f"new: {n}" for n in openai_tools()
    }
