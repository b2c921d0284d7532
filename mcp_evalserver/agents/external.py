"""External agents: trajectories driven from outside the server, through its MCP tools.

The agent's `generate` publishes its trajectory on a `ClaimBoard` and waits. A client claims it
(`claim_trajectory`), works in the trajectory's workspace through the sandbox tools, and submits;
the submission is what `generate` returns, so the runner records and scores it like any other;
the submit is answered once that record is durable (`ExternalTrajectory.recorded`).

A claim is a lease: every tool call on it renews it, and a call still running holds it (a
command may run for an hour; a lease is minutes). A client that goes away stops renewing, and
once the lease has passed with none of its calls running, another client may claim the
trajectory, with its workspace as it was (the workspace lives as long as `generate` waits, not
as long as a client). Calls that a worker of `--workers N` runs hold it by renewing it
(server/front); any still running under a claim taken over are cancelled, so two clients never
work in one workspace at once.
"""

from __future__ import annotations

import heapq
import itertools
import secrets
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

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
    #: Tool calls on it running now (`ClaimBoard.use`, or a worker's: server/front).
    running: int = 0
    #: The tool calls its clients made, in order, whoever held the claim: its transcript.
    transcript: list[dict[str, Any]] = field(default_factory=list)

    @property
    def campaign_id(self) -> str:
        return self.context.campaign_id

    @property
    def trajectory_id(self) -> str:
        return self.context.trajectory_id

    async def recorded(self) -> None:
        """Returns once its submission is durable in the ledger: only then is a submit answered
        (a crash of the driving process after that loses nothing).

        Raises:
            Conflict: the attempt ended without recording it (the run stopped, a timeout, a
                disk error): the message says which.
            Timeout: it was not recorded in time.
        """
        if self.context.recorded is not None:
            await self.context.recorded.wait()

    def claimable(self, now: float) -> bool:
        """Unclaimed, or claimed by a client whose lease has passed with no call running."""
        lapsed = now >= self.expires_at and not self.running
        return self.submission is None and (self.claim_id is None or lapsed)


