"""The scorer seam: what turns a submission into a verdict.

A scorer's `score` returns a `ScoreResult`. Raising `InfrastructureError` asks for a retry with
backoff (the generation is kept; only scoring runs again); any other exception is the
trajectory's result (outcome `error`). The runner enforces the scoring timeout.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mcp_evalserver.agents.base import Submission
from mcp_evalserver.sandboxes import TrajectorySandbox
from mcp_evalserver.scheduler import Limiters
from mcp_evalserver.spec import Task


class ScoreResult(BaseModel):
    """A verdict: `resolved` is what pass rates count; `status` says why, in a word."""

    model_config = ConfigDict(extra="forbid")

    resolved: bool
    score: float = Field(ge=0.0, le=1.0, description="1.0 when resolved; partial credit else.")
    status: str = Field(description="e.g. resolved, failed, empty, apply_failed, tests_errored")
    explanation: str = ""
    details: dict[str, Any] = Field(default_factory=dict)


@dataclass(frozen=True)
class ScoringContext:
    """What a scorer knows about the trajectory it grades."""

    campaign_id: str
    trajectory_id: str
    task: Task
    submission: Submission
    campaign_dir: Path
    limiters: Limiters
    sandbox: TrajectorySandbox


class Scorer(ABC):
    """Grades submissions; one instance serves every trajectory of a campaign."""

    @abstractmethod
    async def score(self, context: ScoringContext) -> ScoreResult:
        """Grades one submission.

        Raises:
            InfrastructureError: the grader's environment failed; the runner retries.
            Exception: any other error is recorded as the trajectory's outcome `error`.
        """
