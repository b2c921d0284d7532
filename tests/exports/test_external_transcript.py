"""An external agent's tool calls are the steps of its trajectory: the server records each
call a client makes on its claim (whoever held it), and the ATIF and Inspect exports show them
as tool calls, with the exit code of each command and the submit that ended it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.server.mcp_app import create_server
from tests.exports.campaign import exported_over_mcp
from tests.server.helpers import repo_spec
from testsupport.repos import FIXED
from testsupport.servers import call

pytestmark = [pytest.mark.anyio, pytest.mark.root]


def _calls(steps: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (call["function_name"], call["arguments"])
        for step in steps
        for call in step.get("tool_calls", [])
    ]


async def test_an_external_agents_calls_are_steps_of_its_atif_trajectory_and_inspect_sample(
    tmp_path: Path,
) -> None:
    spec = repo_spec(tmp_path / "repos", 1)
    async with Client(create_server(tmp_path / "state")) as client:
        started = await call(client, "start_campaign", spec=spec)
        campaign_id = started["campaign_id"]
        with anyio.fail_after(60):
            claim = (await call(client, "claim_trajectory", wait_s=30))["claim_id"]
            await call(client, "sandbox_exec", claim_id=claim, command="grep -n return calc.py")
            await call(client, "write_file", claim_id=claim, path="calc.py", content=FIXED)
            await call(client, "sandbox_exec", claim_id=claim, command="exit 3", timeout_s=5)
            await call(client, "submit", claim_id=claim, answer="fixed add")
            await call(client, "campaign_status", campaign_id=campaign_id, wait_s=30)
            atif, _ = await exported_over_mcp(client, campaign_id, "atif")
            inspect, _ = await exported_over_mcp(client, campaign_id, "inspect")
    (document,) = json.loads(atif)["trajectories"]
    assert _calls(document["steps"]) == [
        ("sandbox_exec", {"command": "grep -n return calc.py"}),
        ("write_file", {"path": "calc.py", "content": FIXED}),
        ("sandbox_exec", {"command": "exit 3"}),  # its timeout is not kept
        ("submit", {"answer": "fixed add"}),
    ]
    results = [
        result["content"]
        for step in document["steps"]
        for result in step.get("observation", {}).get("results", [])
    ]
    assert json.loads(results[2]) == {"exit_code": 3}
    assert results[3].startswith("(submitted")
    (sample,) = json.loads(inspect)["samples"]
    named = [
        call["function"]
        for message in sample["messages"]
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or []
    ]
    assert named == ["sandbox_exec", "write_file", "sandbox_exec", "submit"]
