"""The scorer seam: what turns a submission into a verdict.

A scorer's `score` returns a `ScoreResult`. Raising `InfrastructureError` asks for a retry with
backoff (the generation is kept; only scoring runs again); any other exception is the
trajectory's result (outcome `error`). The runner enforces the scoring timeout.

A result's `outcome` says whose failure an unresolved verdict is: `failed` (the submission's,
the default), `error` (the evaluation broke: tests errored, a task without a gold answer) or
`infra_error` (the harness did: the sandbox went away), which every figure keeps apart.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_evalserver.runtime.artifacts import store_artifact
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.runtime.sandboxes import InstanceCheck, TrajectorySandbox
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission


class ScoreResult(BaseModel):
    """A verdict: `resolved` is what pass rates count; `status` says why, in a word."""

    model_config = ConfigDict(extra="forbid")

    resolved: bool
    score: float = Field(ge=0.0, le=1.0, description="1.0 when resolved; partial credit else.")
    status: str = Field(description="e.g. resolved, failed, empty, apply_failed, tests_errored")
    explanation: str = ""
    details: dict[str, Any] = Field(default_factory=dict)
    outcome: Literal["resolved", "failed", "error", "infra_error"] | None = Field(
        None, description="The ledger outcome; default resolved or failed from `resolved`."
    )

    @model_validator(mode="after")
    def _outcome_agrees(self) -> Self:
        if self.outcome is None:
            self.outcome = "resolved" if self.resolved else "failed"
        elif (self.outcome == "resolved") != self.resolved:
            raise ValueError(f"outcome {self.outcome!r} contradicts resolved={self.resolved}")
        return self

    @classmethod
    def unresolved(
        cls,
        status: str,
        explanation: str,
        *,
        outcome: Literal["failed", "error", "infra_error"] = "failed",
        score: float = 0.0,
        details: dict[str, Any] | None = None,
    ) -> ScoreResult:
        """A verdict that does not count as resolved, with its reason."""
        return cls(
            resolved=False,
            score=score,
            status=status,
            explanation=explanation,
            details=details or {},
            outcome=outcome,
        )


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
    #: Records the usage of each model call the scorer makes (a judge's); None: not recorded.
    meter: Meter | None = None
    #: For a scorer whose `agent_state` is not "none": the agent's whole filesystem change,
    #: an exported checkpoint of its workspace (`Instance.workspace_from_archive` starts one
    #: from it), or None with the reason in `agent_files_missing`.
    agent_files: bytes | None = None
    agent_files_missing: str | None = None
    #: `sandbox` is the agent's own workspace, as it left it (agent_state "workspace").
    in_agent_workspace: bool = False

    async def store_artifact(self, data: bytes, suffix: str = "") -> dict[str, Any]:
        """Keeps bytes (a test log, say) as an artifact of the campaign; returns the reference
        to put in the result's `details`, which the ledger's `scored` record then names.

        Raises:
            OSError: the disk refused the write.
        """
        return (await store_artifact(self.campaign_dir, data, suffix)).as_json()


#: What a scorer needs of the agent's box besides its submission: nothing, its files (every
#: change anywhere, exported when the agent is done and kept with the submission), or its
#: workspace itself, kept alive for scoring (and its files, should that workspace be lost).
AgentState = Literal["none", "files", "workspace"]


class Scorer(ABC):
    """Grades submissions; one instance serves every trajectory of a campaign."""

    def agent_state(self, task: Task) -> AgentState:
        """What this scorer needs of the agent's box when grading `task`; "none" by default."""
        return "none"

    def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Refuses, before a campaign starts or is rescored, tasks this scorer cannot grade
        at all (rather than an error on every trajectory). Nothing by default.

        Raises:
            InvalidInput: the message names the tasks and what to do.
        """
        return None

    def instance_check(self, task: Task) -> InstanceCheck | None:
        """What to check on each new instance of `task` before anything uses it (None:
        nothing). A refused instance makes each trajectory of the task an `error`."""
        return None

    @abstractmethod
    async def score(self, context: ScoringContext) -> ScoreResult:
        """Grades one submission.

        Raises:
            InfrastructureError: the grader's environment failed; the runner retries.
            Exception: any other error is recorded as the trajectory's outcome `error`.
        """
