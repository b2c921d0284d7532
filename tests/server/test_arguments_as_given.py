"""A workspace tool takes its arguments as the client sent them: a text that happens to be JSON
(an answer graded as JSON, a command's stdin) is that text, never parsed into an object first
(the SDK's default for every parameter not typed `str`, for clients that send lists as JSON
text: it refused `answer='{"a": 1}'` as "expected a string")."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer

from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.server.mcp_app.workspace_adapter import as_declared
from tests.server.helpers import repo_spec
from testsupport.servers import call, call_error

pytestmark = pytest.mark.anyio

JSON_TEXTS = ['{"a": 1}', '["x", 2]', "[]", '{"nested": {"b": [true, null]}}']


async def test_an_answer_that_is_json_text_is_submitted_and_graded_as_that_text(
    tmp_path: Path,
) -> None:
    # Each task's gold answer is one of the texts, graded by exact match: resolved only if
    # the text reached the grader as it was sent.
    golds = {f"t{n}": text for n, text in enumerate(JSON_TEXTS)}
    tasks = [{"id": task_id, "prompt": "say it", "answer": gold} for task_id, gold in golds.items()]
    spec = {"name": "json", "tasks": tasks, "agent": {"type": "external"}}
    with anyio.fail_after(60):
        async with Client(create_server(tmp_path)) as client:
            await call(client, "start_campaign", spec=spec, campaign_id="json")
            for _ in golds:
                claim = await call(client, "claim_trajectory", campaign_id="json", wait_s=20)
                await call(
                    client, "submit", claim_id=claim["claim_id"], answer=golds[claim["task_id"]]
                )
            status = await call(client, "campaign_status", campaign_id="json", wait_s=30)
    assert (status["done"], status["resolved"]) == (len(golds), len(golds))


@pytest.mark.root
async def test_stdin_that_is_json_text_reaches_the_command_as_that_text(tmp_path: Path) -> None:
    with anyio.fail_after(120):
        async with Client(create_server(tmp_path / "state")) as client:
            await call(client, "start_campaign", spec=repo_spec(tmp_path, 1), campaign_id="io")
            claim = await call(client, "claim_trajectory", campaign_id="io", wait_s=60)
            claim_id = claim["claim_id"]
            for text in JSON_TEXTS:
                done = await call(client, "sandbox_exec", claim_id=claim_id, command="cat",
                                  stdin=text)  # fmt: skip
                assert done["stdout"] == text
            # A number sent as text is still taken for an int, and a wrong one still refused
            # with the field's own message.
            page = await call(client, "read_file", claim_id=claim_id, path="calc.py", offset="2")
            assert page["offset"] == 2
            refused = await call_error(
                client, "read_file", claim_id=claim_id, path="calc.py", offset="second"
            )
    assert "InvalidInput: offset: " in refused
    assert "Input should" not in refused


def test_a_tool_with_a_list_parameter_keeps_the_sdks_parsing_of_list_text() -> None:
    # A client may send a list as JSON text; only the SDK's parsing lets it through, so a tool
    # taking a list must never be declared as taking its arguments as given.
    app: MCPServer[None] = MCPServer("listed")

    @app.tool()
    def paths(names: list[str], note: str = "") -> str:
        return note.join(names)

    with pytest.raises(TypeError, match="names take lists or objects"):
        as_declared(app, "paths")
