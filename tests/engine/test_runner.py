"""The campaign runner: limits under interleaving, retries, timeouts, cancellation, resume."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import numbered_tasks, outcomes, run_campaign, spec_of
from tests.plugins.scripted import ScriptedAgent, ScriptedScorer, expected_answer

pytestmark = pytest.mark.anyio


class GatedAgent(Agent):
    """Counts trajectories in flight (overall and per key) and holds them until released."""

    def __init__(self, full_at: int, key: str = "image") -> None:
        self.full_at = full_at
        self.key = key
        self.in_flight = 0
        self.max_in_flight = 0
        self.per_key: dict[str, int] = {}
        self.max_per_key: dict[str, int] = {}
        self.full = anyio.Event()
        self.release = anyio.Event()

    async def generate(self, context: TrajectoryContext) -> Submission:
        key = str(getattr(context.task, self.key))
        self.in_flight += 1
        self.per_key[key] = self.per_key.get(key, 0) + 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        self.max_per_key[key] = max(self.max_per_key.get(key, 0), self.per_key[key])
        if self.in_flight >= self.full_at:
            self.full.set()
        await self.release.wait()
        self.in_flight -= 1
        self.per_key[key] -= 1
        return Submission(answer=expected_answer(context.task.id))


async def _run_until_full_then_release(
    tmp_path: Path, agent: GatedAgent, runner_spec_tasks: int, **limits: int
) -> None:
    store = CampaignStore(tmp_path)
    tasks = numbered_tasks(runner_spec_tasks)
    for number, task in enumerate(tasks):
        task.image = f"img{number % 2}"
    campaign_id = await store.create(spec_of(tasks, **limits))
    runner = CampaignRunner(store, campaign_id, agent=agent)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run)
            await agent.full.wait()
            # Let every other trajectory that could start do so before we look.
            for _ in range(50):
                await anyio.lowlevel.checkpoint()
            assert agent.in_flight == agent.full_at
            agent.release.set()
    assert runner.state is not None
    assert runner.state.status == "finished"


async def test_the_global_limit_holds_under_interleaving(tmp_path: Path) -> None:
    agent = GatedAgent(full_at=3)
    await _run_until_full_then_release(tmp_path, agent, 12, concurrency=3, per_instance=100)
    assert agent.max_in_flight == 3


async def test_the_per_instance_limit_holds_under_interleaving(tmp_path: Path) -> None:
    agent = GatedAgent(full_at=4)
    await _run_until_full_then_release(tmp_path, agent, 12, concurrency=10, per_instance=2)
    assert agent.max_in_flight == 4
    assert agent.max_per_key == {"img0": 2, "img1": 2}


async def test_the_per_endpoint_limit_holds_for_agents_that_use_it(tmp_path: Path) -> None:
    class EndpointAgent(GatedAgent):
        async def generate(self, context: TrajectoryContext) -> Submission:
            async with context.limiters.endpoint("http://model"):
                return await super().generate(context)

    agent = EndpointAgent(full_at=2)
    await _run_until_full_then_release(
        tmp_path, agent, 8, concurrency=8, per_instance=8, per_endpoint=2
    )
    assert agent.max_in_flight == 2


async def test_scoring_starts_while_other_generations_still_run(tmp_path: Path) -> None:
    first_scored = anyio.Event()

    class WaitsForFirstScore(Agent):
        async def generate(self, context: TrajectoryContext) -> Submission:
            if context.task.id == "t2":
                await first_scored.wait()
            return Submission(answer=expected_answer(context.task.id))

    class SignalsScore(ScriptedScorer):
        async def score(self, context: ScoringContext) -> ScoreResult:
            result = await super().score(context)
            first_scored.set()
            return result

    with anyio.fail_after(10):
        _, state = await run_campaign(
            tmp_path, spec_of(numbered_tasks(2)), WaitsForFirstScore(), SignalsScore({})
        )
    assert outcomes(state) == {"t1@0": "resolved", "t2@0": "resolved"}


class FlakyInfrastructureAgent(Agent):
    def __init__(self, failures: dict[str, int], error: type[Exception]) -> None:
        self.failures = failures
        self.error = error
        self.calls: dict[str, int] = {}

    async def generate(self, context: TrajectoryContext) -> Submission:
        count = self.calls[context.trajectory_id] = self.calls.get(context.trajectory_id, 0) + 1
        if count <= self.failures.get(context.task.id, 0):
            raise self.error(f"engine hiccup {count}")
        return Submission(answer=expected_answer(context.task.id))


async def test_infrastructure_errors_are_retried_until_the_attempt_limit(tmp_path: Path) -> None:
    agent = FlakyInfrastructureAgent({"t1": 2, "t2": 5}, InfrastructureError)
    _, state = await run_campaign(
        tmp_path, spec_of(numbered_tasks(3), max_attempts=3), agent, ScriptedScorer({})
    )
    assert outcomes(state) == {"t1@0": "resolved", "t2@0": "infra_error", "t3@0": "resolved"}
    assert agent.calls == {"t1@0": 3, "t2@0": 3, "t3@0": 1}
    assert state.trajectories["t1@0"].attempts == 3
    assert state.trajectories["t2@0"].error == {
        "type": "InfrastructureError",
        "message": "engine hiccup 3",
    }


async def test_a_failing_agent_is_a_result_and_is_not_retried(tmp_path: Path) -> None:
    agent = FlakyInfrastructureAgent({"t1": 9}, ValueError)
    _, state = await run_campaign(tmp_path, spec_of(numbered_tasks(1)), agent)
    assert outcomes(state) == {"t1@0": "error"}
    assert agent.calls == {"t1@0": 1}


async def test_an_infrastructure_error_in_scoring_retries_scoring_only(tmp_path: Path) -> None:
    class FlakyScorer(ScriptedScorer):
        calls = 0

        async def score(self, context: ScoringContext) -> ScoreResult:
            FlakyScorer.calls += 1
            if FlakyScorer.calls == 1:
                raise InfrastructureError("grader container died")
            return await super().score(context)

    agent = FlakyInfrastructureAgent({}, InfrastructureError)
    _, state = await run_campaign(tmp_path, spec_of(numbered_tasks(1)), agent, FlakyScorer({}))
    assert outcomes(state) == {"t1@0": "resolved"}
    assert agent.calls == {"t1@0": 1}
    assert FlakyScorer.calls == 2
    assert state.trajectories["t1@0"].scoring_failures == 1


async def test_a_generation_past_its_timeout_is_a_timeout_result(tmp_path: Path) -> None:
    class Hangs(Agent):
        async def generate(self, context: TrajectoryContext) -> Submission:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    with anyio.fail_after(10):
        _, state = await run_campaign(
            tmp_path, spec_of(numbered_tasks(2), trajectory_timeout_s=0.05), Hangs()
        )
    assert outcomes(state) == {"t1@0": "timeout", "t2@0": "timeout"}
    assert state.trajectories["t1@0"].attempts == 1


async def test_a_scoring_past_its_timeout_is_a_timeout_result(tmp_path: Path) -> None:
    class HangingScorer(Scorer):
        async def score(self, context: ScoringContext) -> ScoreResult:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    with anyio.fail_after(10):
        _, state = await run_campaign(
            tmp_path,
            spec_of(numbered_tasks(1), scoring_timeout_s=0.05),
            ScriptedAgent({}),
            HangingScorer(),
        )
    assert outcomes(state) == {"t1@0": "timeout"}
    assert state.trajectories["t1@0"].submission is not None


async def test_cancelling_a_run_leaves_a_consistent_ledger_that_resumes(tmp_path: Path) -> None:
    agent = GatedAgent(full_at=2)
    store = CampaignStore(tmp_path)
    spec = spec_of(numbered_tasks(6), concurrency=2)
    campaign_id = await store.create(spec)
    runner = CampaignRunner(store, campaign_id, agent=agent, scorer=ScriptedScorer({}))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:

            async def run() -> None:
                await runner.run()

            group.start_soon(run)
            await agent.full.wait()
            runner.cancel()
    assert runner.state is not None
    assert runner.state.status == "cancelled"
    replayed = store.load(campaign_id)
    assert replayed.status == "cancelled"
    assert outcomes(replayed) == outcomes(runner.state)
    assert [t.phase for t in replayed.trajectories.values()].count("generating") == 2

    resumed = CampaignRunner(store, campaign_id, agent=ScriptedAgent({}), scorer=ScriptedScorer({}))
    with anyio.fail_after(10):
        final = await resumed.run()
    assert final.status == "finished"
    assert outcomes(final) == {
        f"t{n}@0": "failed" if n % 3 == 0 else "resolved" for n in range(1, 7)
    }
    # The two interrupted trajectories were attempted again; the others once.
    assert sorted(t.attempts for t in final.trajectories.values()) == [1, 1, 1, 1, 2, 2]


async def test_the_live_state_equals_the_replay_of_the_ledger(tmp_path: Path) -> None:
    runner, state = await run_campaign(
        tmp_path,
        spec_of(numbered_tasks(5), samples=3),
        FlakyInfrastructureAgent({"t2": 1}, InfrastructureError),
        ScriptedScorer({}),
    )
    records = read_ledger(runner.directory / LEDGER_FILE).records
    replayed = replay(records)
    again = replay(records)
    assert replayed.trajectories == state.trajectories == again.trajectories
    assert len(state.trajectories) == 15


async def test_answer_tasks_are_not_held_to_a_per_instance_limit(tmp_path: Path) -> None:
    # Tasks without an environment share no instance: only the global limit applies.
    agent = GatedAgent(full_at=6, key="id")
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(spec_of(numbered_tasks(6), concurrency=6, per_instance=2))
    runner = CampaignRunner(store, campaign_id, agent=agent, scorer=ScriptedScorer({}))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run)
            await agent.full.wait()
            agent.release.set()
    assert agent.max_in_flight == 6


async def test_scoring_is_not_queued_behind_pending_generations_of_its_instance(
    tmp_path: Path,
) -> None:
    # One generation slot on the instance; t2's generation waits for t1's score. If scoring
    # queued for the instance behind t2 (and t3), this would never finish.
    first_scored = anyio.Event()

    class WaitsForFirstScore(Agent):
        async def generate(self, context: TrajectoryContext) -> Submission:
            if context.task.id != "t1":
                await first_scored.wait()
            return Submission(answer=expected_answer(context.task.id))

    class SignalsScore(ScriptedScorer):
        async def score(self, context: ScoringContext) -> ScoreResult:
            result = await super().score(context)
            if context.task.id == "t1":
                first_scored.set()
            return result

    tasks = numbered_tasks(3, path="/srv/shared-instance")
    with anyio.fail_after(10):
        _, state = await run_campaign(
            tmp_path,
            spec_of(tasks, concurrency=4, per_instance=1),
            WaitsForFirstScore(),
            SignalsScore({}),
        )
    assert set(outcomes(state).values()) == {"resolved"}
