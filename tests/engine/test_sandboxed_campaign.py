"""A campaign whose agent and scorer work in real workspaces of a real (local) instance."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.agents.builtin import NoopAgent
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import outcomes, run_campaign, spec_of
from testsupport.repos import BUGGY, FIXED, git_repo

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]


def _tasks(root: Path, count: int) -> list[Task]:
    """Instances are prepared directories: a git repository with a bug, committed."""
    return [
        Task(id=f"calc{number}", path=str(git_repo(root / f"repo{number}")))
        for number in range(count)
    ]


class FixingAgent(Agent):
    """Edits the file in its own workspace and submits the workspace's diff."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        await workspace.write_file("calc.py", FIXED)
        return Submission(patch=await workspace.diff())


class ApplyAndTest(Scorer):
    """Applies the patch in a fresh workspace and runs a check there."""

    async def score(self, context: ScoringContext) -> ScoreResult:
        workspace = await context.sandbox.workspace()
        before = await workspace.read_file("calc.py")
        assert before.decode() == BUGGY, "evaluation starts from the frozen base"
        check = "python3 -c 'import calc; assert calc.add(2, 2) == 4'"
        if context.submission.patch:
            await workspace.write_file("/tmp/submission.diff", context.submission.patch)
            result = await workspace.exec(f"git apply /tmp/submission.diff && {check}")
        else:
            result = await workspace.exec(check)
        return ScoreResult(
            resolved=result.ok,
            score=float(result.ok),
            status="resolved" if result.ok else "failed",
            explanation=f"exit {result.exit_code}: {result.stdout[-500:]} {result.stderr[-500:]}",
            details={"patch": context.submission.patch},
        )


async def test_trajectories_work_and_are_graded_in_their_own_workspaces(tmp_path: Path) -> None:
    tasks = _tasks(tmp_path, 3)
    with anyio.fail_after(120):
        _, fixed = await run_campaign(
            tmp_path / "s1", spec_of(tasks, samples=2), FixingAgent(), ApplyAndTest()
        )
        _, untouched = await run_campaign(
            tmp_path / "s2", spec_of(tasks, samples=2), NoopAgent(), ApplyAndTest()
        )
    failures = {tid: t.score for tid, t in fixed.trajectories.items() if t.outcome != "resolved"}
    assert not failures
    assert set(outcomes(untouched).values()) == {"failed"}
    # The instance itself was never written: every edit stayed in a workspace.
    for task in tasks:
        assert Path(task.path or "", "calc.py").read_text() == BUGGY
