"""Evaluation sets over MCP (issue 42), through the SDK's client and a real server over stdio:
start_eval_set runs one campaign per agent, the leaderboard resource has the campaigns' own
figures, a finished set extended with an agent runs only that agent's trajectories,
cancel_eval_set stops a running set that start_eval_set then resumes, and a wrong set is
refused with its field named before anything is recorded.

Most tests use answer-only tasks (no sandbox); one runs a set started over MCP on repository
tasks (local backend) and counts, from the sandbox pool's own log, each task's instance closed
once, after both agents: what the server's shared pool saves (the engine's run is proven on
local and docker in tests/engine/test_eval_sets.py).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.ledger import LEDGER_FILE
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.submission import Submission
from tests.server.helpers import answer_spec, repo_spec
from testsupport.servers import call, call_error, http_client, http_server, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def set_spec(count: int, agents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    spec = answer_spec(count, **fields)
    del spec["agent"]
    return {**spec, "name": "trio", "agents": agents, "samples": 2}


class Reader(Agent):
    """Reads the task's file in its workspace (so the task's instance is used), submits it."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        return Submission(answer=await workspace.read_file("calc.py"))


def reader(options: dict[str, Any]) -> Agent:
    return Reader()


async def leaderboard(client: Client, set_id: str) -> str:
    result = await client.read_resource(f"set://{set_id}/leaderboard")
    return "".join(getattr(content, "text", "") for content in result.contents)


def ledger(tmp_path: Path, campaign_id: str) -> bytes:
    return (tmp_path / "state" / "campaigns" / campaign_id / LEDGER_FILE).read_bytes()


async def wait_for(client: Client, campaign_id: str) -> dict[str, Any]:
    return await call(client, "campaign_status", campaign_id=campaign_id, wait_s=60)


async def test_a_set_started_over_mcp_runs_each_agent_and_its_leaderboard_has_their_figures(
    tmp_path: Path,
) -> None:
    agents = {"oracle": {"type": "oracle"}, "noop": {"type": "noop"}}
    with anyio.fail_after(120):
        async with stdio_client(tmp_path / "state") as client:
            started = await call(client, "start_eval_set", spec=set_spec(3, agents), set_id="trio")
            assert started["set_id"] == "trio"
            assert set(started["agents"]) == {"oracle", "noop"}
            statuses = {
                agent: await wait_for(client, row["campaign_id"])
                for agent, row in started["agents"].items()
            }
            assert {a: s["status"] for a, s in statuses.items()} == {
                "oracle": "finished",
                "noop": "finished",
            }
            assert statuses["oracle"]["resolved"] == 6
            assert statuses["noop"]["resolved"] == 0
            board = await leaderboard(client, "trio")
            ledgers = {agent: ledger(tmp_path, s["campaign_id"]) for agent, s in statuses.items()}

            # A finished set extended with a third agent runs only that agent's trajectories.
            extended = await call(
                client,
                "start_eval_set",
                spec=set_spec(3, {**agents, "again": {"type": "oracle"}}),
                set_id="trio",
            )
            assert set(extended["agents"]) == {"oracle", "noop", "again"}
            assert not extended["agents"]["oracle"]["active"]
            assert not extended["agents"]["noop"]["active"]
            again = await wait_for(client, extended["agents"]["again"]["campaign_id"])
            assert again["status"] == "finished"
            assert again["resolved"] == 6
            # Their ledgers got not one record more: nothing of theirs ran again.
            assert {a: ledger(tmp_path, s["campaign_id"]) for a, s in statuses.items()} == ledgers
            extended_board = await leaderboard(client, "trio")
    assert "# Evaluation set trio" in board
    oracle_row = next(line for line in board.splitlines() if line.startswith("| oracle |"))
    noop_row = next(line for line in board.splitlines() if line.startswith("| noop |"))
    assert "| 100.0% " in oracle_row
    assert "| 6/6 |" in oracle_row
    assert "| finished |" in oracle_row
    assert "| 0.0% " in noop_row
    assert "| 0/6 |" in noop_row
    assert "| noop | oracle |" in board or "| oracle | noop |" in board
    assert "| again |" in extended_board


async def test_cancel_eval_set_stops_a_running_set_and_start_eval_set_resumes_it(
    tmp_path: Path,
) -> None:
    # An external agent's trajectories wait for a client to claim them: the set keeps running.
    agents = {"ext": {"type": "external"}, "oracle": {"type": "oracle"}}
    with anyio.fail_after(120):
        async with stdio_client(tmp_path / "state") as client:
            started = await call(client, "start_eval_set", spec=set_spec(2, agents), set_id="s")
            assert started["agents"]["ext"]["active"]
            await wait_for(client, started["agents"]["oracle"]["campaign_id"])

            # Agents cannot join a running set (its pool is already shared out).
            refused = await call_error(
                client,
                "start_eval_set",
                spec=set_spec(2, {**agents, "late": {"type": "noop"}}),
                set_id="s",
            )
            assert "late" in refused
            assert "cancel_eval_set" in refused

            cancelled = await call(client, "cancel_eval_set", set_id="s")
            assert cancelled["agents"]["ext"]["status"] == "cancelled"
            assert not cancelled["agents"]["ext"]["active"]
            assert cancelled["agents"]["oracle"]["status"] == "finished"
            again = await call_error(client, "cancel_eval_set", set_id="s")
            assert "not running" in again
            assert "start_eval_set" in again

            resumed = await call(client, "start_eval_set", set_id="s")
            assert resumed["agents"]["ext"]["active"]
            assert not resumed["agents"]["oracle"]["active"]
            # Resuming a running set changes nothing.
            assert (await call(client, "start_eval_set", set_id="s"))["agents"]["ext"]["active"]
            await call(client, "cancel_eval_set", set_id="s")


