"""What a model reads of the MCP surface every turn stays within its budget.

`tools/list`, counted as each tool's name + description + the JSON of its input schema: at most
20,000 characters for the whole server, 8,000 for `--tools agent` (what an agent that claims
trajectories needs). The campaign spec is one object argument whose schema is a resource, not
~39k characters inlined into each tool that takes one; a wrong spec is refused field by field.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.server.surface import BUDGETS, SPEC_SCHEMA_URI, listed_chars, untitled
from tests.server.helpers import answer_spec
from testsupport.servers import call, call_error, http_client, http_server, stdio_client

pytestmark = pytest.mark.anyio

AGENT_TOOLS = {"claim_trajectory", *(tool.name for tool in WORKSPACE_TOOLS)}


async def counted(client: Client) -> tuple[set[str], int]:
    tools = (await client.list_tools()).tools
    names = {tool.name for tool in tools}
    return names, listed_chars((t.name, t.description, t.input_schema) for t in tools)


def test_the_count_is_name_description_and_schema_json() -> None:
    # The measure the budgets are stated in: a count that read less would pass anything.
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert listed_chars([("tool", "does it", schema)]) == 4 + 7 + len(json.dumps(schema))
    assert listed_chars([("a", None, {}), ("b", "", {})]) == 2 * (1 + 2)


def test_titles_go_but_a_field_named_title_and_values_stay() -> None:
    schema = {
        "title": "xArguments",
        "properties": {
            "title": {"title": "Title", "type": "string", "default": {"title": "kept"}},
            "n": {"anyOf": [{"type": "integer", "title": "N"}, {"type": "null"}]},
        },
    }
    assert untitled(schema) == {
        "properties": {
            "title": {"type": "string", "default": {"title": "kept"}},
            "n": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        }
    }


async def test_the_whole_servers_tool_list_fits_its_budget(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path)) as client:
        names, chars = await counted(client)
    assert names > AGENT_TOOLS
    assert chars <= BUDGETS["all"], f"tools/list is {chars} characters"


async def test_an_agent_server_over_stdio_serves_only_the_claiming_tools_within_budget(
    tmp_path: Path,
) -> None:
    with anyio.fail_after(60):
        async with stdio_client(tmp_path, server_args=["--tools", "agent"]) as client:
            names, chars = await counted(client)
            missing = await call_error(client, "start_campaign", spec=answer_spec(1))
    assert names == AGENT_TOOLS
    assert chars <= BUDGETS["agent"], f"tools/list is {chars} characters"
    assert "start_campaign" in missing


@pytest.mark.parametrize("workers", [1, 2])
async def test_an_agent_server_over_http_serves_the_same_tools(
    tmp_path: Path, workers: int
) -> None:
    with anyio.fail_after(60):
        async with (
            http_server(tmp_path, "--tools", "agent", workers=workers) as url,
            http_client(url) as client,
        ):
            names, _ = await counted(client)
    assert names == AGENT_TOOLS


def _spec_argument(tool: Any) -> dict[str, Any]:
    spec: dict[str, Any] = tool.input_schema["properties"]["spec"]
    return spec


async def test_a_spec_is_one_object_whose_schema_is_a_resource(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        read = await client.read_resource(SPEC_SCHEMA_URI)
    for name in ("start_campaign", "sweep_concurrency"):
        spec = _spec_argument(tools[name])
        assert spec["type"] == "object"
        assert SPEC_SCHEMA_URI in spec["description"]
        assert "mcp-evalserver schema" in spec["description"]
    assert SPEC_SCHEMA_URI in tools["score"].input_schema["properties"]["scorer"]["description"]
    for tool in tools.values():
        assert "$defs" not in tool.input_schema, tool.name
    served = json.loads(getattr(read.contents[0], "text", ""))
    printed = await anyio.run_process([sys.executable, "-m", "mcp_evalserver.cli", "schema"])
    assert served == json.loads(printed.stdout)
    assert {"tasks", "agent", "scorer", "samples", "limits"} <= set(served["properties"])


async def test_the_tools_validate_a_spec_and_name_each_wrong_field(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path)) as client:
        typo = {**answer_spec(1), "agent": {"type": "opeanai"}}
        unknown_agent = await call_error(client, "start_campaign", spec=typo)
        swept = await call_error(client, "sweep_concurrency", spec={**answer_spec(1), "sampels": 2})
        started = await call(client, "start_campaign", spec=answer_spec(1))
        with anyio.fail_after(30):
            await call(client, "campaign_status", campaign_id=started["campaign_id"], wait_s=20)
        not_object = await call_error(client, "start_campaign", spec="tasks please")
        too_long = await call_error(client, "campaign_status", campaign_id="x", wait_s=500)
        rescored = await call_error(
            client, "score", campaign_id=started["campaign_id"], rescore=True, scorer={"type": "x"}
        )
    assert unknown_agent.endswith(
        ": InvalidInput: invalid campaign spec: agent.type: unknown 'opeanai' (known: "
        "claude-code, codex, command, external, gemini-cli, mini-swe-agent, noop, openai, "
        "opencode, oracle, predictions, python, validation)"
    )
    assert "sampels: unknown field; did you mean 'samples'?" in swept
    assert "InvalidInput: invalid scorer: type: unknown 'x' (known: all_of" in rescored
    # Arguments the SDK refuses before a tool runs read the same way.
    assert not_object.endswith('InvalidInput: spec: expected an object, got "tasks please"')
    assert too_long.endswith("InvalidInput: wait_s: must be <= 300 (got 500)")
    for text in (unknown_agent, swept, rescored, not_object, too_long):
        assert "http" not in text
        assert "Input should" not in text
