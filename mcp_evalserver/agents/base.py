"""The agent seam: what produces a trajectory's submission.

An agent's `generate` returns a `Submission` (an answer, a patch, or both). Raising
`InfrastructureError` asks for a retry with backoff; any other exception is the trajectory's
result (outcome `error`), never retried. The runner enforces the per-trajectory timeout.

Generation is at-least-once: a generation whose result was not yet recorded when the process
died runs again on resume, as a new attempt. An agent that pays for what it calls can
deduplicate with `TrajectoryContext.idempotency_key` (the same for every attempt of a
trajectory) and `attempt`.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission


@dataclass(frozen=True)
class TrajectoryContext:
    """What an agent knows about the trajectory it works on."""

    campaign_id: str
    trajectory_id: str
    task: Task
    sample: int
    attempt: int
    campaign_dir: Path
    limiters: Limiters
    sandbox: TrajectorySandbox
    #: Forks this trajectory into n new ones (their ids) at a checkpoint of its workspace;
    #: None where the run cannot start new trajectories.
    branch: Callable[[int], Awaitable[list[str]]] | None = None
    #: Records the usage of each model call as it is made (the campaign's running cost, which
    #: its budget is checked against); None where nothing records it. An agent that meters
    #: none of its calls may give the whole in its submission's `usage` instead.
    meter: Meter | None = None

    @property
    def idempotency_key(self) -> str:
        """Names this trajectory's generation, the same in every attempt and after a resume.

        Unique per campaign and trajectory; a provider or proxy can use it (with `attempt`) to
        recognise a paid call that a crash made the agent send again.
        """
        name = f"{self.campaign_id}\0{self.trajectory_id}".encode()
        return hashlib.sha256(name).hexdigest()[:32]


class Agent(ABC):
    """Produces one submission per call; one instance serves every trajectory of a campaign."""

    #: Whether it meters each of its model calls (`TrajectoryContext.meter`) as it makes it.
    #: A budget then stops it at its next call's meter, its call paid and recorded; an agent
    #: that does not is cancelled where it stands once the budget is spent.
    meters_calls: ClassVar[bool] = False

    @abstractmethod
    async def generate(self, context: TrajectoryContext) -> Submission:
        """Works on one trajectory and returns what it submits.

        Raises:
            InfrastructureError: something outside the task failed; the runner retries.
            Exception: any other error is recorded as the trajectory's outcome `error`.
        """