async def test_a_wrong_set_is_refused_over_mcp_with_its_field_named_and_nothing_recorded(
    tmp_path: Path,
) -> None:
    agents = {"oracle": {"type": "oracle"}, "noop": {"type": "noop"}}
    state = tmp_path / "state"
    with anyio.fail_after(120):
        async with stdio_client(state) as client:
            assert "agents" in await call_error(client, "start_eval_set", spec=set_spec(2, {}))
            assert "agent name 'a b'" in await call_error(
                client, "start_eval_set", spec=set_spec(2, {"a b": {"type": "oracle"}})
            )
            assert "agent 'bad'" in await call_error(
                client, "start_eval_set", spec=set_spec(2, {**agents, "bad": {"type": "nope"}})
            )
            both = {**set_spec(2, agents), "agent": {"type": "oracle"}}
            assert "not `agent`" in await call_error(client, "start_eval_set", spec=both)
            assert "start_campaign" in await call_error(
                client, "start_eval_set", spec=answer_spec(2)
            )
            assert "set_id" in await call_error(client, "start_eval_set")
            missing = await call_error(client, "start_eval_set", set_id="nowhere")
            assert "no evaluation set 'nowhere'" in missing
            listed = await call(client, "list_campaigns")
            assert listed["total"] == 0

            started = await call(client, "start_eval_set", spec=set_spec(2, agents), set_id="s")
            for row in started["agents"].values():
                await wait_for(client, row["campaign_id"])
            # Extending with other tasks or another scorer would compare unlike with unlike.
            other_tasks = await call_error(
                client,
                "start_eval_set",
                spec=set_spec(3, {"more": {"type": "oracle"}}),
                set_id="s",
            )
            assert "agent 'more'" in other_tasks
            assert "other tasks" in other_tasks
            other_scorer = await call_error(
                client,
                "start_eval_set",
                spec=set_spec(
                    2, {"more": {"type": "oracle"}}, scorer={"type": "regex", "pattern": "4"}
                ),
                set_id="s",
            )
            assert "agent 'more'" in other_scorer
            assert "other scorer" in other_scorer
            assert (await call(client, "list_campaigns"))["total"] == 2
    assert sorted(p.name for p in (state / "sets").iterdir()) == ["s.json"]


@pytest.mark.root
async def test_a_set_over_mcp_shares_each_tasks_instance_and_closes_it_after_the_last_agent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = repo_spec(tmp_path / "repos", 3, concurrency=2)
    del spec["agent"]
    agent = {"type": "python", "factory": "tests.server.test_eval_set_tools:reader"}
    spec.update(name="pair", samples=2, agents={"first": agent, "second": agent})
    caplog.set_level(logging.INFO, logger="mcp_evalserver.runtime.sandboxes")
    with anyio.fail_after(120):
        async with Client(create_server(tmp_path / "state")) as client:
            started = await call(client, "start_eval_set", spec=spec, set_id="pair")
            for row in started["agents"].values():
                assert (await wait_for(client, row["campaign_id"]))["done"] == 6
    closed = [r.getMessage() for r in caplog.records if r.getMessage().startswith("instance ")]
    # One instance per task, closed once (released: every agent was done with it), never
    # evicted and provisioned again for the second agent.
    assert len(closed) == 3, closed
    assert all(message.endswith(" released") for message in closed), closed
    assert len(set(closed)) == 3, closed


async def test_a_set_cannot_smuggle_a_plugin_or_a_program_past_an_http_servers_privileges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An HTTP client may not make the server import a module or run a program: a set is one
    # more spec, checked agent by agent, for a new set and for an extension alike.
    imported, ran = tmp_path / "imported", tmp_path / "ran"
    monkeypatch.setenv("MCP_EVALSERVER_TEST_IMPORT_MARKER", str(imported))
    plugin = {"type": "python", "factory": "tests.plugins.import_marker:agent"}
    program = {"type": "command", "command": ["touch", str(ran)]}
    allowed = {"oracle": {"type": "oracle"}, "noop": {"type": "noop"}}
    state = tmp_path / "state"
    with anyio.fail_after(120):
        async with http_server(state) as url, http_client(url) as client:
            errors = [
                await call_error(
                    client, "start_eval_set", spec=set_spec(2, {**allowed, "p": plugin})
                ),
                await call_error(
                    client, "start_eval_set", spec=set_spec(2, {**allowed, "c": program})
                ),
            ]
            assert (await call(client, "list_campaigns"))["total"] == 0
            started = await call(client, "start_eval_set", spec=set_spec(2, allowed), set_id="s")
            for row in started["agents"].values():
                await wait_for(client, row["campaign_id"])
            errors.append(
                await call_error(
                    client, "start_eval_set", spec=set_spec(2, {"p": plugin}), set_id="s"
                )
            )
            assert (await call(client, "list_campaigns"))["total"] == 2
    for error in errors:
        assert "--allow-plugins" in error, error
    assert "agent 'p'" in errors[0]
    assert "agent 'c'" in errors[1]
    assert not imported.exists(), "the server imported the client's module"
    assert not ran.exists(), "the server ran the client's program"
    assert json.loads((state / "sets" / "s.json").read_text())["campaigns"].keys() == allowed.keys()
