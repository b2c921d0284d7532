"""A stdio server answers `initialize` before it imports the engine or builds a tool's schema.

Claude Code gives a server about 3 s to answer its first request, then falls back to a second
handshake; importing the campaign engine and building every tool's schema cost about as much
again as the MCP SDK's own import (bench/startup.py measures the time). Python's `-X importtime`
lists on stderr every module a process imports with an import statement (not
`importlib.import_module`'s): a server that was sent `initialize` alone, then the end of its
input, shows what its first answer needed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from testsupport.rawmcp import initialize_request
from testsupport.servers import REPO, server_command

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

#: The package's modules the first answer may need: the command line's options, the server
#: without its tools. Not the engine, the service, the campaign spec's models, any tool: a
#: module that joins this list costs every client's first answer its import.
FIRST_ANSWER_NEEDS = {
    "mcp_evalserver", "mcp_evalserver.errors", "mcp_evalserver.cli", "mcp_evalserver.cli.main",
    "mcp_evalserver.cli.exits", "mcp_evalserver.engine", "mcp_evalserver.engine.state_dir",
    "mcp_evalserver.sandbox", "mcp_evalserver.sandbox.docker_engine", "mcp_evalserver.server",
    "mcp_evalserver.server.collector",
    "mcp_evalserver.server.surface", "mcp_evalserver.server.tool_profiles",
    "mcp_evalserver.server.transport",
    "mcp_evalserver.server.transport.answers", "mcp_evalserver.server.transport.http",
    "mcp_evalserver.server.transport.stdio_pipes", "mcp_evalserver.spec",
    "mcp_evalserver.spec.validation_errors", "mcp_evalserver.spec.prose",
    "mcp_evalserver.server.mcp_app",
    "mcp_evalserver.server.mcp_app.app", "mcp_evalserver.server.mcp_app.first_use",
    "mcp_evalserver.server.mcp_app.json_answers", "mcp_evalserver.server.mcp_app.log_notifications",
}  # fmt: skip


def imported(stderr: str) -> set[str]:
    """The modules `-X importtime` reported on `stderr`."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


async def serve(state_dir: Path, messages: list[dict[str, Any]]) -> tuple[list[Any], set[str]]:
    """Sends `messages` to `mcp-evalserver --stdio`, reading one answer per request as it comes,
    then ends its input; the answers and the modules it imported by its exit."""
    command = [sys.executable, "-X", "importtime", *server_command(state_dir, "--stdio")[1:]]
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    answers = []
    with anyio.fail_after(120):
        async with await anyio.open_process(command, env=environment) as server:
            assert server.stdin is not None
            assert server.stdout is not None
            assert server.stderr is not None
            stdout = BufferedByteReceiveStream(server.stdout)
            errors = bytearray()

            async def read_stderr() -> None:
                assert server.stderr is not None
                async for chunk in server.stderr:
                    errors.extend(chunk)

            async with anyio.create_task_group() as group:
                group.start_soon(read_stderr)
                for message in messages:
                    await server.stdin.send(json.dumps(message).encode() + b"\n")
                    if "id" in message:
                        answers.append(json.loads(await stdout.receive_until(b"\n", 1 << 24)))
                await server.stdin.aclose()
                assert await server.wait() == 0, errors.decode(errors="replace")
    return answers, imported(errors.decode(errors="replace"))


async def test_the_first_answer_imports_neither_the_engine_nor_the_tools(tmp_path: Path) -> None:
    answers, modules = await serve(tmp_path, [initialize_request("first-answer")])

    result = answers[0]["result"]
    assert result["serverInfo"]["name"] == "mcp-evalserver"
    assert {"tools", "resources", "logging", "completions"} <= set(result["capabilities"])
    assert "start_campaign" in result["instructions"]
    assert "mcp.server.mcpserver" in modules, "the detector sees what was imported"
    ours = {m for m in modules if m.startswith("mcp_evalserver")}
    assert ours - FIRST_ANSWER_NEEDS == set()


async def test_the_next_message_loads_every_tool_and_the_service(tmp_path: Path) -> None:
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    answers, modules = await serve(
        tmp_path, [initialize_request("first-answer"), initialized, listing]
    )

    names = {tool["name"] for tool in answers[1]["result"]["tools"]}
    fixture = Path(__file__).parent / "fixtures" / "surface-09c052b.json"
    assert names == {tool["name"] for tool in json.loads(fixture.read_text())["tools"]}
    # What the first answer did without, seen by the same detector.
    assert {"mcp_evalserver.server.service", "mcp_evalserver.spec.campaign"} <= modules
    assert "mcp_evalserver.server.mcp_app.campaign_tools" in modules
