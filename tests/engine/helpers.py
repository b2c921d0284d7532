"""Small builders shared by the engine tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp_evalserver.agents.base import Agent
from mcp_evalserver.campaigns import CampaignRunner, CampaignStore
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.spec import CampaignSpec, Limits, Task
from mcp_evalserver.state import CampaignState
from tests.plugins.scripted import expected_answer


def numbered_tasks(count: int, **fields: Any) -> list[Task]:
    """Tasks t1..tN whose gold answer is N squared."""
    return [
        Task(id=f"t{n}", prompt=f"{n} squared?", answer=expected_answer(f"t{n}"), **fields)
        for n in range(1, count + 1)
    ]


def spec_of(tasks: list[Task], samples: int = 1, **limits: Any) -> CampaignSpec:
    limits.setdefault("retry_base_delay_s", 0.0)
    return CampaignSpec(name="test", tasks=tasks, samples=samples, limits=Limits(**limits))


async def run_campaign(
    state_dir: Path, spec: CampaignSpec, agent: Agent | None = None, scorer: Scorer | None = None
) -> tuple[CampaignRunner, CampaignState]:
    store = CampaignStore(state_dir)
    campaign_id = await store.create(spec)
    runner = CampaignRunner(store, campaign_id, agent=agent, scorer=scorer)
    return runner, await runner.run()


def outcomes(state: CampaignState) -> dict[str, str | None]:
    return {tid: t.outcome for tid, t in state.trajectories.items()}
