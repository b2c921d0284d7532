"""What users and clients see did not change with the package's layout: the MCP tools of both
servers (names, descriptions, schemas, annotations), the OpenAI tool schemas the `openai` agent
offers, the campaign spec's JSON schema and every command's `--help`.

The fixture was written by main at 09c052b, before the restructure, with the same calls.
A deliberate change to the surface updates the fixture in the same commit (issue 32: a nullable
`api_key_env`, the help of `--allow-env` and `--allow-endpoints`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest
from mcp import Client

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.workspace_tools import tool_schemas
from mcp_evalserver.server.mcp_app import create_server, create_trajectory_server
from mcp_evalserver.server.trajectory.scoped import ScopedTrajectory

pytestmark = pytest.mark.anyio

FIXTURE = Path(__file__).parent / "fixtures" / "surface-09c052b.json"
COMMANDS = [
    "", "run", "status", "resume", "report", "compare", "rescore", "import-predictions",
    "export-predictions", "sweep", "calibrate", "plan", "schema", "validate",
]  # fmt: skip


def cli(*args: str) -> str:
    environment = {**os.environ, "COLUMNS": "100"}
    return subprocess.run(
        [sys.executable, "-m", "mcp_evalserver.cli", *args],
        capture_output=True,
        text=True,
        check=True,
        env=environment,
    ).stdout


def help_texts() -> dict[str, str]:
    """Every command's `--help`, keyed as the fixture keys them; the CLIs run side by side
    (each is a Python start and an import of the package)."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        texts = pool.map(lambda command: cli(*([command] if command else []), "--help"), COMMANDS)
        return {command or "(top)": text for command, text in zip(COMMANDS, texts, strict=True)}


async def listed_tools(server: Any) -> list[dict[str, Any]]:
    async with Client(server) as client:
        listed = (await client.list_tools()).tools
    dumped = (tool.model_dump(mode="json", exclude_none=True) for tool in listed)
    return sorted(dumped, key=lambda tool: str(tool["name"]))


@pytest.fixture(scope="module")
def before() -> dict[str, Any]:
    return cast(dict[str, Any], json.loads(FIXTURE.read_text()))


async def test_the_mcp_tools_are_listed_exactly_as_before(
    tmp_path: Path, before: dict[str, Any]
) -> None:
    assert await listed_tools(create_server(tmp_path)) == before["tools"]


async def test_a_trajectory_endpoint_lists_its_tools_exactly_as_before(
    before: dict[str, Any],
) -> None:
    # Listing builds no workspace: the trajectory is never reached.
    scoped = ScopedTrajectory(cast(TrajectoryContext, None))
    assert await listed_tools(create_trajectory_server(scoped)) == before["trajectory_tools"]


def test_the_openai_agent_offers_the_same_tool_schemas(before: dict[str, Any]) -> None:
    now = {
        f"{workspace}/{checkpoints}": tool_schemas(workspace, checkpoints)
        for workspace in (False, True)
        for checkpoints in (False, True)
    }
    assert json.loads(json.dumps(now)) == before["openai_tools"]


def test_the_spec_schema_and_every_commands_help_are_as_before(before: dict[str, Any]) -> None:
    assert json.loads(cli("schema")) == before["spec_schema"]
    assert help_texts() == before["cli_help"]


async def current_surface(state_dir: Path) -> dict[str, Any]:
    """What the fixture holds, as this checkout makes it."""
    scoped = ScopedTrajectory(cast(TrajectoryContext, None))
    return {
        "cli_help": help_texts(),
        "openai_tools": json.loads(
            json.dumps(
                {
                    f"{workspace}/{checkpoints}": tool_schemas(workspace, checkpoints)
                    for workspace in (False, True)
                    for checkpoints in (False, True)
                }
            )
        ),
        "spec_schema": json.loads(cli("schema")),
        "tools": await listed_tools(create_server(state_dir)),
        "trajectory_tools": await listed_tools(create_trajectory_server(scoped)),
    }


if __name__ == "__main__":
    # A deliberate change to the surface rewrites the fixture (in a commit of its own):
    # `python -m tests.server.test_surface_unchanged`, then review `git diff` of the fixture.
    import tempfile

    import anyio

    async def _write() -> None:
        with tempfile.TemporaryDirectory() as state_dir:
            surface = await current_surface(Path(state_dir))
        FIXTURE.write_text(json.dumps(surface, indent=1, sort_keys=True) + "\n")

    anyio.run(_write)
