"""The `command` scorer runs its command in a fresh local workspace after applying the patch."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_evalserver.scoring.command import CommandScorer
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.scorers import CommandScorerConfig
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import diff_of, git_repo, scoring_in_workspaces

pytestmark = [pytest.mark.anyio, pytest.mark.root]

CHECK = "/usr/bin/python3 -c 'import calc; assert calc.add(2, 2) == 4'"


def _task(tmp_path: Path) -> tuple[Task, str]:
    repo = git_repo(tmp_path / "repo", {"calc.py": "def add(a, b):\n    return a - b\n"})
    fix = diff_of(repo, {"calc.py": "def add(a, b):\n    return a + b\n"})
    return Task(id="calc", path=str(repo), answer="4"), fix


async def test_the_exit_code_decides_after_the_patch_is_applied(tmp_path: Path) -> None:
    task, fix = _task(tmp_path)
    scorer = build_scorer(CommandScorerConfig(command=CHECK))
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        fixed = await scoring.score(scorer, task, Submission(patch=fix))
        untouched = await scoring.score(scorer, task, Submission())
        log = scoring.artifact(untouched.details["log"])
    assert (fixed.status, fixed.outcome, fixed.score) == ("resolved", "resolved", 1.0)
    assert (untouched.status, untouched.outcome) == ("failed", "failed")
    assert untouched.details["exit_code"] == 1
    assert "AssertionError" in log


async def test_a_reward_file_gives_the_score_and_the_threshold_the_verdict(
    tmp_path: Path,
) -> None:
    task, _ = _task(tmp_path)
    # The answer arrives on stdin and in a file; the command grades it 0.75.
    command = (
        'test "$(cat)" = 4 && test "$(cat "$MCP_EVALSERVER_ANSWER_FILE")" = 4 '
        "&& echo 0.75 > /tmp/reward"
    )
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        low = await scoring.score(
            CommandScorer(command, reward_file="/tmp/reward"), task, Submission(answer="4")
        )
        enough = await scoring.score(
            CommandScorer(command, reward_file="/tmp/reward", threshold=0.5),
            task,
            Submission(answer="4"),
        )
        wrong = await scoring.score(
            CommandScorer(command, reward_file="/tmp/reward"), task, Submission(answer="5")
        )
    assert (low.resolved, low.score, low.status) == (False, 0.75, "failed")
    assert (enough.resolved, enough.score, enough.details["reward"]) == (True, 0.75, 0.75)
    assert (wrong.status, wrong.outcome) == ("no_reward", "error")
    assert "wrote no reward file" in wrong.explanation


async def test_a_reward_outside_zero_to_one_is_an_evaluation_error(tmp_path: Path) -> None:
    task, _ = _task(tmp_path)
    scorer = CommandScorer("echo 7 > /tmp/reward", reward_file="/tmp/reward")
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(scorer, task, Submission(answer="x"))
    assert (result.status, result.outcome) == ("no_reward", "error")
    assert "outside [0, 1]" in result.explanation


async def test_a_patch_that_does_not_apply_fails_without_running_the_command(
    tmp_path: Path,
) -> None:
    task, fix = _task(tmp_path)
    broken = fix.replace("-    return a - b", "-    return a * b")
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(
            CommandScorer("touch /tmp/ran; exit 0"), task, Submission(patch=broken)
        )
    assert (result.status, result.outcome) == ("patch_apply_failed", "failed")
    assert "exit_code" not in result.details


async def test_a_command_past_its_time_limit_is_the_submissions_failure(
    tmp_path: Path,
) -> None:
    task, _ = _task(tmp_path)
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(
            CommandScorer("sleep 30", timeout_s=0.5), task, Submission(answer="4")
        )
    assert (result.status, result.outcome, result.resolved) == ("timeout", "failed", False)
