"""`plan` from pilot campaigns: the CLI command and the MCP tool over real ledgers."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.planning import build_plan, render_plan_markdown
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.server.mcp_app import create_server
from tests.engine.helpers import run_campaign, spec_of
from tests.scoring.test_report_statistics import RightOnSomeRepositories, repository_tasks
from testsupport.servers import call

pytestmark = pytest.mark.anyio


async def pilots(state_dir: Path) -> tuple[str, str]:
    """Two campaigns on 30 tasks in 25 repositories, 2 samples each; B right on more tasks."""
    spec = spec_of(repository_tasks(30, repositories=25), samples=2)
    with anyio.fail_after(60):
        runner_a, _ = await run_campaign(state_dir, spec, RightOnSomeRepositories(5, 2))
        runner_b, _ = await run_campaign(state_dir, spec, RightOnSomeRepositories(5, 3))
    return runner_a.campaign_id, runner_b.campaign_id


async def test_plan_answers_tasks_by_samples_and_what_the_pilot_detects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = await pilots(tmp_path)
    argv = ["--state-dir", str(tmp_path), "plan", a, b, "--delta", "0.1", "--format", "json"]
    assert await anyio.to_thread.run_sync(main, argv) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["pilot"] == [a, b]
    assert plan["cluster_field"] == "repo"
    assert (plan["delta"], plan["power"], plan["alpha"]) == (0.1, 0.8, 0.05)
    # Every sample of a task agrees: nothing varies within a task, samples do not help.
    assert plan["components"]["within_task"] == 0.0
    tasks = {o["samples_per_task"]: o["tasks"] for o in plan["options"]}
    assert tasks[1] == tasks[16] > 30
    assert plan["samples_needed_with_pilot_tasks"] is None
    assert plan["detectable_difference"] > 0.1
    text = render_plan_markdown(plan)
    assert "# Plan: detect 10.0 points at 80% power (alpha 0.05)" in text
    assert "no number of samples per task is enough" in text


async def test_one_pilot_campaign_plans_under_a_stated_assumption(tmp_path: Path) -> None:
    a, _ = await pilots(tmp_path)
    plan = build_plan(CampaignStore(tmp_path).load(a), delta=0.2)
    assert plan["components"]["correlation"] is None
    assert any("uncorrelated" in note for note in plan["notes"])
    with pytest.raises(InvalidInput, match="delta"):
        build_plan(CampaignStore(tmp_path).load(a), delta=0.0)


async def test_the_plan_tool_gives_the_same_plan_with_its_markdown(tmp_path: Path) -> None:
    a, b = await pilots(tmp_path)
    async with Client(create_server(tmp_path)) as client:
        plan = await call(client, "plan_sample_size", campaign_id=a, campaign_b=b, delta=0.1)
        missing = await client.call_tool("plan_sample_size", {"campaign_id": "nope"})
    store = CampaignStore(tmp_path)
    expected = build_plan(store.load(a), store.load(b), delta=0.1)
    assert {k: v for k, v in plan.items() if k != "markdown"} == expected
    assert plan["markdown"] == render_plan_markdown(expected)
    assert missing.is_error
