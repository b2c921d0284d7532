"""The sandbox tools of external trajectories: claim, exec, read, write, diff, submit.

Every call names a claim id (returned by `claim`); holding the claim renews its lease. The
workspace is the trajectory's own (`TrajectorySandbox.workspace()`), created on first use and
destroyed by the runner once the submission is recorded.
"""

from __future__ import annotations

import time

from mcp_evalserver.agents.external import ClaimBoard, ExternalTrajectory
from mcp_evalserver.errors import Conflict, NotFound
from mcp_evalserver.server.models import (
    Branches,
    Checkpoint,
    ClaimedTrajectory,
    Diff,
    ExecOutput,
    FileContent,
    FileWritten,
    Restored,
    Submitted,
)
from mcp_evalserver.server.trajectory.tools import TrajectoryTools


class ExternalTrajectories:
    """What a client does with the trajectories it claims."""

    def __init__(self, board: ClaimBoard) -> None:
        self.board = board

    async def claim(self, campaign_id: str | None, wait_s: float) -> ClaimedTrajectory:
        """Claims a waiting trajectory.

        Raises:
            NotFound: none is waiting (after `wait_s`).
        """
        trajectory, claim_id = await self.board.claim(campaign_id, wait_s)
        return self._claimed(trajectory, claim_id)

    def _claimed(self, trajectory: ExternalTrajectory, claim_id: str) -> ClaimedTrajectory:
        context = trajectory.context
        task = context.task
        return ClaimedTrajectory(
            claim_id=claim_id,
            campaign_id=context.campaign_id,
            trajectory_id=context.trajectory_id,
            task_id=task.id,
            prompt=task.prompt,
            workdir=TrajectoryTools(context).workdir,
            has_workspace=context.sandbox.available,
            lease_s=trajectory.lease_s,
            reclaimed=trajectory.claims > 1,
            attempt=context.attempt,
            idempotency_key=context.idempotency_key,
        )

    async def exec(
        self, claim_id: str, command: str, timeout_s: float, stdin: str | None = None
    ) -> ExecOutput:
        """Runs a shell command in the claimed trajectory's workspace.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live.
            InvalidInput: empty command, bad cwd, or the task has no workspace.
            SandboxUnavailable: the instance is gone.
        """
        async with self.board.use(claim_id) as trajectory:
            return await TrajectoryTools(trajectory.context).exec(command, timeout_s, stdin)

    async def read(self, claim_id: str, path: str, max_bytes: int) -> FileContent:
        """Reads a file from the workspace.

        Raises:
            NotFound: no such claim or file.
            Conflict: the claim is no longer live.
            InvalidInput: not a regular file, or the task has no workspace.
            LimitExceeded: the file is larger than `max_bytes`.
        """
        async with self.board.use(claim_id) as trajectory:
            return await TrajectoryTools(trajectory.context).read(path, max_bytes)

    async def write(self, claim_id: str, path: str, content: str) -> FileWritten:
        """Writes a file in the workspace (parents created).

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live.
            InvalidInput: the path is read-only (outside the workspace) or a directory.
        """
        async with self.board.use(claim_id) as trajectory:
            return await TrajectoryTools(trajectory.context).write(path, content)

    async def diff(self, claim_id: str) -> Diff:
        """The workspace's changes against the base commit.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live, or the workdir is not a git repository.
        """
        async with self.board.use(claim_id) as trajectory:
            return await TrajectoryTools(trajectory.context).diff()

    async def checkpoint(self, claim_id: str) -> Checkpoint:
        """Freezes the workspace's files now; `restore` returns to them.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live, or a command is running.
            InvalidInput: the task has no workspace.
        """
        async with self.board.use(claim_id) as trajectory:
            return await TrajectoryTools(trajectory.context).checkpoint()

    async def restore(self, claim_id: str, checkpoint_id: str) -> Restored:
        """Returns the workspace's files to a checkpoint; later changes are discarded.

        Raises:
            NotFound: no such claim or checkpoint.
            Conflict: the claim is no longer live, or a command is running.
        """
        async with self.board.use(claim_id) as trajectory:
            return await TrajectoryTools(trajectory.context).restore(checkpoint_id)

    async def fork(self, claim_id: str, n: int, wait_s: float = 60.0) -> Branches:
        """Forks the claimed trajectory into `n` new ones, each claimed for this client.

        Each starts with the workspace as it is now, is submitted and scored on its own, and
        is recorded in the ledger with its parent and the checkpoint it started from. Branches
        count against the campaign's limits: those that found no free slot within `wait_s`
        are listed as `waiting` (claim them later with claim_trajectory).

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live, a command is running, or the run cannot
                start trajectories now.
            InvalidInput: `n` out of range, or the task has no workspace.
        """
        async with self.board.use(claim_id) as trajectory:
            context = trajectory.context
            if context.branch is None:
                raise Conflict(f"trajectory {context.trajectory_id} cannot be forked here")
            TrajectoryTools(context).require_workspace()
            branches = await context.branch(n)
        claimed, waiting = [], []
        deadline = time.monotonic() + wait_s
        for branch_id in branches:
            try:
                found, branch_claim = await self.board.claim(
                    context.campaign_id,
                    max(0.0, deadline - time.monotonic()),
                    trajectory_id=branch_id,
                )
            except NotFound:
                waiting.append(branch_id)
                continue
            claimed.append(self._claimed(found, branch_claim))
        return Branches(branches=claimed, waiting=waiting)

    async def submit(self, claim_id: str, answer: str | None) -> Submitted:
        """Hands in the workspace's diff (when it has one) and the answer, if any.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live (already submitted, lapsed).
            InvalidInput: nothing to submit (no workspace and no answer).
        """
        async with self.board.use(claim_id) as trajectory:
            submission, submitted = await TrajectoryTools(trajectory.context).submission(answer)
            self.board.submit(claim_id, submission)
        return submitted
