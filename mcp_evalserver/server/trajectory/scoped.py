"""The tools of one trajectory, for a program that acts as its agent (the `command` agent).

Unlike `ExternalTrajectories`, nothing here names a trajectory: a `ScopedTrajectory` is bound
to one context when it is made, so whoever reaches its MCP endpoint can act on that trajectory
alone. It also keeps what the program did (`calls`) for the transcript.
"""

from __future__ import annotations

from typing import Any

import anyio

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.tool_table import WorkspaceTool
from mcp_evalserver.errors import Conflict
from mcp_evalserver.server.models import BranchIds, Submitted
from mcp_evalserver.server.trajectory.tools import TrajectoryTools
from mcp_evalserver.server.trajectory.transcript import call_entry, note_result
from mcp_evalserver.spec.submission import Submission


class ScopedTrajectory(TrajectoryTools):
    """The workspace tools on one trajectory, its forks and its submission.

    Every method raises what `TrajectoryTools` raises; `call` also raises `Conflict` once
    the trajectory was submitted.
    """

    def __init__(self, context: TrajectoryContext) -> None:
        super().__init__(context)
        self.context: TrajectoryContext = context
        self.submission: Submission | None = None
        #: Set once the program has submitted.
        self.submitted = anyio.Event()
        self.calls: list[dict[str, Any]] = []

    async def call(self, tool: WorkspaceTool, /, **arguments: Any) -> Any:
        """Runs one tool call of the program: recorded for the transcript, refused once the
        trajectory was submitted.

        Raises:
            Conflict: the trajectory was already submitted.
        """
        if self.submission is not None:
            raise Conflict(
                f"trajectory {self.context.trajectory_id} was already submitted; exit the program"
            )
        entry = call_entry(tool, "scoped", arguments)
        self.calls.append(entry)
        result = await getattr(self, tool.name)(**arguments)
        note_result(entry, result)
        return result

    async def fork_trajectory(self, n: int) -> BranchIds:
        """Forks this trajectory into `n` new ones: each runs the agent's program again, in a
        copy of this workspace as it is now, and is scored on its own."""
        self.require_workspace()
        if self.context.branch is None:
            raise Conflict(f"trajectory {self.context.trajectory_id} cannot be forked here")
        return BranchIds(trajectory_ids=await self.context.branch(n))

    async def submit(self, answer: str | None) -> Submitted:
        """Hands in the workspace's diff (when there is one) and the answer, if any.

        Answered once the agent has it, not once it is recorded: the program is the agent,
        its exit and output go in the same record, which is written after it exits. A crash
        before then runs the attempt again (generation is at-least-once), as for any agent.
        """
        self.submission, submitted = await self.prepare_submission(answer)
        self.submitted.set()
        return submitted
