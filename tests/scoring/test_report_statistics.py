"""The report's clustered standard error, paired tests, detectable difference and retry split,
from real (in-process) campaigns and their ledgers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.comparison import build_comparison, render_comparison_markdown
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.errors import InfrastructureError, InvalidInput
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import run_campaign, spec_of
from tests.plugins.scripted import expected_answer

pytestmark = pytest.mark.anyio


def repository_tasks(count: int, repositories: int) -> list[Task]:
    """Tasks t1..tN, spread over `repositories` repositories and as many `suite`s plus one."""
    return [
        Task(
            id=f"t{n}",
            prompt=f"{n} squared?",
            answer=expected_answer(f"t{n}"),
            repo=f"org/repo{n % repositories}",
            metadata={"suite": f"s{n % (repositories + 1)}"},
        )
        for n in range(1, count + 1)
    ]


class RightOnSomeRepositories(Agent):
    """Right on tasks whose number modulo `modulus` is below `below`, on every sample."""

    def __init__(self, modulus: int, below: int) -> None:
        self.modulus, self.below = modulus, below

    async def generate(self, context: TrajectoryContext) -> Submission:
        number = int(context.task.id.removeprefix("t"))
        right = number % self.modulus < self.below
        return Submission(answer=expected_answer(context.task.id) if right else "wrong")


class FailsOnceOnEvenTasks(Agent):
    """An infrastructure failure on the first attempt of even tasks, then wrong answers there;
    right on odd tasks: the retried trajectories pass less than the others."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    async def generate(self, context: TrajectoryContext) -> Submission:
        self.calls[context.trajectory_id] += 1
        number = int(context.task.id.removeprefix("t"))
        if number % 2 == 0 and self.calls[context.trajectory_id] == 1:
            raise InfrastructureError("the sandbox went away")
        right = number % 2 == 1
        return Submission(answer=expected_answer(context.task.id) if right else "wrong")


async def test_the_mean_pass_rate_carries_a_standard_error_clustered_by_repository(
    tmp_path: Path,
) -> None:
    spec = spec_of(repository_tasks(24, repositories=4), samples=2)
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec, RightOnSomeRepositories(4, 2))
    report = build_report(state)
    clustered = report["mean_pass_rate_clustered"]
    assert clustered["cluster_field"] == "repo"
    assert (clustered["clusters"], clustered["tasks"], clustered["largest_cluster"]) == (4, 24, 6)
    assert clustered["mean"] == pytest.approx(report["summary"]["mean_pass_rate"])
    # Repositories all pass or all fail: the clustered error is that of 4 values, 0 1 1 0.
    assert clustered["standard_error"] == pytest.approx(0.2886751, rel=1e-6)
    assert clustered["degrees_of_freedom"] == 3
    assert "only 4 clusters" in clustered["warning"]
    text = render_markdown(report)
    assert "clustered standard error: SE 28.9 points" in text
    assert "4 clusters by `repo`" in text
    assert "**only 4 clusters" in text
    by_suite = build_report(state, cluster_by="suite")["mean_pass_rate_clustered"]
    assert (by_suite["cluster_field"], by_suite["clusters"]) == ("suite", 5)
    with pytest.raises(InvalidInput, match=r"no task has a field 'team'.*suite"):
        build_report(state, cluster_by="team")


async def test_without_repositories_each_task_is_its_own_cluster(tmp_path: Path) -> None:
    tasks = [Task(id=f"t{n}", answer=expected_answer(f"t{n}")) for n in range(1, 5)]
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec_of(tasks), RightOnSomeRepositories(2, 1))
    clustered = build_report(state)["mean_pass_rate_clustered"]
    assert (clustered["cluster_field"], clustered["clusters"]) == (None, 4)
    assert "each task its own" in render_markdown(build_report(state))


async def test_the_report_splits_pass_rates_by_whether_a_retry_was_needed(
    tmp_path: Path,
) -> None:
    spec = spec_of(repository_tasks(20, repositories=5), samples=1, max_attempts=2)
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec, FailsOnceOnEvenTasks())
    retries = build_report(state)["retries"]
    assert (retries["retried"], retries["retried_resolved"]) == (10, 0)
    assert (retries["not_retried"], retries["not_retried_resolved"]) == (10, 10)
    assert retries["flagged"]
    assert retries["fisher_p_value"] < 0.001
    assert "- retried after an infrastructure failure: 10 graded" in render_markdown(
        build_report(state)
    )


async def test_one_sample_each_is_answered_by_mcnemar_with_a_detectable_difference(
    tmp_path: Path,
) -> None:
    tasks = [Task(id=f"t{n}", answer=expected_answer(f"t{n}")) for n in range(1, 41)]
    with anyio.fail_after(60):
        _, weaker = await run_campaign(
            tmp_path / "a", spec_of(tasks), RightOnSomeRepositories(4, 1)
        )
        _, stronger = await run_campaign(
            tmp_path / "b", spec_of(tasks), RightOnSomeRepositories(4, 3)
        )
    comparison = build_comparison(weaker, stronger)
    assert comparison["mean_difference"] == pytest.approx(0.5)
    tests = comparison["tests"]
    assert tests["answered_by"] == "mcnemar_exact"
    assert (tests["mcnemar"]["only_b_resolved"], tests["mcnemar"]["only_a_resolved"]) == (20, 0)
    assert tests["p_value"] == pytest.approx(2 / 2**20)
    power = comparison["power"]
    assert 0 < power["detectable_difference"] < 0.5
    text = render_comparison_markdown(comparison)
    assert "**answered by mcnemar exact: p = 1.91e-06**, because each side has one sample" in text
    assert "detectable difference at 80% power:" in text
    # The fields compare reported before are all still there.
    assert {"mean_difference", "difference_ci", "permutation_p_value", "sign_test_p_value"} <= (
        comparison.keys()
    )
