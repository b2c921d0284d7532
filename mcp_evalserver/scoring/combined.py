"""Scorers made of scorers: `all_of`, `any_of` and a `weighted` mix.

So a task can require both a passing test suite and a sane trajectory. Every part runs (its
verdict is in the details), in order, each with a workspace of its own. A part that raises
`InfrastructureError` makes the whole evaluation retry; any other exception is that part's
`error` verdict. When the parts' verdicts settle the answer (one failure for `all_of`, one
success for `any_of`) an error elsewhere does not change it; otherwise the combination carries
the most severe error, since it could not be judged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Literal

from mcp_evalserver.errors import InfrastructureError
from mcp_evalserver.runtime.sandboxes import InstanceCheck
from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.campaign import Task

Mode = Literal["all_of", "any_of", "weighted"]


class CombinedScorer(Scorer):
    """Runs every part and combines their verdicts by `mode`."""

    def __init__(
        self,
        mode: Mode,
        parts: Sequence[tuple[str, Scorer]],
        *,
        weights: Sequence[float] | None = None,
        threshold: float = 1.0,
    ) -> None:
        self.mode = mode
        self.parts = list(parts)
        self.weights = list(weights) if weights is not None else [1.0] * len(self.parts)
        self.threshold = threshold

    def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Every part's refusal."""
        for _, scorer in self.parts:
            scorer.check_tasks(tasks)

    def instance_check(self, task: Task) -> InstanceCheck | None:
        """Every part's check, in order."""
        checks = [c for _, scorer in self.parts if (c := scorer.instance_check(task))]
        if not checks:
            return None

        async def check_all(instance: Instance) -> None:
            for check in checks:
                await check(instance)

        return InstanceCheck(" ".join(c.key for c in checks), check_all)

    async def score(self, context: ScoringContext) -> ScoreResult:
        results = [
            await self._part(context, number, kind, scorer)
            for number, (kind, scorer) in enumerate(self.parts)
        ]
        details: dict[str, Any] = {
            "mode": self.mode,
            "parts": [
                {"type": kind, "weight": weight, **result.model_dump(mode="json")}
                for (kind, _), weight, result in zip(self.parts, self.weights, results, strict=True)
            ],
        }
        total = sum(self.weights)
        mean = sum(w * r.score for w, r in zip(self.weights, results, strict=True)) / total
        resolved_parts = [r.resolved for r in results]
        if self.mode == "all_of":
            settled = all(resolved_parts) or any(r.outcome == "failed" for r in results)
            resolved = all(resolved_parts)
            score = min(r.score for r in results)
        elif self.mode == "any_of":
            settled = any(resolved_parts) or all(r.outcome == "failed" for r in results)
            resolved = any(resolved_parts)
            score = max(r.score for r in results)
        else:
            settled = all(r.outcome in ("resolved", "failed") for r in results)
            resolved = settled and mean >= self.threshold
            score = mean
        summary = "; ".join(
            f"{kind}: {r.status}" for (kind, _), r in zip(self.parts, results, strict=True)
        )
        if resolved:
            return ScoreResult(
                resolved=True, score=score, status="resolved", explanation=summary, details=details
            )
        errored = [r for r in results if r.outcome in ("error", "infra_error")]
        if not settled and errored:
            worst = max(errored, key=lambda r: r.outcome == "infra_error")
            outcome: Literal["error", "infra_error"] = (
                "infra_error" if worst.outcome == "infra_error" else "error"
            )
            return ScoreResult.unresolved(
                worst.status, summary, outcome=outcome, score=score, details=details
            )
        first_failed = next(r for r in results if not r.resolved)
        status = first_failed.status if self.mode != "weighted" else "below_threshold"
        return ScoreResult.unresolved(status, summary, score=score, details=details)

    async def _part(
        self, context: ScoringContext, number: int, kind: str, scorer: Scorer
    ) -> ScoreResult:
        sandbox = context.sandbox.part(number)
        try:
            return await scorer.score(dataclasses.replace(context, sandbox=sandbox))
        except InfrastructureError:
            raise
        except Exception as exc:
            return ScoreResult.unresolved(
                "error", f"{kind} scorer raised {type(exc).__name__}: {exc}", outcome="error"
            )
        finally:
            await sandbox.aclose()
