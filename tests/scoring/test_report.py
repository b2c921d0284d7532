"""Reports of real (in-process) campaigns: the statistics, infrastructure failures apart."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.comparison import build_comparison, render_comparison_markdown
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.agents import OracleAgentConfig
from mcp_evalserver.spec.submission import Submission, Usage
from tests.engine.helpers import numbered_tasks, run_campaign, spec_of
from tests.plugins.scripted import ScriptedScorer, expected_answer

pytestmark = pytest.mark.anyio


class CountingAgent(Agent):
    """Right on tasks below `right_below` (by number), and on odd samples of the others."""

    def __init__(self, right_below: int) -> None:
        self.right_below = right_below

    async def generate(self, context: TrajectoryContext) -> Submission:
        number = int(context.task.id.removeprefix("t"))
        right = number < self.right_below or context.sample % 2 == 1
        return Submission(
            answer=expected_answer(context.task.id) if right else "wrong",
            usage=Usage(input_tokens=100, output_tokens=10, requests=1, cost_usd=0.01),
        )


class BrokenHarnessScorer(Scorer):
    """The harness breaks for task t1; grades like the exact scorer elsewhere."""

    async def score(self, context: ScoringContext) -> ScoreResult:
        if context.task.id == "t1":
            raise InfrastructureError("sandbox died")
        return await ScriptedScorer({}).score(context)


async def test_the_report_holds_pass_at_k_intervals_latency_and_usage(tmp_path: Path) -> None:
    spec = spec_of(numbered_tasks(4), samples=3)
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec, CountingAgent(right_below=3))
    report = build_report(state)
    # t1, t2: 3/3; t3, t4: 1/3 (sample 1 only).
    assert report["tasks"]["t1"]["pass_rate"] == 1.0
    assert report["tasks"]["t3"]["pass_rate"] == pytest.approx(1 / 3)
    assert report["tasks"]["t3"]["pass_at_k"] == {
        "1": pytest.approx(1 / 3), "2": pytest.approx(2 / 3), "3": 1.0,
    }  # fmt: skip
    assert report["tasks"]["t3"]["pass_hat_k"]["2"] == 0.0
    summary = report["summary"]
    assert summary["mean_pass_rate"] == pytest.approx(2 / 3)
    ci = summary["mean_pass_rate_ci"]
    assert ci["method"] == "bootstrap"
    assert ci["low"] <= 2 / 3 <= ci["high"]
    assert summary["wilson_ci"] is None, "several samples per task: no Wilson interval"
    assert summary["pass_at_k"]["3"] == 1.0
    assert summary["latency"]["count"] == 12
    assert summary["latency"]["p95_s"] >= summary["latency"]["p50_s"] >= 0
    assert (summary["input_tokens"], summary["output_tokens"]) == (1200, 120)
    assert summary["cost_usd"] == pytest.approx(0.12)
    assert report["phases"]["scoring"]["count"] == 12
    assert report["score_statuses"] == {"failed": 4, "resolved": 8}
    assert report["flaky_graders"] is None, "only an oracle campaign tests its graders"
    # The same ledger gives the same report, interval included (fixed seed).
    assert build_report(state) == report
    json.dumps(report)
    text = render_markdown(report)
    assert "mean pass rate over tasks: **66.7%**" in text
    assert "95% CI" in text
    assert "pass@k: k=1 66.7%, k=2" in text
    assert "cost: **$0.1200** (agent $0.1200)" in text
    # The usage each agent handed in is one `model_usage` record: the campaign's cost.
    assert report["cost"]["cost_usd"] == pytest.approx(0.12)
    assert report["cost"]["cost_per_resolved_usd"] == pytest.approx(0.12 / 8)
    assert report["cost"]["tasks"]["t1"]["cost_usd"] == pytest.approx(0.03)


async def test_infrastructure_failures_are_kept_out_of_every_rate(tmp_path: Path) -> None:
    spec = spec_of(numbered_tasks(2), samples=1, max_attempts=2)
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec, CountingAgent(3), BrokenHarnessScorer())
    report = build_report(state)
    summary = report["summary"]
    assert report["outcomes"] == {"infra_error": 1, "resolved": 1}
    assert (summary["infra_errors"], summary["infra_error_rate"]) == (1, 0.5)
    assert summary["attempts"] == 1
    assert summary["mean_pass_rate"] == 1.0, "t1 never ran: it is not a failure"
    assert summary["task_error_rate"] == 0.0
    assert summary["wilson_ci"] is not None, "one attempt per task: Wilson fits"
    assert report["tasks"]["t1"] | {"pass_at_k": {}} == {
        "samples": 1, "resolved": 0, "graded": 0, "infra_errors": 1, "pass_rate": None,
        "pass_at_k": {}, "pass_hat_k": {},
    }  # fmt: skip
    assert "infrastructure errors: 1 (50.0%" in render_markdown(report)


async def test_two_campaigns_are_compared_on_their_shared_tasks(tmp_path: Path) -> None:
    with anyio.fail_after(30):
        _, weaker = await run_campaign(
            tmp_path / "a", spec_of(numbered_tasks(4), samples=2), CountingAgent(2)
        )
        _, stronger = await run_campaign(
            tmp_path / "b", spec_of(numbered_tasks(5), samples=2), CountingAgent(4)
        )
    comparison = build_comparison(weaker, stronger)
    assert comparison["shared_tasks"] == 4
    assert comparison["only_in_b"] == ["t5"]
    # t2 and t3 go from 1/2 to 2/2: +0.25 on average over 4 tasks.
    assert comparison["mean_difference"] == pytest.approx(0.25)
    assert (comparison["wins"], comparison["losses"], comparison["ties"]) == (2, 0, 2)
    text = render_comparison_markdown(comparison)
    assert "difference B − A: **+25.0 points**" in text
    assert "sign test p = 0.5" in text


class FlakyGrader(Scorer):
    """Grades like the exact scorer, except that sample 1 of t2 fails whatever it gets."""

    async def score(self, context: ScoringContext) -> ScoreResult:
        if context.trajectory_id == "t2@1":
            return ScoreResult.unresolved("failed", "the grader flaked")
        return await ScriptedScorer({}).score(context)


async def test_an_oracle_campaign_names_the_graders_its_gold_does_not_always_pass(
    tmp_path: Path,
) -> None:
    spec = spec_of(numbered_tasks(3), samples=3).model_copy(update={"agent": OracleAgentConfig()})
    with anyio.fail_after(30):
        _, state = await run_campaign(tmp_path, spec, scorer=FlakyGrader())
    report = build_report(state)
    assert report["flaky_graders"] == [
        {"task_id": "t2", "runs": 3, "passes": 2, "infra_errors": 0, "kind": "flaky"}
    ]
    assert "**flaky graders** (gold did not always pass): t2 (flaky, 2/3)" in render_markdown(
        report
    )
