"""Pages of trajectories in every phase render: pending, failed by the agent, failed by the
infrastructure, resolved; a trajectory id with a slash reaches its page."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx2
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.submission import Submission
from tests.dashboard.helpers import TOKEN, dashboard_server

pytestmark = pytest.mark.anyio


class Mixed(Agent):
    """Task `ok/1` is answered, `boom` raises, `infra` fails in the infrastructure."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        if context.task.id == "boom":
            raise ValueError("the agent broke <b>here</b>")
        if context.task.id == "infra":
            raise InfrastructureError("the sandbox went away")
        return Submission(answer=context.task.answer)


async def test_every_phase_of_a_trajectory_has_a_page(tmp_path: Path) -> None:
    tasks = [
        {"id": name, "prompt": f"prompt of {name}", "answer": "1"}
        for name in ("ok/1", "boom", "infra")
    ]
    spec = CampaignSpec.model_validate(
        {"name": "mixed", "tasks": tasks, "limits": {"max_attempts": 1, "retry_base_delay_s": 0}}
    )
    store = CampaignStore(tmp_path)
    await store.create(spec, "ran")
    await CampaignRunner(store, "ran", agent=Mixed()).run()
    await store.create(spec, "never-ran")
    bearer = {"authorization": f"Bearer {TOKEN}"}
    with anyio.fail_after(30):
        async with dashboard_server(tmp_path) as base, httpx2.AsyncClient(base_url=base) as client:
            expected = {
                "ran/trajectories/ok/1@0": "resolved",
                "ran/trajectories/boom@0": "the agent broke &lt;b&gt;here&lt;/b&gt;",
                "ran/trajectories/infra@0": "the sandbox went away",
                "never-ran/trajectories/boom@0": "pending",
            }
            for path, text in expected.items():
                response = await client.get(f"/campaigns/{path}", headers=bearer)
                assert response.status_code == 200, path
                assert text in response.text, path
            campaign = await client.get("/campaigns/ran", headers=bearer)
            assert 'href="/campaigns/ran/trajectories/ok/1%400"' in campaign.text
            missing = await client.get("/campaigns/ran/trajectories/nope@0", headers=bearer)
            assert missing.status_code == 404
            assert "has no trajectory" in missing.text
