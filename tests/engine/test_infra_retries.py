"""Infrastructure failures: backoff per cause, and `resume` runs them again (never final)."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InfrastructureError, SandboxUnavailable
from mcp_evalserver.runtime.limits import RetryPolicy
from mcp_evalserver.scoring.base import ScoreResult, ScoringContext
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import numbered_tasks, outcomes, run_campaign, spec_of
from tests.plugins.scripted import ScriptedScorer, expected_answer

pytestmark = pytest.mark.anyio


class RefusingBackendAgent(Agent):
    """Answers right, except for the tasks in `refused` while `refusing` is set: there the
    sandbox is unavailable (what a backend that refuses for a while looks like to an agent).
    """

    def __init__(self, refused: set[str]) -> None:
        self.refused = refused
        self.refusing = True
        self.calls: Counter[str] = Counter()

    async def generate(self, context: TrajectoryContext) -> Submission:
        self.calls[context.trajectory_id] += 1
        if self.refusing and context.task.id in self.refused:
            raise SandboxUnavailable("the engine refused to create a container")
        return Submission(answer=expected_answer(context.task.id))


class RefusingScorer(ScriptedScorer):
    """Grades like the scripted scorer, except for `refused` tasks while `refusing` is set."""

    def __init__(self, refused: set[str]) -> None:
        super().__init__({})
        self.refused = refused
        self.refusing = True
        self.calls: Counter[str] = Counter()

    async def score(self, context: ScoringContext) -> ScoreResult:
        self.calls[context.trajectory_id] += 1
        if self.refusing and context.task.id in self.refused:
            raise InfrastructureError("the grading container died")
        return await super().score(context)


def _ledger_kinds(state_dir: Path, campaign_id: str, kind: str) -> Counter[str]:
    path = CampaignStore(state_dir).directory(campaign_id) / LEDGER_FILE
    return Counter(str(r.trajectory) for r in read_ledger(path).records if r.kind == kind)


async def test_a_campaign_finished_with_infrastructure_failures_is_completed_by_resume_alone(
    tmp_path: Path,
) -> None:
    agent = RefusingBackendAgent({"t2"})
    scorer = RefusingScorer({"t3"})
    spec = spec_of(numbered_tasks(4), samples=2, max_attempts=2)
    with anyio.fail_after(30):
        runner, state = await run_campaign(tmp_path, spec, agent, scorer)
    assert outcomes(state) == {
        "t1@0": "resolved", "t1@1": "resolved", "t2@0": "infra_error", "t2@1": "infra_error",
        "t3@0": "infra_error", "t3@1": "infra_error", "t4@0": "resolved", "t4@1": "resolved",
    }  # fmt: skip
    assert state.status == "finished"
    assert state.describe_status() == (
        "finished with 4 infrastructure failures — resume to retry them"
    )
    report = build_report(state)
    assert report["infrastructure"]["failed_attempts_by_cause"] == {
        "generation: SandboxUnavailable": 4,
        "scoring: InfrastructureError": 4,
    }
    assert "resume to retry them" in render_markdown(report)

    # The backend works again: resume runs the failed phase of those four, nothing else.
    agent.refusing = scorer.refusing = False
    agent.calls.clear()
    scorer.calls.clear()
    with anyio.fail_after(30):
        resumed = CampaignRunner(runner.store, runner.campaign_id, agent=agent, scorer=scorer)
        state = await resumed.run()
    assert resumed.retrying == 4
    assert set(outcomes(state).values()) == {"resolved"}
    assert agent.calls == {"t2@0": 1, "t2@1": 1}, "only the failed generations ran again"
    assert scorer.calls == {"t2@0": 1, "t2@1": 1, "t3@0": 1, "t3@1": 1}
    assert state.describe_status() == "finished"
    generated = _ledger_kinds(tmp_path, runner.campaign_id, "generated")
    scored = _ledger_kinds(tmp_path, runner.campaign_id, "scored")
    assert set(generated.values()) == set(scored.values()) == {1}
    assert len(generated) == len(scored) == 8
    # The history of what failed stays in the report.
    health = build_report(state)["infrastructure"]
    assert health["failed_attempts"] == 8
    assert health["unresolved_failures"] == 0
    assert health["retried_by_resume"] == 4
    assert replay(read_ledger(runner.directory / LEDGER_FILE).records).retried == 4


async def test_each_cause_of_infrastructure_failure_has_its_own_budget(tmp_path: Path) -> None:
    class TwoFaults(Agent):
        calls = 0

        async def generate(self, context: TrajectoryContext) -> Submission:
            TwoFaults.calls += 1
            if TwoFaults.calls <= 2:
                raise SandboxUnavailable("supervisor closed its output")
            if TwoFaults.calls <= 4:
                raise InfrastructureError("the model endpoint answered 503")
            return Submission(answer=expected_answer(context.task.id))

    spec = spec_of(numbered_tasks(1), max_attempts=3)
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec, TwoFaults(), ScriptedScorer({}))
    assert outcomes(state) == {"t1@0": "resolved"}, "four failures, but no cause failed thrice"
    assert TwoFaults.calls == 5


def test_backoff_doubles_within_its_jitter_and_stays_bounded() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay_s=2.0, max_delay_s=10.0)
    rng = random.Random(7)
    for failures, nominal in ((1, 2.0), (2, 4.0), (3, 8.0), (4, 10.0), (9, 10.0)):
        delays = [policy.delay(failures, rng) for _ in range(200)]
        assert nominal * 0.5 <= min(delays)
        assert max(delays) <= nominal * 1.5
        assert max(delays) - min(delays) > nominal * 0.5, "jittered, not one fixed delay"
    assert not policy.gives_up_after(4)
    assert policy.gives_up_after(5)


async def test_the_runner_waits_its_backoff_between_infrastructure_retries(
    tmp_path: Path,
) -> None:
    agent = RefusingBackendAgent({"t1"})
    spec = spec_of(numbered_tasks(1), max_attempts=3, retry_base_delay_s=0.2)
    with anyio.fail_after(30):
        runner, _ = await run_campaign(tmp_path, spec, agent, ScriptedScorer({}))
    records = read_ledger(runner.directory / LEDGER_FILE).records
    starts = [r.ts for r in records if r.kind == "attempt_started"]
    failures = [r.ts for r in records if r.kind == "generation_failed"]
    assert len(starts) == len(failures) == 3
    # After failure n the runner waits at least half of base·2^(n-1) before the next attempt.
    assert starts[1] - failures[0] >= 0.1
    assert starts[2] - failures[1] >= 0.2


async def test_the_resume_tool_runs_infrastructure_failures_again_and_says_how_many(
    tmp_path: Path,
) -> None:
    agent = RefusingBackendAgent({"t1"})
    fields = spec_of(numbered_tasks(2), max_attempts=1).model_dump(mode="json")
    # The service builds the campaign's agent from its spec: the scripted one answers right.
    fields["agent"] = {"type": "python", "factory": "tests.plugins.scripted:agent"}
    spec = CampaignSpec.model_validate(fields)
    with anyio.fail_after(30):
        runner, state = await run_campaign(tmp_path, spec, agent, ScriptedScorer({}))
    assert outcomes(state) == {"t1@0": "infra_error", "t2@0": "resolved"}
    async with EvalService(tmp_path) as service:
        before = service.status(runner.campaign_id)
        assert before.status_text == "finished with 1 infrastructure failure — resume to retry them"
        assert before.infra_failures == 1
        assert "call resume" in before.next_step
        resumed = await service.resume(runner.campaign_id)
        assert resumed.retrying == 1

        async def quiet(done: float, total: float, line: str) -> None:
            pass

        after = await service.wait(runner.campaign_id, 30, quiet)
    assert after.status_text == "finished"
    assert after.outcomes == {"resolved": 2}
    assert after.infra_failures == 0


def test_the_cli_says_how_many_it_reruns_and_what_the_infrastructure_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = spec_of(numbered_tasks(2), max_attempts=2).model_dump(mode="json")
    fields["agent"] = {"type": "python", "factory": "tests.plugins.scripted:agent"}
    spec = CampaignSpec.model_validate(fields)
    runner, _ = anyio.run(run_campaign, tmp_path, spec, RefusingBackendAgent({"t1"}))
    cid = runner.campaign_id
    state_dir = str(tmp_path)

    assert main(["--state-dir", state_dir, "status"]) == 0
    listing = capsys.readouterr().out
    assert f"{cid}  finished with 1 infrastructure failure — resume to retry them  2/2" in listing
    assert main(["--state-dir", state_dir, "status", cid]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["infrastructure"]["failed_attempts_by_cause"] == {
        "generation: SandboxUnavailable": 2
    }

    assert main(["--state-dir", state_dir, "resume", cid, "--no-progress"]) == 0
    out, err = capsys.readouterr()
    assert "running 1 trajectory(ies) again: their last outcome was an infrastructure" in err
    assert "status: **finished**" in out
    assert "2 failed attempt(s) in 1 trajectory(ies)" in out, "the report keeps the history"
    assert "1 retried by resume" in out
    assert main(["--state-dir", state_dir, "resume", cid, "--no-progress"]) == 0
    assert "running" not in capsys.readouterr().err, "nothing left to run again"
