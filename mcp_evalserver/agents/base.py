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

import anyio

from mcp_evalserver.errors import Conflict, Timeout
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.pricing import Meter
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission

#: How long an acknowledgement of a hand-in waits for its record (workspace closed, artifacts
#: written, fsync): far longer than these take, short of a client's patience.
RECORD_WAIT_S = 120.0


class Recorded:
    """Whether an attempt's submission is in the ledger, for whoever acknowledges a hand-in.

    The runner settles it once the attempt's `generated` record is durable (`succeed`), or
    once the attempt ended without one (`fail`, with why). A submission acknowledged only
    after `wait` returns survives a crash of the process that drives the campaign.
    """

    def __init__(self, trajectory_id: str) -> None:
        self.trajectory_id = trajectory_id
        self._settled = anyio.Event()
        self._failure: str | None = None

    def succeed(self) -> None:
        """The `generated` record is durable."""
        self._settled.set()

    def fail(self, reason: str) -> None:
        """The attempt ended without a `generated` record (`reason`: what happened); a no-op
        once settled."""
        if not self._settled.is_set():
            self._failure = reason
            self._settled.set()

    async def wait(self, timeout_s: float = RECORD_WAIT_S) -> None:
        """Returns once the submission is durable in the ledger.

        Raises:
            Conflict: the attempt ended without recording it (the message says why).
            Timeout: it was not recorded within `timeout_s` (it may be later).
        """
        with anyio.move_on_after(timeout_s):
            await self._settled.wait()
        if not self._settled.is_set():
            raise Timeout(
                f"the submission of trajectory {self.trajectory_id} was handed in but is not in "
                f"the ledger after {timeout_s:g}s; it may still be recorded: read campaign_status "
                "(phase `generated` or later: it counts; otherwise the trajectory runs again)"
            )
        if self._failure is not None:
            raise Conflict(
                f"the submission of trajectory {self.trajectory_id} was not recorded: "
                f"{self._failure}. It does not count; read campaign_status to see where the "
                "trajectory stands"
            )


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
    #: Whether the campaign has a budget: an agent whose calls could run in parallel then
    #: makes them one at a time, each metered before the next starts.
    budgeted: bool = False
    #: Raises once the campaign's budget is spent: an agent that meters its calls asks before
    #: each, so none starts after the budget was reached (by this trajectory or another).
    admit: Callable[[], None] | None = None
    #: Settled by the runner once this attempt's submission is durable in the ledger, or
    #: cannot be; None where nothing records it (a test's context).
    recorded: Recorded | None = None

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
