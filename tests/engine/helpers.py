"""Small builders shared by the engine tests."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from mcp_evalserver.agents.base import Agent
from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter
from mcp_evalserver.engine.records import (
    CheckpointKept,
    RescoreRequested,
    RetryRequested,
    ScoringFailed,
    ScoringStarted,
    TrajectoryBranched,
)
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.spec.agents import OracleAgentConfig
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task
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
    state_dir: Path,
    spec: CampaignSpec,
    agent: Agent | None = None,
    scorer: Scorer | None = None,
    sandboxes: SandboxPool | None = None,
) -> tuple[CampaignRunner, CampaignState]:
    store = CampaignStore(state_dir)
    campaign_id = await store.create(spec)
    runner = CampaignRunner(store, campaign_id, agent=agent, scorer=scorer, sandboxes=sandboxes)
    return runner, await runner.run()


def ledger_ran_each_once(runner: CampaignRunner, state: CampaignState) -> list[dict[str, Any]]:
    """The campaign's ledger records, once checked that every trajectory was generated and
    scored exactly once."""
    records = [
        json.loads(line) for line in (runner.directory / LEDGER_FILE).read_text().splitlines()
    ]
    for kind in ("generated", "scored"):
        runs = Counter(r["trajectory"] for r in records if r["kind"] == kind)
        assert sorted(runs) == sorted(state.trajectories), kind
        assert set(runs.values()) == {1}, kind
    return records


def outcomes(state: CampaignState) -> dict[str, str | None]:
    return {tid: t.outcome for tid, t in state.trajectories.items()}


async def campaign_of_every_kind(state_dir: Path) -> CampaignRunner:
    """A real campaign whose ledger holds most kinds of record: samples, branches of branches,
    a kept checkpoint, a rescore with another scorer, an infrastructure failure and its retry.

    It ends unfinished (the retried trajectory waits to be scored again).
    """
    spec = spec_of(numbered_tasks(3), samples=2).model_copy(update={"agent": OracleAgentConfig()})
    runner, _ = await run_campaign(state_dir, spec)
    directory, campaign_id = runner.directory, runner.campaign_id
    async with await LedgerWriter.open(directory, campaign_id) as ledger:
        for branch, parent in (("t1@0.1", "t1@0"), ("t1@0.2", "t1@0"), ("t1@0.1.1", "t1@0.1")):
            await ledger.append(
                TrajectoryBranched(trajectory=branch, parent=parent, checkpoint="cp1")
            )
        await ledger.append(
            CheckpointKept(checkpoint="cp1", trajectories=["t1@0.1"], start_missing="gone")
        )
    await CampaignRunner(runner.store, campaign_id).run()
    async with await LedgerWriter.open(directory, campaign_id) as ledger:
        await ledger.append(
            RescoreRequested(trajectories=["t1@0.1", "t2@1"], scorer={"type": "exact"})
        )
    await CampaignRunner(runner.store, campaign_id).run()
    async with await LedgerWriter.open(directory, campaign_id) as ledger:
        await ledger.append(RescoreRequested(trajectories=["t3@0"]))
        await ledger.append(ScoringStarted(trajectory="t3@0"))
        error = {"type": "SandboxUnavailable", "message": "the engine went away"}
        await ledger.append(
            ScoringFailed(trajectory="t3@0", outcome="infra_error", final=True, error=error)
        )
        await ledger.append(RetryRequested(trajectories=["t3@0", "t1@0.2"]))
    return runner
