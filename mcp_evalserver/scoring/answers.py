"""Scorers that compare a submitted answer with the task's gold answer."""

from __future__ import annotations

from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext


def normalise_answer(text: str, *, case_sensitive: bool) -> str:
    """Strips the ends and collapses runs of whitespace; folds case unless told not to."""
    collapsed = " ".join(text.split())
    return collapsed if case_sensitive else collapsed.casefold()


class ExactScorer(Scorer):
    """Resolved when the answer equals the gold answer after `normalise_answer`."""

    def __init__(self, *, case_sensitive: bool = True) -> None:
        self.case_sensitive = case_sensitive

    async def score(self, context: ScoringContext) -> ScoreResult:
        answer = context.submission.answer
        gold = context.task.answer
        if gold is None:
            return ScoreResult(
                resolved=False, score=0.0, status="no_gold", explanation="task has no answer"
            )
        if answer is None:
            return ScoreResult(resolved=False, score=0.0, status="empty", explanation="no answer")
        matched = normalise_answer(answer, case_sensitive=self.case_sensitive) == normalise_answer(
            gold, case_sensitive=self.case_sensitive
        )
        return ScoreResult(
            resolved=matched,
            score=1.0 if matched else 0.0,
            status="resolved" if matched else "failed",
            explanation="answer matches" if matched else f"expected {gold!r}, got {answer!r}",
        )
