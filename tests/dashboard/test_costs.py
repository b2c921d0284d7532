"""The dashboard shows what a campaign cost: in all, per task, per trajectory, and its budget."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.submission import ModelUsage, Submission
from tests.dashboard.helpers import TOKEN, dashboard_server

pytestmark = pytest.mark.anyio


class Paying(Agent):
    """Each trajectory makes one model call that its provider says cost $0.25."""

    meters_calls = True

    async def generate(self, context: TrajectoryContext) -> Submission:
        assert context.meter is not None
        usage = ModelUsage(model="m", input_tokens=1000, output_tokens=50, cost_usd=0.25)
        await context.meter(usage, "agent")
        return Submission(answer=context.task.answer)


async def test_the_campaign_and_trajectory_pages_show_cost_and_budget(tmp_path: Path) -> None:
    tasks = [{"id": f"t{n}", "prompt": "?", "answer": "1"} for n in range(4)]
    spec = CampaignSpec.model_validate(
        {"name": "paid", "tasks": tasks, "limits": {"concurrency": 1, "budget_usd": 0.6}}
    )
    store = CampaignStore(tmp_path)
    await store.create(spec, "paid")
    state = await CampaignRunner(store, "paid", agent=Paying()).run()
    # t0 and t1 paid $0.25 each; t2's call reached the budget (stopped at its meter); t3
    # never started.
    assert [t.outcome for t in state.trajectories.values()] == [
        "resolved",
        "resolved",
        "budget_exhausted",
        "budget_exhausted",
    ]
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(30):
        async with dashboard_server(tmp_path) as base, httpx2.AsyncClient(base_url=base) as client:
            page = (await client.get("/campaigns/paid", headers=bearer)).text
            trajectory = (
                await client.get("/campaigns/paid/trajectories/t2@0", headers=bearer)
            ).text

    assert 'id="campaign-cost"' in page
    assert "$0.7500" in page, "the campaign's cost"
    assert "$0.3750 per resolved" in page
    assert "$0.7500 of $0.6000" in page
    assert "2 trajectory(ies) stopped at the budget" in page
    assert '<td class="num">$0.2500</td>' in page, "a task's cost"
    assert 'id="trajectory-cost">$0.2500' in trajectory
    assert "budget_exhausted" in trajectory
