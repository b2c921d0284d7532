"""Scorers that compare a submitted answer with the task's gold answer (see `matchers`).

A missing answer is `failed` with status `empty`; a task without a gold answer (or a pattern)
is the evaluation's error (outcome `error`, status `no_gold`), not the submission's failure.
"""

from __future__ import annotations

from typing import Literal

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.matchers import (
    MatchVerdict,
    match_exact,
    match_json,
    match_regex,
    parse_json,
)


def _verdict(match: MatchVerdict) -> ScoreResult:
    return ScoreResult(
        resolved=match.matched,
        score=1.0 if match.matched else 0.0,
        status="resolved" if match.matched else "failed",
        explanation=match.explanation,
    )


def _missing(context: ScoringContext, gold: str | None) -> ScoreResult:
    """The verdict when the gold answer or the submitted one is missing."""
    if gold is None:
        return ScoreResult.unresolved(
            "no_gold", f"task {context.task.id} has no `answer` to compare with", outcome="error"
        )
    return ScoreResult.unresolved("empty", "the submission has no answer")


class ExactScorer(Scorer):
    """Resolved when the answer equals the gold answer after `matchers.normalise_text`."""

    def __init__(self, *, case_sensitive: bool = True) -> None:
        self.case_sensitive = case_sensitive

    async def score(self, context: ScoringContext) -> ScoreResult:
        gold = context.task.answer
        answer = context.submission.answer
        if gold is None or answer is None:
            return _missing(context, gold)
        return _verdict(match_exact(answer, gold, case_sensitive=self.case_sensitive))


class RegexScorer(Scorer):
    """Resolved when the stripped answer matches the pattern (the config's, else the task's)."""

    def __init__(
        self,
        *,
        pattern: str | None = None,
        mode: Literal["fullmatch", "search"] = "fullmatch",
        ignore_case: bool = False,
        dotall: bool = False,
    ) -> None:
        """Checks a configured pattern now, so a typo fails the campaign before it starts.

        Raises:
            InvalidInput: `pattern` is not a valid regular expression.
        """
        if pattern is not None:
            match_regex("", pattern)
        self.pattern = pattern
        self.mode: Literal["fullmatch", "search"] = mode
        self.ignore_case = ignore_case
        self.dotall = dotall

    async def score(self, context: ScoringContext) -> ScoreResult:
        pattern = self.pattern if self.pattern is not None else context.task.answer
        answer = context.submission.answer
        if pattern is None or answer is None:
            return _missing(context, pattern)
        try:
            match = match_regex(
                answer,
                pattern,
                mode=self.mode,
                ignore_case=self.ignore_case,
                dotall=self.dotall,
            )
        except InvalidInput as exc:
            return ScoreResult.unresolved("invalid_gold", str(exc), outcome="error")
        return _verdict(match)


class JsonScorer(Scorer):
    """Resolved when the answer, parsed as JSON, equals the task's answer parsed as JSON."""

    def __init__(self, *, subset: bool = False) -> None:
        self.subset = subset

    async def score(self, context: ScoringContext) -> ScoreResult:
        gold = context.task.answer
        answer = context.submission.answer
        if gold is None or answer is None:
            return _missing(context, gold)
        try:
            expected = parse_json(gold)
        except InvalidInput as exc:
            return ScoreResult.unresolved(
                "invalid_gold", f"task {context.task.id}: gold {exc}", outcome="error"
            )
        return _verdict(match_json(answer, expected, subset=self.subset))
