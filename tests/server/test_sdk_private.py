"""The MCP SDK's private names the server reads, pinned and watched.

`logging/setLevel` needs its request's connection (where the level outlives the request), and
mcp 2.3 gives a handler no public way to it: `session_connection` reads
`ServerSession._connection`. The server also reads `MCPServer._lowlevel_server` (its session
manager, the tool-input-schema hook loaded on first use) and `MCPServer._tool_manager` (the
tools' schemas tidied for models), which every MCP test exercises. pyproject pins the SDK
below 2.4; these tests fail, naming the cause, the day an installed SDK moves the first.
"""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPDeprecationWarning
from packaging.requirements import Requirement

from mcp_evalserver.server.mcp_app import create_server, session_connection
from tests.server.helpers import answer_spec
from testsupport.servers import call

pytestmark = pytest.mark.anyio

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_the_installed_sdk_is_in_the_range_pyproject_pins() -> None:
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    (sdk,) = [Requirement(d) for d in dependencies if Requirement(d).name == "mcp"]
    assert sdk.specifier.contains(importlib.metadata.version("mcp")), sdk
    # The pin is a minor range: a private name may move in any minor release.
    assert "<2.4" in str(sdk.specifier)


async def test_a_handshake_era_client_sets_its_level_through_the_sessions_connection(
    tmp_path: Path,
) -> None:
    received: list[object] = []

    async def logged(params: object) -> None:
        received.append(params)

    with anyio.fail_after(30):
        async with Client(create_server(tmp_path), mode="legacy", logging_callback=logged) as c:
            with pytest.warns(MCPDeprecationWarning):
                await c.set_logging_level("info")  # the SDK moved it: an error names it
            await call(c, "start_campaign", spec=answer_spec(1), campaign_id="one")
            await call(c, "campaign_status", campaign_id="one", wait_s=20)
    assert received, "the level was kept on the connection and its events delivered"


def test_a_session_without_the_private_connection_fails_loudly_naming_it() -> None:
    with pytest.raises(RuntimeError, match=r"ServerSession._connection.*pyproject.toml"):
        session_connection(object())
