"""Cost and budget through the MCP tools: an external agent reports its model calls, the
budget stops the campaign, `campaign_status` says so, and `resume` with a larger one finishes."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_evalserver.server.mcp_app import create_server
from tests.server.helpers import MODES, answer_spec
from testsupport.servers import call, call_error

pytestmark = pytest.mark.anyio


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def answer_one(client: Client, campaign_id: str, cost: float) -> str:
    """Claims a trajectory, reports `cost` of model calls for it, submits the right answer."""
    claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=10)
    reported = await call(
        client,
        "report_usage",
        claim_id=claim["claim_id"],
        model="its-model",
        input_tokens=1200,
        output_tokens=80,
        cost_usd=cost,
    )
    assert (reported["cost_usd"], reported["priced_by"]) == (cost, "provider")
    answer = str(int(claim["task_id"][1:]) ** 2)
    # Once the budget is spent the trajectory has ended: its claim is gone.
    await client.call_tool("submit", {"claim_id": claim["claim_id"], "answer": answer})
    return str(claim["trajectory_id"])


async def test_the_budget_stops_the_campaign_and_a_resume_with_a_larger_one_finishes_it(
    tmp_path: Path, mode: str
) -> None:
    spec = answer_spec(3, agent="external")
    spec["limits"] |= {"concurrency": 1, "budget_usd": 0.75}
    async with Client(create_server(tmp_path), mode=mode) as client:
        started = await call(client, "start_campaign", spec=spec)
        campaign_id = started["campaign_id"]
        assert started["budget_usd"] == 0.75
        with anyio.fail_after(60):
            await answer_one(client, campaign_id, 0.5)
            await answer_one(client, campaign_id, 0.5)  # spends the budget: stopped there
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=20)
        assert status["status"] == "finished"
        assert status["outcomes"] == {"budget_exhausted": 2, "resolved": 1}
        assert (status["spent_usd"], status["cost_usd"], status["budget_exhausted"]) == (
            1.0,
            1.0,
            2,
        )
        assert status["pass_rate"] == 1.0, "stopped trajectories are not graded"
        assert "budget_usd larger than $1.0000" in status["next_step"]
        refused = await call_error(client, "resume", campaign_id=campaign_id)
        assert "resume with a budget_usd larger than that" in refused
        too_small = await call_error(client, "resume", campaign_id=campaign_id, budget_usd=0.9)
        assert "not more than the $1.0000" in too_small

        resumed = await call(client, "resume", campaign_id=campaign_id, budget_usd=5.0)
        assert resumed["budget_usd"] == 5.0
        with anyio.fail_after(60):
            again = {await answer_one(client, campaign_id, 0.25) for _ in range(2)}
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=20)

    assert again == {"t2@0", "t3@0"}
    assert status["outcomes"] == {"resolved": 3}
    assert status["cost_usd"] == 1.5
    assert status["cost_per_resolved_usd"] == 0.5
