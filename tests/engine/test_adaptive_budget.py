"""A budget and adaptive sampling together: a trajectory the budget stopped is no outcome, so
an adaptive campaign its budget stops mid-round decides no further round, is finished (stopped
at its budget), and a resume with a larger budget runs what it stopped and then goes on to the
plan an unstopped run makes, nothing generated or scored twice.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.engine.records import (
    BudgetExhausted,
    BudgetSet,
    Generated,
    ModelUsageRecorded,
    SamplesPlanned,
    Scored,
)
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.sampling import next_decision
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.spec.submission import ModelUsage, Submission
from tests.engine.helpers import run_campaign
from tests.engine.test_adaptive_sampling import (
    adaptive,
    decisions,
    flaky_scorer,
    ledger_records,
    spec,
)
from tests.plugins.scripted import ScriptedAgent

pytestmark = pytest.mark.anyio

#: What each trajectory's one model call costs (the provider's figure).
CALL_USD = 0.01
TASKS = 10


class MeteredAgent(ScriptedAgent):
    """The scripted agent, paying for one metered model call before it answers."""

    meters_calls = True

    def __init__(self) -> None:
        super().__init__({})

    async def generate(self, context: TrajectoryContext) -> Submission:
        assert context.meter is not None
        await context.meter(ModelUsage(model="scripted", cost_usd=CALL_USD), "agent")
        return await super().generate(context)


async def test_a_budget_stops_an_adaptive_campaign_mid_round_and_a_larger_one_finishes_the_plan(
    tmp_path: Path,
) -> None:
    campaign = spec(adaptive(0.12), tasks=TASKS, concurrency=1)
    reference, unstopped = await run_campaign(
        tmp_path / "ref", campaign, MeteredAgent(), flaky_scorer()
    )
    plan = decisions(reference.store.state_dir, reference.campaign_id)
    assert len(plan) >= 3  # the first round, at least one more, and the stop
    first_round = plan[0]["added"]
    assert sum(first_round.values()) >= 2
    # Enough for the first samples and half the first round: it stops in that round.
    start = TASKS * 2
    budget = CALL_USD * (start + sum(first_round.values()) // 2) + CALL_USD / 2

    limited = campaign.model_copy(
        update={"limits": campaign.limits.model_copy(update={"budget_usd": budget})}
    )
    runner, stopped = await run_campaign(tmp_path / "run", limited, MeteredAgent(), flaky_scorer())
    state_dir, cid = runner.store.state_dir, runner.campaign_id
    assert stopped.over_budget
    assert stopped.budget_exhausted
    round_one = {t.id for t in stopped.trajectories.values() if t.sample >= 2}
    assert round_one
    assert set(stopped.budget_exhausted) <= round_one
    assert any(
        t.outcome not in (None, "budget_exhausted")
        for t in stopped.trajectories.values()
        if t.id in round_one
    )
    # No further round was decided on the outcomes the budget cut short, and nothing stopped.
    assert decisions(state_dir, cid) == plan[:1]
    assert stopped.sampling is not None
    assert stopped.sampling.stopped is None
    assert next_decision(stopped) is None
    # Finished as a fixed campaign its budget stops is: nothing to resume by itself.
    assert stopped.status == "finished"
    assert not stopped.interrupted
    assert stopped.describe_status().startswith("stopped at its budget")
    # A stopped trajectory is no attempt at its task.
    report = build_report(stopped)
    graded = sum(row["graded"] for row in report["tasks"].values())
    assert graded == len(stopped.trajectories) - len(stopped.budget_exhausted)

    resumed = await CampaignRunner(
        CampaignStore(state_dir),
        cid,
        agent=MeteredAgent(),
        scorer=flaky_scorer(),
        budget_usd=100.0,
    ).run()

    assert resumed.status == "finished"
    assert resumed.sampling is not None
    assert unstopped.sampling is not None
    assert resumed.sampling.stopped is not None
    assert unstopped.sampling.stopped is not None
    resumed_stop = {k: v for k, v in resumed.sampling.stopped.items() if k != "ts"}
    assert resumed_stop == {k: v for k, v in unstopped.sampling.stopped.items() if k != "ts"}
    assert decisions(state_dir, cid) == plan
    assert resumed.trajectories.keys() == unstopped.trajectories.keys()
    assert not resumed.budget_exhausted
    outcomes = {tid: t.outcome for tid, t in resumed.trajectories.items()}
    assert outcomes == {tid: t.outcome for tid, t in unstopped.trajectories.items()}
    records = ledger_records(state_dir, cid)
    # Nothing generated or scored twice.
    generated = Counter(r.trajectory for r in records if isinstance(r, Generated))
    scored = Counter(r.trajectory for r in records if isinstance(r, Scored))
    assert set(generated.values()) == set(scored.values()) == {1}
    assert len(scored) == len(resumed.trajectories)
    # The resume raised the budget and let exactly the stopped trajectories run again.
    (raised,) = [r for r in records if isinstance(r, BudgetSet)]
    assert raised.budget_usd == 100.0
    assert sorted(raised.trajectories) == sorted(stopped.budget_exhausted)
    assert len([r for r in records if isinstance(r, BudgetExhausted)]) == len(raised.trajectories)
    # Every plan record comes after the budget's: the second round waited for the resume.
    kinds = [type(r) for r in records]
    later_rounds = [i for i, r in enumerate(records) if isinstance(r, SamplesPlanned)][1:]
    assert later_rounds
    assert min(later_rounds) > kinds.index(BudgetSet)
    # What was paid is counted: the unstopped run's calls, and the one call (concurrency 1)
    # the budget stopped after it was paid.
    paid = [r for r in records if isinstance(r, ModelUsageRecorded)]
    assert len(paid) == len(unstopped.trajectories) + 1
    assert resumed.spend.priced_usd == pytest.approx(CALL_USD * len(paid))
