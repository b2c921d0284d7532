"""The sandbox tools of external trajectories: claim, exec, read, write, diff, submit.

Every call names a claim id (returned by `claim`); holding the claim renews its lease. The
workspace is the trajectory's own (`TrajectorySandbox.workspace()`), created on first use and
destroyed by the runner once the submission is recorded.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, TypeVar

from mcp_evalserver.agents.external import ClaimBoard, ExternalTrajectory
from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS
from mcp_evalserver.errors import Conflict, NotFound
from mcp_evalserver.server.models import Branches, ClaimedTrajectory, Submitted
from mcp_evalserver.server.trajectory.tools import TrajectoryTools
from mcp_evalserver.server.trajectory.transcript import call_entry, note_result

_P = ParamSpec("_P")
_R = TypeVar("_R")
TOOLS = {tool.name: tool for tool in WORKSPACE_TOOLS}


def _on_claim(
    tool: Callable[Concatenate[TrajectoryTools, _P], Awaitable[_R]],
) -> Callable[Concatenate[ExternalTrajectories, str, _P], Awaitable[_R]]:
    """A `TrajectoryTools` method as a method of `ExternalTrajectories`: the same tool on the
    workspace of the trajectory that a claim (the first argument) holds.

    Each call holds the claim (`ClaimBoard.use`), which renews its lease, and is kept in the
    trajectory's transcript. It raises what `tool` raises, and `NotFound` (no such claim) or
    `Conflict` (the claim is no longer live).
    """
    declared = TOOLS[tool.__name__]
    signature = inspect.signature(tool)

    # Wrapped: its return type stays `tool`'s, which the MCP server publishes as the output.
    @functools.wraps(tool)
    async def on_claim(
        self: ExternalTrajectories, claim_id: str, /, *args: _P.args, **kwargs: _P.kwargs
    ) -> _R:
        async with self.board.use(claim_id) as trajectory:
            # By name, as the MCP tools call it: no binding needed to name the arguments.
            arguments = signature.bind_partial(None, *args, **kwargs).arguments if args else kwargs
            entry = call_entry(declared, "claimed", arguments)
            trajectory.transcript.append(entry)
            result = await tool(TrajectoryTools(trajectory.context), *args, **kwargs)
            note_result(entry, result)
            return result

    return on_claim


class ExternalTrajectories:
    """What a client does with the trajectories it claims.

    Each workspace tool is a method named after it (`agents.tool_table`) whose first argument
    is the claim id; the MCP server finds it by that name.
    """

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

    sandbox_exec = _on_claim(TrajectoryTools.sandbox_exec)
    read_file = _on_claim(TrajectoryTools.read_file)
    write_file = _on_claim(TrajectoryTools.write_file)
    edit_file = _on_claim(TrajectoryTools.edit_file)
    search = _on_claim(TrajectoryTools.search)
    list_files = _on_claim(TrajectoryTools.list_files)
    get_diff = _on_claim(TrajectoryTools.get_diff)
    checkpoint = _on_claim(TrajectoryTools.checkpoint)
    restore = _on_claim(TrajectoryTools.restore)
    report_usage = _on_claim(TrajectoryTools.report_usage)

    async def fork_trajectory(self, claim_id: str, n: int, wait_s: float = 60.0) -> Branches:
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
            trajectory.transcript.append(call_entry(TOOLS["fork_trajectory"], "claimed", {"n": n}))
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
        """Hands in the workspace's diff (when it has one) and the answer, if any; returns
        once the submission is durable in the ledger.

        Raises:
            NotFound: no such claim.
            Conflict: the claim is no longer live (already submitted, lapsed), or the
                submission could not be recorded (the message says why).
            InvalidInput: nothing to submit (no workspace and no answer).
            Timeout: the submission was not recorded in time.
        """
        async with self.board.use(claim_id) as trajectory:
            trajectory.transcript.append(call_entry(TOOLS["submit"], "claimed", {"answer": answer}))
            tools = TrajectoryTools(trajectory.context)
            submission, submitted = await tools.prepare_submission(answer)
            self.board.submit(claim_id, submission)
        # Outside the claim: the runner closes the workspace before it records.
        await trajectory.recorded()
        return submitted
