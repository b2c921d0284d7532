"""External agents: trajectories driven from outside the server, through its MCP tools.

The agent's `generate` publishes its trajectory on a `ClaimBoard` and waits. A client claims it
(`claim_trajectory`), works in the trajectory's workspace through the sandbox tools, and submits;
the submission is what `generate` returns, so the runner records and scores it like any other.

A claim is a lease: every tool call on it renews it. A client that goes away stops renewing, and
once the lease has passed another client may claim the trajectory, with its workspace as it was
(the workspace lives as long as `generate` waits, not as long as a client). Calls still running
under the lapsed claim are cancelled when the new claim is made, so two clients never work in
one workspace at once.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

import anyio

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.errors import Conflict, NotFound
from mcp_evalserver.spec.agents import ExternalAgentConfig
from mcp_evalserver.spec.submission import Submission

#: How many closed claims are remembered, so late calls get a precise reason, not "unknown".
_CLOSED_MEMORY = 10_000


class Call(Protocol):
    """A tool call running under a claim: cancelled when the claim is taken over or withdrawn
    (an `anyio.CancelScope` here, or a call another process runs: server/front)."""

    def cancel(self) -> None: ...


@dataclass(eq=False)
class ExternalTrajectory:
    """One trajectory waiting for (or held by) an external client."""

    context: TrajectoryContext
    lease_s: float
    claim_id: str | None = None
    expires_at: float = 0.0
    claims: int = 0
    submission: Submission | None = None
    submitted: anyio.Event = field(default_factory=anyio.Event)
    calls: set[Call] = field(default_factory=set)

    @property
    def campaign_id(self) -> str:
        return self.context.campaign_id

    @property
    def trajectory_id(self) -> str:
        return self.context.trajectory_id

    def claimable(self, now: float) -> bool:
        """Unclaimed, or claimed by a client whose lease has passed."""
        return self.submission is None and (self.claim_id is None or now >= self.expires_at)


class ClaimBoard:
    """The external trajectories of one server process, and who holds which."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], ExternalTrajectory] = {}
        self._by_claim: dict[str, ExternalTrajectory] = {}
        self._closed: dict[str, str] = {}
        self._changed = anyio.Event()

    def publish(self, trajectory: ExternalTrajectory) -> None:
        """Makes a trajectory claimable."""
        self._open[(trajectory.campaign_id, trajectory.trajectory_id)] = trajectory
        self._wake()

    def withdraw(self, trajectory: ExternalTrajectory, reason: str) -> None:
        """Removes a trajectory; a claim still live answers `reason` and its calls are cancelled.

        After a submission the claim is already closed, and the submitting call is left to finish.
        """
        self._open.pop((trajectory.campaign_id, trajectory.trajectory_id), None)
        if trajectory.claim_id is not None and trajectory.claim_id in self._by_claim:
            self._close(trajectory.claim_id, reason)
            for scope in trajectory.calls:
                scope.cancel()

    def waiting(self, campaign_id: str) -> tuple[int, int]:
        """(claimable, claimed) trajectories of a campaign right now."""
        now = time.monotonic()
        mine = [t for (c, _), t in self._open.items() if c == campaign_id]
        claimable = sum(t.claimable(now) for t in mine)
        return claimable, len(mine) - claimable

    async def claim(
        self, campaign_id: str | None = None, wait_s: float = 0.0, trajectory_id: str | None = None
    ) -> tuple[ExternalTrajectory, str]:
        """Claims a trajectory (of one campaign, or any; or that one trajectory), waiting up to
        `wait_s` for one.

        Returns the trajectory and the new claim id, which every later call names.

        Raises:
            NotFound: none became claimable in time.
        """
        deadline = time.monotonic() + wait_s
        while True:
            now = time.monotonic()
            for trajectory in self._open.values():
                if (
                    campaign_id in (None, trajectory.campaign_id)
                    and trajectory_id in (None, trajectory.trajectory_id)
                    and trajectory.claimable(now)
                ):
                    return trajectory, self._take(trajectory, now)
            if now >= deadline:
                where = f"campaign {campaign_id!r}" if campaign_id else "any campaign"
                raise NotFound(
                    f"no trajectory of {where} is waiting for a client: every one is claimed, "
                    "submitted, or not started yet. Start a campaign whose agent is "
                    '{"type": "external"}, or call claim_trajectory again with wait_s > 0.'
                )
            # Wake on a new publication, or when the next lease lapses.
            leases = [t.expires_at for t in self._open.values() if t.claim_id is not None]
            wake_at = min([deadline, *[e for e in leases if e > now]])
            with anyio.move_on_after(max(0.0, wake_at - now)):
                await self._changed.wait()

    def _take(self, trajectory: ExternalTrajectory, now: float) -> str:
        previous = trajectory.claim_id
        if previous is not None:
            self._close(
                previous,
                f"the lease on {trajectory.trajectory_id} lapsed ({trajectory.lease_s:g}s without "
                "a call) and another client claimed it; claim another with claim_trajectory",
            )
            for scope in trajectory.calls:
                scope.cancel()
        claim_id = secrets.token_urlsafe(18)
        trajectory.claim_id = claim_id
        trajectory.expires_at = now + trajectory.lease_s
        trajectory.claims += 1
        self._by_claim[claim_id] = trajectory
        return claim_id

    def get(self, claim_id: str) -> ExternalTrajectory:
        """The trajectory a live claim holds.

        Raises:
            Conflict: the claim was submitted, lapsed and was taken over, or its trajectory ended.
            NotFound: no such claim.
        """
        trajectory = self._by_claim.get(claim_id)
        if trajectory is None or trajectory.claim_id != claim_id:
            if claim_id in self._closed:
                raise Conflict(self._closed[claim_id])
            raise NotFound(
                f"no claim {claim_id!r} on this server (claims do not survive a restart); "
                "get one with claim_trajectory"
            )
        return trajectory

    @asynccontextmanager
    async def use(self, claim_id: str) -> AsyncIterator[ExternalTrajectory]:
        """Holds a claim for one tool call: renews its lease before and after.

        Raises:
            Conflict: the claim is no longer live, or was taken over during the call.
            NotFound: no such claim.
        """
        with anyio.CancelScope() as scope:
            trajectory = self.begin(claim_id, scope)
            try:
                yield trajectory
            finally:
                trajectory.calls.discard(scope)
        self.end(claim_id, trajectory, scope, interrupted=scope.cancelled_caught)

    def begin(self, claim_id: str, call: Call) -> ExternalTrajectory:
        """Starts a tool call under a claim (`use`, or a call another process runs): renews
        the lease; `call` is cancelled if the claim is taken over or withdrawn meanwhile.

        Raises:
            Conflict: the claim is no longer live.
            NotFound: no such claim.
        """
        trajectory = self.get(claim_id)
        trajectory.expires_at = time.monotonic() + trajectory.lease_s
        trajectory.calls.add(call)
        return trajectory

    def end(
        self, claim_id: str, trajectory: ExternalTrajectory, call: Call, *, interrupted: bool
    ) -> None:
        """Ends a call `begin` started: renews the lease again.

        Raises:
            Conflict: the call was `interrupted` (its claim ended meanwhile: the message says why).
        """
        trajectory.calls.discard(call)
        if interrupted:
            raise Conflict(self.ended(claim_id) or f"claim {claim_id!r} was interrupted")
        if trajectory.claim_id == claim_id:
            trajectory.expires_at = time.monotonic() + trajectory.lease_s

    def ended(self, claim_id: str) -> str | None:
        """Why a claim ended (submitted, taken over, withdrawn), or None while it is live."""
        return self._closed.get(claim_id)

    def submit(self, claim_id: str, submission: Submission) -> ExternalTrajectory:
        """Hands a submission to the waiting agent; the claim then refuses every call.

        Raises:
            Conflict: the claim is no longer live.
            NotFound: no such claim.
        """
        trajectory = self.get(claim_id)
        trajectory.submission = submission
        self._close(
            claim_id,
            f"trajectory {trajectory.trajectory_id} was submitted; its workspace is gone. "
            "Claim another with claim_trajectory, or read results with campaign_status",
        )
        trajectory.submitted.set()
        return trajectory

    def _close(self, claim_id: str, reason: str) -> None:
        self._by_claim.pop(claim_id, None)
        self._closed[claim_id] = reason
        if len(self._closed) > _CLOSED_MEMORY:
            self._closed.pop(next(iter(self._closed)))

    def _wake(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()


class ExternalAgent(Agent):
    """Waits for an external client to claim, work on and submit each trajectory."""

    def __init__(self, config: ExternalAgentConfig, board: ClaimBoard) -> None:
        self.config = config
        self.board = board

    async def generate(self, context: TrajectoryContext) -> Submission:
        trajectory = ExternalTrajectory(context, self.config.lease_s)
        self.board.publish(trajectory)
        reason = (
            f"trajectory {context.trajectory_id} stopped waiting for a submission (its campaign "
            "was cancelled or the trajectory timed out); see campaign_status"
        )
        try:
            await trajectory.submitted.wait()
        finally:
            self.board.withdraw(trajectory, reason)
        assert trajectory.submission is not None
        return trajectory.submission