class ClaimBoard:
    """The external trajectories of one server process, and who holds which."""

    def __init__(self) -> None:
        # Campaign -> trajectory id -> trajectory: a status reads its own campaign's only.
        self._open: dict[str, dict[str, ExternalTrajectory]] = {}
        # The open trajectories never claimed, in the order published: a claim takes the
        # first at once, however many thousands are waiting.
        self._unclaimed: dict[str, dict[str, ExternalTrajectory]] = {}
        # (lease end when last looked at, tie-break, trajectory) of claimed ones: the lapsed
        # are found at its top (a renewed lease is pushed back with its new end).
        self._leases: list[tuple[float, int, ExternalTrajectory]] = []
        self._pushes = itertools.count()
        self._by_claim: dict[str, ExternalTrajectory] = {}
        self._closed: dict[str, str] = {}
        self._changed = anyio.Event()

    def publish(self, trajectory: ExternalTrajectory) -> None:
        """Makes a trajectory claimable."""
        key = trajectory.trajectory_id
        self._open.setdefault(trajectory.campaign_id, {})[key] = trajectory
        self._unclaimed.setdefault(trajectory.campaign_id, {})[key] = trajectory
        self._wake()

    def withdraw(self, trajectory: ExternalTrajectory, reason: str) -> None:
        """Removes a trajectory; a claim still live answers `reason` and its calls are cancelled.

        After a submission the claim is already closed, and the submitting call is left to finish.
        """
        for index in (self._open, self._unclaimed):
            mine = index.get(trajectory.campaign_id, {})
            mine.pop(trajectory.trajectory_id, None)
            if not mine:
                index.pop(trajectory.campaign_id, None)
        if trajectory.claim_id is not None and trajectory.claim_id in self._by_claim:
            self._close(trajectory.claim_id, reason)
            for scope in trajectory.calls:
                scope.cancel()

    def waiting(self, campaign_id: str) -> tuple[int, int]:
        """(claimable, claimed) trajectories of a campaign right now."""
        now = time.monotonic()
        mine = self._open.get(campaign_id, {})
        claimable = sum(t.claimable(now) for t in mine.values())
        return claimable, len(mine) - claimable

    async def claim(
        self, campaign_id: str | None = None, wait_s: float = 0.0, trajectory_id: str | None = None
    ) -> tuple[ExternalTrajectory, str]:
        """Claims a trajectory (of one campaign, or any; or that one trajectory), waiting up to
        `wait_s` for one. One whose claim lapsed is taken before one never claimed (its
        client went away mid-work; its trajectory's time runs).

        Returns the trajectory and the new claim id, which every later call names.

        Raises:
            NotFound: none became claimable in time.
        """
        deadline = time.monotonic() + wait_s
        while True:
            now = time.monotonic()
            found = self._lapsed(now, campaign_id, trajectory_id) or self._first_unclaimed(
                campaign_id, trajectory_id
            )
            if found is not None:
                return found, self._take(found, now)
            if now >= deadline:
                where = f"campaign {campaign_id!r}" if campaign_id else "any campaign"
                raise NotFound(
                    f"no trajectory of {where} is waiting for a client: every one is claimed, "
                    "submitted, or not started yet. Start a campaign whose agent is "
                    '{"type": "external"}, or call claim_trajectory again with wait_s > 0.'
                )
            # Wake on a new publication, or when the next lease may lapse.
            wake_at = min(deadline, self._leases[0][0]) if self._leases else deadline
            with anyio.move_on_after(max(0.0, wake_at - now)):
                await self._changed.wait()

    def _first_unclaimed(
        self, campaign_id: str | None, trajectory_id: str | None
    ) -> ExternalTrajectory | None:
        campaigns = [campaign_id] if campaign_id is not None else list(self._unclaimed)
        for campaign in campaigns:
            unclaimed = self._unclaimed.get(campaign, {})
            if trajectory_id is not None:
                if (found := unclaimed.get(trajectory_id)) is not None:
                    return found
            elif unclaimed:
                return next(iter(unclaimed.values()))
        return None

    def _lapsed(
        self, now: float, campaign_id: str | None, trajectory_id: str | None
    ) -> ExternalTrajectory | None:
        """The first claimed trajectory whose lease has passed and that matches, if any."""
        passed_over: list[tuple[float, int, ExternalTrajectory]] = []
        found = None
        while self._leases and self._leases[0][0] <= now:
            entry = heapq.heappop(self._leases)
            trajectory = entry[2]
            open_now = self._open.get(trajectory.campaign_id, {})
            if open_now.get(trajectory.trajectory_id) is not trajectory:
                continue  # withdrawn
            if trajectory.running and trajectory.submission is None:
                # Held by a call: look again a lease after now (the call's end renews it).
                passed_over.append((now + trajectory.lease_s, next(self._pushes), trajectory))
                continue
            if not trajectory.claimable(now):
                if trajectory.submission is None:  # renewed: look again when it may lapse
                    heapq.heappush(
                        self._leases, (trajectory.expires_at, next(self._pushes), trajectory)
                    )
                continue
            if campaign_id in (None, trajectory.campaign_id) and trajectory_id in (
                None,
                trajectory.trajectory_id,
            ):
                found = trajectory
                break
            passed_over.append(entry)
        for entry in passed_over:
            heapq.heappush(self._leases, entry)
        return found

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
        # 96 random bits: unguessable, and sent in every call of the claim (each byte costs).
        claim_id = secrets.token_urlsafe(12)
        trajectory.claim_id = claim_id
        trajectory.expires_at = now + trajectory.lease_s
        unclaimed = self._unclaimed.get(trajectory.campaign_id, {})
        unclaimed.pop(trajectory.trajectory_id, None)
        if not unclaimed:
            self._unclaimed.pop(trajectory.campaign_id, None)
        heapq.heappush(self._leases, (trajectory.expires_at, next(self._pushes), trajectory))
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

    def use(self, claim_id: str) -> AbstractAsyncContextManager[ExternalTrajectory]:
        """Holds a claim for one tool call (`async with`): renews its lease before and after,
        and no other client may take it over while the call runs.

        Raises:
            Conflict: the claim is no longer live, or was taken over during the call.
            NotFound: no such claim.
        """
        return _Use(self, claim_id)

    def begin(self, claim_id: str, call: Call) -> ExternalTrajectory:
        """Starts a tool call under a claim (`use`, or a call another process runs): renews
        the lease; `call` is cancelled if the claim is taken over or withdrawn meanwhile.

        Raises:
            Conflict: the claim is no longer live.
            NotFound: no such claim.
        """
        trajectory = self.renew(claim_id)
        trajectory.calls.add(call)
        return trajectory

    def renew(self, claim_id: str) -> ExternalTrajectory:
        """Renews a live claim's lease (a call under it, here or in another process).

        Raises:
            Conflict: the claim is no longer live.
            NotFound: no such claim.
        """
        trajectory = self.get(claim_id)
        trajectory.expires_at = time.monotonic() + trajectory.lease_s
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

        Acknowledge it only after `ExternalTrajectory.recorded` (holding no claim meanwhile:
        the runner closes the workspace before it records).

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
        submission = trajectory.submission
        assert submission is not None
        if submission.transcript is None and trajectory.transcript:
            submission = submission.model_copy(update={"transcript": trajectory.transcript})
        return submission


_SCOPE_CLASS: type[anyio.CancelScope] | None = None


def _cancel_scope() -> anyio.CancelScope:
    """A new cancel scope of the event loop's anyio backend (asyncio: the server runs on it
    alone), made by its class: `anyio.CancelScope()` looks the backend up at each call,
    three quarters of the cost of making one (2.5 of 3.3 us, timeit)."""
    global _SCOPE_CLASS
    if _SCOPE_CLASS is None:
        scope = anyio.CancelScope()
        _SCOPE_CLASS = type(scope)
        return scope
    return _SCOPE_CLASS()


class _Use:
    """`ClaimBoard.use`: the call runs in a cancel scope of its own, which a takeover cancels;
    a class rather than a generator's context manager (every workspace call enters one)."""

    __slots__ = ("board", "claim_id", "scope", "trajectory")

    def __init__(self, board: ClaimBoard, claim_id: str) -> None:
        self.board = board
        self.claim_id = claim_id
        self.scope = _cancel_scope()

    async def __aenter__(self) -> ExternalTrajectory:
        scope = self.scope
        scope.__enter__()
        try:
            trajectory = self.board.begin(self.claim_id, scope)
        except BaseException as exc:
            scope.__exit__(type(exc), exc, exc.__traceback__)
            raise
        trajectory.running += 1
        self.trajectory = trajectory
        return trajectory

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        trajectory, scope = self.trajectory, self.scope
        trajectory.running -= 1
        trajectory.calls.discard(scope)
        swallowed = scope.__exit__(exc_type, exc, traceback)
        if exc is None or swallowed:  # a takeover's cancel ends in Conflict here
            self.board.end(self.claim_id, trajectory, scope, interrupted=scope.cancelled_caught)
        return bool(swallowed)
