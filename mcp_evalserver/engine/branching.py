"""Branching: a trajectory forked into new ones at a checkpoint of its workspace.

A mixin of `drive.RunDrive` (the run's state, ledger and task group are its): a branch is
recorded before it runs, starts in its own fork of the workspace, and, when its fork is gone
(a supervisor died, the run crashed), starts again from the checkpoint kept with the ledger, or
from a clean copy of its task when none was kept.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.engine.records import (
    BranchRestarted,
    CheckpointKept,
    LedgerRecord,
    TrajectoryBranched,
)
from mcp_evalserver.engine.state import CampaignState, TrajectoryState
from mcp_evalserver.errors import (
    Conflict,
    EvalServerError,
    InvalidInput,
    LedgerCorrupt,
    LimitExceeded,
    NotFound,
)
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox, workspace_name
from mcp_evalserver.sandbox.base import Workspace

logger = logging.getLogger(__name__)

#: Branches one `fork_trajectory` call may make.
MAX_BRANCHES = 64
#: The largest checkpoint kept with the ledger for branches that must start again.
MAX_KEPT_BYTES = 256 << 20


class Branching:
    """Forks trajectories and restarts branches; `RunDrive` provides what it declares."""

    state: CampaignState
    ledger: LedgerWriter
    directory: Path
    group: anyio.abc.TaskGroup | None
    forks: dict[str, Workspace]
    keeping: dict[str, anyio.Event]

    if TYPE_CHECKING:

        async def record(self, record: LedgerRecord, *, durable: bool = True) -> None: ...

        async def trajectory(self, trajectory: TrajectoryState) -> None: ...

    async def branch(
        self, parent: TrajectoryState, sandbox: TrajectorySandbox, n: int
    ) -> list[str]:
        """Forks `parent` into `n` new trajectories at a checkpoint of its workspace.

        Each branch (`<parent>.<k>`) is recorded before it runs and is then driven like any
        trajectory of the run, starting in its own fork of the workspace.

        Raises:
            InvalidInput: `n` out of range, or the task has no workspace.
            Conflict: the run is not accepting trajectories, or a command is running.
        """
        if not 1 <= n <= MAX_BRANCHES:
            raise InvalidInput(f"n must be between 1 and {MAX_BRANCHES}, got {n}")
        if self.group is None:
            raise Conflict("this run does not start new trajectories now; try again shortly")
        workspace = await sandbox.workspace()
        checkpoint = await workspace.checkpoint()
        siblings = sum(t.parent == parent.id for t in self.state.trajectories.values())
        branches = []
        kept = anyio.Event()
        for k in range(siblings + 1, siblings + n + 1):
            tid = f"{parent.id}.{k}"
            name = workspace_name(self.state.id, tid, "a1")
            self.forks[tid] = await workspace.fork(name, checkpoint=checkpoint)
            await self.record(
                TrajectoryBranched(trajectory=tid, parent=parent.id, checkpoint=checkpoint)
            )
            self.keeping[tid] = kept
            self.group.start_soon(self.trajectory, self.state.trajectories[tid])
            branches.append(tid)
        # Off the fork's path (it takes about the size of the changes): until it is recorded,
        # a restart of these branches waits for it, and a crash restarts them clean.
        self.group.start_soon(self._keep_checkpoint, workspace, checkpoint, branches, kept)
        return branches

    async def _keep_checkpoint(
        self, workspace: Workspace, checkpoint: str, branches: list[str], kept: anyio.Event
    ) -> None:
        """Keeps the checkpoint's files with the ledger (a `checkpoint_kept` record), for
        `branches` that must start again after their forks are gone (a supervisor died, the
        run crashed)."""
        start: dict[str, Any] | None = None
        start_missing: str | None = None
        try:
            archive = await workspace.export_checkpoint(checkpoint, max_bytes=MAX_KEPT_BYTES)
            start = (await self.ledger.put_artifact(archive, ".tar")).as_json()
        except EvalServerError as exc:
            # The branches run from their forks all the same; only a restart starts clean.
            # Said so that a reader of the ledger knows what a restart will do, and why.
            why = f"its checkpoint could not be kept (a restart starts these branches clean): {exc}"
            start_missing = why[:4000]
        try:
            await self.record(
                CheckpointKept(
                    trajectories=branches,
                    checkpoint=checkpoint,
                    start=start,
                    start_missing=start_missing,
                )
            )
        finally:
            kept.set()

    async def _restart_branch(
        self, trajectory: TrajectoryState, sandbox: TrajectorySandbox
    ) -> None:
        """Starts a branch that has no fork from this run at its recorded checkpoint; when that
        is not to be had, from a clean copy of the task, and the ledger says why.

        Raises:
            InfrastructureError: the instance is unavailable (the attempt is retried).
        """
        if (keeping := self.keeping.get(trajectory.id)) is not None:
            await keeping.wait()
        reason = trajectory.start_missing or "its checkpoint was not kept before the run ended"
        if trajectory.start is not None:
            try:
                archive = await anyio.to_thread.run_sync(
                    read_artifact, self.directory, trajectory.start
                )
                await sandbox.start_at(archive)
            except (NotFound, LedgerCorrupt, InvalidInput, Conflict, LimitExceeded) as exc:
                reason = f"its checkpoint could not be restored: {exc}"
            else:
                checkpoint = trajectory.checkpoint
                await self.record(
                    BranchRestarted(
                        trajectory=trajectory.id, source="checkpoint", checkpoint=checkpoint
                    )
                )
                return
        logger.warning("branch %s starts from a clean copy of its task: %s", trajectory.id, reason)
        await self.record(BranchRestarted(trajectory=trajectory.id, source="clean", reason=reason))
