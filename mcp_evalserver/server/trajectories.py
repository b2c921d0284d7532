"""The sandbox tools of external trajectories: claim, exec, read, write, diff, submit.

Every call names a claim id (returned by `claim`); holding the claim renews its lease. The
workspace is the trajectory's own (`TrajectorySandbox.workspace()`), created on first use and
destroyed by the runner once the submission is recorded.
"""

from __future__ import annotations

import re

from mcp_evalserver.agents.base import Submission
from mcp_evalserver.agents.external import ClaimBoard, ExternalTrajectory
from mcp_evalserver.errors import Conflict, InvalidInput, NotFound
from mcp_evalserver.sandbox.base import DEFAULT_WORKDIR, Workspace
from mcp_evalserver.server.models import (
    ClaimedTrajectory,
    Diff,
    ExecOutput,
    FileContent,
    FileWritten,
    Submitted,
)

_DIFF_FILE = re.compile(r"^diff --git a/(.*) b/", re.MULTILINE)


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
        context = trajectory.context
        task = context.task
        return ClaimedTrajectory(
            claim_id=claim_id,
            campaign_id=context.campaign_id,
            trajectory_id=context.trajectory_id,
            task_id=task.id,
            prompt=task.prompt,
            workdir=_workdir(trajectory),
            has_workspace=context.sandbox.available,
            lease_s=trajectory.lease_s,
            reclaimed=trajectory.claims > 1,
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
        if not command.strip():
            raise InvalidInput("`command` is empty: give a shell command such as `ls -la`")
        async with self.board.use(claim_id) as trajectory:
            workspace = await _workspace(trajectory)
            result = await workspace.exec(command, timeout=timeout_s, stdin=stdin)
        return ExecOutput(
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            stdout_truncated=result.stdout_truncated,
            stderr_truncated=result.stderr_truncated,
            timed_out=result.timed_out,
            duration_s=result.duration_s,
        )

    async def read(self, claim_id: str, path: str, max_bytes: int) -> FileContent:
        """Reads a file from the workspace.

        Raises:
            NotFound: no such claim or file.
            Conflict: the claim is no longer live.
            InvalidInput: not a regular file, or the task has no workspace.
            LimitExceeded: the file is larger than `max_bytes`.
        """
        async with self.board.use(claim_id) as trajectory:
            try:
                data = await (await _workspace(trajectory)).read_file(path, max_bytes=max_bytes)
            except NotFound as exc:
                raise NotFound(
                    f"{exc} (relative paths start at {_workdir(trajectory)}; list files with "
                    "sandbox_exec, e.g. `ls -la` or `git ls-files`)"
                ) from exc
        try:
            text, binary = data.decode("utf-8"), False
        except UnicodeDecodeError:
            text, binary = data.decode("utf-8", errors="replace"), True
        return FileContent(path=path, content=text, size=len(data), binary=binary)

    async def write(self, claim_id: str, path: str, content: str) -> FileWritten:
        """Writes a file in the workspace (parents created).

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live.
            InvalidInput: the path is read-only (outside the workspace) or a directory.
        """
        data = content.encode()
        async with self.board.use(claim_id) as trajectory:
            try:
                await (await _workspace(trajectory)).write_file(path, data)
            except InvalidInput as exc:
                raise InvalidInput(
                    f"{exc}: only the workspace is writable; write under "
                    f"{_workdir(trajectory)} (or use a relative path)"
                ) from exc
        return FileWritten(path=path, size=len(data))

    async def diff(self, claim_id: str) -> Diff:
        """The workspace's changes against the base commit.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live, or the workdir is not a git repository.
        """
        async with self.board.use(claim_id) as trajectory:
            patch = await (await _workspace(trajectory)).diff()
        return Diff(patch=patch, files=_DIFF_FILE.findall(patch))

    async def submit(self, claim_id: str, answer: str | None) -> Submitted:
        """Hands in the workspace's diff (when it has one) and the answer, if any.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live (already submitted, lapsed).
            InvalidInput: nothing to submit (no workspace and no answer).
        """
        async with self.board.use(claim_id) as trajectory:
            patch: str | None = None
            if trajectory.context.sandbox.available:
                try:
                    patch = await (await _workspace(trajectory)).diff() or None
                except Conflict:
                    if answer is None:
                        raise  # not a git repository: only an answer can be handed in
            elif answer is None:
                raise InvalidInput(
                    f"task {trajectory.context.task.id} has no workspace: submit an `answer`"
                )
            self.board.submit(claim_id, Submission(answer=answer, patch=patch))
        return Submitted(
            campaign_id=trajectory.campaign_id,
            trajectory_id=trajectory.trajectory_id,
            answer=answer,
            patch_bytes=len(patch.encode()) if patch else 0,
            files=_DIFF_FILE.findall(patch or ""),
        )


def _workdir(trajectory: ExternalTrajectory) -> str | None:
    task = trajectory.context.task
    return task.workdir or task.path or (DEFAULT_WORKDIR if task.image else None)


async def _workspace(trajectory: ExternalTrajectory) -> Workspace:
    sandbox = trajectory.context.sandbox
    if not sandbox.available:
        raise InvalidInput(
            f"task {trajectory.context.task.id} has no workspace (it names no `image` or "
            "`path`): there is nothing to run or edit; submit an `answer` instead"
        )
    return await sandbox.workspace()
