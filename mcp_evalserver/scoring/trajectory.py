"""The `trajectory` scorer: assertions over the tool calls a trajectory's transcript records.

The checks themselves live in `transcript_checks` (pure, no engine imports). This scorer reads
the transcript from the submission; one without a transcript (an external agent's) cannot be
judged, which is the evaluation's error, never the submission's failure.
"""

from __future__ import annotations

from collections.abc import Sequence

from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.transcript_checks import TrajectoryAssertion, recorded_calls

# How many call names the verdict's details list (a runaway agent may make thousands).
_CALLS_SHOWN = 200


class TrajectoryScorer(Scorer):
    """Resolved when every assertion holds; the score is the share that hold."""

    def __init__(self, assertions: Sequence[TrajectoryAssertion]) -> None:
        self.assertions = list(assertions)

    async def score(self, context: ScoringContext) -> ScoreResult:
        transcript = context.submission.transcript
        if transcript is None:
            return ScoreResult.unresolved(
                "no_transcript",
                "the submission has no recorded transcript (agents `openai`, `command` and the "
                "CLI agents record one; an external agent does not), so its calls cannot be "
                "checked",
                outcome="error",
            )
        calls = recorded_calls(transcript)
        checks = [assertion.check(calls) for assertion in self.assertions]
        held = sum(check.passed for check in checks)
        details = {
            "calls": len(calls),
            "tools": [call.name for call in calls[:_CALLS_SHOWN]],
            "assertions": [
                {"type": assertion.type, "passed": check.passed, "explanation": check.explanation}
                for assertion, check in zip(self.assertions, checks, strict=True)
            ],
        }
        score = held / len(checks)
        if held == len(checks):
            return ScoreResult(
                resolved=True,
                score=1.0,
                status="resolved",
                explanation=f"all {held} trajectory assertions hold",
                details=details,
            )
        failed = [check.explanation for check in checks if not check.passed]
        return ScoreResult.unresolved(
            "trajectory_failed",
            f"{len(failed)} of {len(checks)} trajectory assertions fail: " + "; ".join(failed),
            score=score,
            details=details,
        )
