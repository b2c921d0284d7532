"""The optional MCP capabilities IDE clients use: logging, completions, tool annotations.

Logging has two eras. Handshake-era clients call `logging/setLevel` and then get the server's
campaign events on their connection at that level; 2026-07-28 has no `logging/setLevel` (the
SDK answers "method not found") and clients opt in per request (`Client(log_level=...)`), so
the events of a campaign ride the `campaign_status` call that follows it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from mcp import Client, MCPError
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types import (
    DiscoverResult,
    LoggingMessageNotificationParams,
    ResourceTemplateReference,
    ServerCapabilities,
)

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.server.mcp_app import create_server, create_trajectory_server
from mcp_evalserver.server.set_tools import LEADERBOARD_URI
from mcp_evalserver.server.trajectory.scoped import ScopedTrajectory
from tests.server.helpers import MODES, answer_spec
from testsupport.servers import call, http_client, http_server, stdio_client

pytestmark = pytest.mark.anyio

REPORT = ResourceTemplateReference(uri="campaign://{campaign_id}/report")
TRAJECTORY = ResourceTemplateReference(uri="campaign://{campaign_id}/trajectories/{trajectory_id}")
TASK = ResourceTemplateReference(uri="campaign://{campaign_id}/tasks/{task_id}")


class Logs:
    """The log notifications a client received; `stopped` is set by a campaign's last one."""

    def __init__(self) -> None:
        self.received: list[LoggingMessageNotificationParams] = []
        self.stopped = anyio.Event()

    async def __call__(self, params: LoggingMessageNotificationParams) -> None:
        self.received.append(params)
        if isinstance(params.data, dict) and params.data.get("kind") == "stopped":
            self.stopped.set()

    def messages(self) -> list[tuple[str, str]]:
        return [(p.level, str(cast(dict[str, Any], p.data)["message"])) for p in self.received]


@asynccontextmanager
async def connected(
    transport: str, state_dir: Path, mode: str, logs: Logs
) -> AsyncIterator[Client]:
    # A 2026-07-28 client asks for logs on each request; `log_level` is that default.
    options: dict[str, Any] = {"logging_callback": logs, "log_level": "info"}
    if transport == "stdio":
        async with stdio_client(state_dir, mode, **options) as client:
            yield client
        return
    workers = 4 if transport == "http-workers4" else 1
    async with (
        http_server(state_dir, workers=workers) as url,
        http_client(url, mode=mode, **options) as client,
    ):
        yield client


async def capabilities(client: Client, mode: str) -> ServerCapabilities:
    if mode == "legacy":
        return client.server_capabilities
    # A client told the version adopts it without asking: ask `server/discover` itself.
    discovered = await client.session.send_discover("2026-07-28")
    return DiscoverResult.model_validate(discovered).capabilities


async def follow_while_answering(
    client: Client, campaign_id: str, count: int, progressed: list[tuple[float, float | None]]
) -> dict[str, Any]:
    """Follows the campaign with campaign_status while acting as its external agent (each
    task's right answer), appending each progress notification to `progressed`; the
    trajectories start once the server is following."""
    following = anyio.Event()
    status: dict[str, Any] = {}

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.append((progress, total))
        following.set()

    async def follow() -> None:
        arguments = {"campaign_id": campaign_id, "wait_s": 60}
        result = await client.call_tool("campaign_status", arguments, progress_callback=progress)
        assert not result.is_error
        status.update(result.structured_content or {})

    async with anyio.create_task_group() as group:
        group.start_soon(follow)
        await following.wait()
        for _ in range(count):
            claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=10)
            answer = str(int(claim["task_id"][1:]) ** 2)
            await call(client, "submit", claim_id=claim["claim_id"], answer=answer)
    return status


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
# http-workers4: four processes on the port; a handshake-era session's GET stream (its log
# notifications) may land on a worker other than the session's, which passes it on.
@pytest.mark.parametrize("transport", ["stdio", "http", "http-workers4"])
async def test_log_levels_and_completions_are_answered_over_stdio_and_http(
    tmp_path: Path, transport: str, mode: str
) -> None:
    logs = Logs()
    connect: AbstractAsyncContextManager[Client] = connected(transport, tmp_path, mode, logs)
    with anyio.fail_after(90):
        async with connect as client:
            declared = await capabilities(client, mode)
            if mode == "legacy":
                with pytest.warns(MCPDeprecationWarning):
                    await client.set_logging_level("info")
            else:
                with pytest.warns(MCPDeprecationWarning), pytest.raises(MCPError) as refused:
                    await client.set_logging_level("info")
                assert "Method not found" in str(refused.value)
            spec = answer_spec(3, agent="external")
            await call(client, "start_campaign", spec=spec, campaign_id="squares")
            progressed: list[tuple[float, float | None]] = []
            status = await follow_while_answering(client, "squares", 3, progressed)
            # Over a connection the events come on their own; over a request, before its reply.
            await logs.stopped.wait()
            campaigns = await client.complete(REPORT, {"name": "campaign_id", "value": "sq"})
            trajectories = await client.complete(
                TRAJECTORY, {"name": "trajectory_id", "value": "t"}, {"campaign_id": "squares"}
            )
            tasks = await client.complete(
                TASK, {"name": "task_id", "value": "t2"}, {"campaign_id": "squares"}
            )
    assert declared.logging is not None
    assert declared.completions is not None
    assert (status["status"], status["resolved"]) == ("finished", 3)
    # No progress once the answer is ready: a final 3/3 just before the answer races the
    # request's end in the TypeScript SDK, which then drops a stdio session.
    assert progressed
    assert all(done < 3 for done, _ in progressed), progressed
    messages = logs.messages()
    for tid in ("t1@0", "t2@0", "t3@0"):
        assert ("info", f"squares: {tid} resolved") in messages
    assert messages[-1] == (
        "notice",
        "squares: finished, 3 of 3 trajectories resolved",
    )
    assert {p.level for p in logs.received} <= {"info", "notice", "warning", "error"}, (
        "nothing below the level asked for"
    )
    assert {p.logger for p in logs.received} == {"mcp-evalserver"}
    assert campaigns.completion.values == ["squares"]
    assert trajectories.completion.values == ["t1@0", "t2@0", "t3@0"]
    assert (tasks.completion.values, tasks.completion.total) == (["t2"], 1)


