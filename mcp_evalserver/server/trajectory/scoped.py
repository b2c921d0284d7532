"""The tools of one trajectory, for a program that acts as its agent (the `command` agent).

Unlike `ExternalTrajectories`, nothing here names a trajectory: a `ScopedTrajectory` is bound
to one context when it is made, so whoever reaches its MCP endpoint can act on that trajectory
alone. It also keeps what the program did (`calls`) for the transcript.
"""

from __future__ import annotations

from typing import Any

import anyio

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.errors import Conflict
from mcp_evalserver.server.models import (
    Checkpoint,
    Diff,
    ExecOutput,
    FileContent,
    FileWritten,
    Restored,
    Submitted,
)
from mcp_evalserver.server.trajectory.tools import TrajectoryTools
from mcp_evalserver.spec.submission import Submission

# What one transcript entry keeps of a long argument (a file's content, a command).
_ARGUMENT_CHARS = 2_000


class ScopedTrajectory:
    """Exec, read, write, diff and submit on the workspace of one trajectory.

    Every method raises what `TrajectoryTools` raises, and `Conflict` once submitted.
    """

    def __init__(self, context: TrajectoryContext) -> None:
        self.context = context
        self.tools = TrajectoryTools(context)
        self.submission: Submission | None = None
        #: Set once the program has submitted.
        self.submitted = anyio.Event()
        self.calls: list[dict[str, Any]] = []

    @property
    def workdir(self) -> str | None:
        """Where commands start and relative paths resolve; None for answer-only tasks."""
        return self.tools.workdir

    async def exec(self, command: str, timeout_s: float, stdin: str | None = None) -> ExecOutput:
        """Runs a shell command in the workspace."""
        self._log("sandbox_exec", command=command)
        result = await self.tools.exec(command, timeout_s, stdin)
        self.calls[-1]["exit_code"] = result.exit_code
        return result

    async def read(self, path: str, max_bytes: int) -> FileContent:
        """Reads a file from the workspace."""
        self._log("read_file", path=path)
        return await self.tools.read(path, max_bytes)

    async def write(self, path: str, content: str) -> FileWritten:
        """Writes a file in the workspace (parents created)."""
        self._log("write_file", path=path, content=content)
        return await self.tools.write(path, content)

    async def diff(self) -> Diff:
        """The workspace's changes against the base commit."""
        self._log("get_diff")
        return await self.tools.diff()

    async def checkpoint(self) -> Checkpoint:
        """Freezes the workspace's files now."""
        self._log("checkpoint")
        return await self.tools.checkpoint()

    async def restore(self, checkpoint_id: str) -> Restored:
        """Returns the workspace's files to a checkpoint."""
        self._log("restore", checkpoint_id=checkpoint_id)
        return await self.tools.restore(checkpoint_id)

    async def fork(self, n: int) -> list[str]:
        """Forks this trajectory into `n` new ones (their ids): each runs the agent's program
        again, in a copy of this workspace as it is now, and is scored on its own."""
        self._log("fork_trajectory", n=str(n))
        self.tools.require_workspace()
        if self.context.branch is None:
            raise Conflict(f"trajectory {self.context.trajectory_id} cannot be forked here")
        return await self.context.branch(n)

    async def submit(self, answer: str | None) -> Submitted:
        """Hands in the workspace's diff (when there is one) and the answer, if any."""
        self._log("submit", answer=answer)
        self.submission, submitted = await self.tools.submission(answer)
        self.submitted.set()
        return submitted

    def _log(self, tool: str, **arguments: str | None) -> None:
        if self.submission is not None:
            raise Conflict(
                f"trajectory {self.context.trajectory_id} was already submitted; exit the program"
            )
        shown = {k: v if v is None else v[:_ARGUMENT_CHARS] for k, v in arguments.items()}
        self.calls.append({"tool": tool, "arguments": shown})