@pytest.mark.parametrize("mode", MODES)
async def test_a_lower_level_adds_every_step_and_an_unknown_campaign_completes_to_nothing(
    tmp_path: Path, mode: str
) -> None:
    logs = Logs()
    options: dict[str, Any] = {"logging_callback": logs, "log_level": "debug"}
    with anyio.fail_after(60):
        async with Client(create_server(tmp_path), mode=mode, **options) as client:
            if mode == "legacy":
                with pytest.warns(MCPDeprecationWarning):
                    await client.set_logging_level("debug")
            await call(
                client, "start_campaign", spec=answer_spec(2, agent="external"), campaign_id="c"
            )
            await follow_while_answering(client, "c", 2, [])
            await logs.stopped.wait()
            unknown = await client.complete(
                TRAJECTORY, {"name": "trajectory_id", "value": ""}, {"campaign_id": "nope"}
            )
            other = await client.complete(REPORT, {"name": "sample", "value": ""})
    assert ("debug", "c: t1@0 generated") in logs.messages()
    assert ("info", "c: t2@0 resolved") in logs.messages()
    assert unknown.completion.values == []
    assert other.completion.values == []


async def test_the_trajectory_and_task_resources_show_verdicts_and_never_the_answers(
    tmp_path: Path,
) -> None:
    async with Client(create_server(tmp_path)) as client:
        await call(client, "start_campaign", spec=answer_spec(2, samples=2), campaign_id="c")
        with anyio.fail_after(30):
            await call(client, "campaign_status", campaign_id="c", wait_s=20)
        templates = {
            t.uri_template for t in (await client.list_resource_templates()).resource_templates
        }
        trajectory = await client.read_resource("campaign://c/trajectories/t2@1")
        task = await client.read_resource("campaign://c/tasks/t2")
        with pytest.raises(MCPError) as missing:
            await client.read_resource("campaign://c/tasks/t9")
    assert templates == {REPORT.uri, TRAJECTORY.uri, TASK.uri, LEADERBOARD_URI}
    shown = json.loads(getattr(trajectory.contents[0], "text", ""))
    assert shown["outcome"] == "resolved"
    assert shown["sample"] == 1
    listed = json.loads(getattr(task.contents[0], "text", ""))
    assert [t["trajectory_id"] for t in listed["trajectories"]] == ["t2@0", "t2@1"]
    assert listed["resolved"] == 2
    for text in (json.dumps(shown), json.dumps(listed)):
        assert "2 squared" not in text, "no prompt"
        assert '"4"' not in text, "no gold answer"
    assert "has no task 't9'" in str(missing.value)


async def test_every_tool_of_both_servers_says_whether_it_reads_destroys_or_repeats(
    tmp_path: Path,
) -> None:
    scoped = ScopedTrajectory(cast(TrajectoryContext, None))
    hints: dict[str, tuple[bool | None, bool | None, bool | None]] = {}
    for server in (create_server(tmp_path), create_trajectory_server(scoped)):
        async with Client(server) as client:
            for tool in (await client.list_tools()).tools:
                a = tool.annotations
                assert a is not None, tool.name
                hints[tool.name] = (a.read_only_hint, a.destructive_hint, a.idempotent_hint)
    assert all(None not in three for three in hints.values()), hints
    assert hints["campaign_status"] == (True, False, True)
    assert hints["resume"] == (False, False, True)
    assert hints["sandbox_exec"] == (False, True, False)
    assert hints["write_file"] == (False, True, True)
    assert hints["start_campaign"] == (False, False, False)
