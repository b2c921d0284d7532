"""`ClaimBoard.use`: what holding a claim for one tool call does (every workspace call of an
external client runs inside it)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import cast

import anyio
import pytest

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.external import ClaimBoard, ExternalTrajectory
from mcp_evalserver.errors import Conflict, InvalidInput, NotFound

pytestmark = pytest.mark.anyio


def _waiting(lease_s: float = 300.0) -> ExternalTrajectory:
    context = SimpleNamespace(campaign_id="c", trajectory_id="t@0")
    return ExternalTrajectory(cast(TrajectoryContext, context), lease_s)


async def _claimed(lease_s: float = 300.0) -> tuple[ClaimBoard, ExternalTrajectory, str]:
    board = ClaimBoard()
    trajectory = _waiting(lease_s)
    board.publish(trajectory)
    found, claim_id = await board.claim("c")
    assert found is trajectory
    return board, trajectory, claim_id


async def test_a_call_renews_the_lease_and_holds_the_claim_only_while_it_runs() -> None:
    board, trajectory, claim_id = await _claimed(lease_s=300.0)
    trajectory.expires_at = 0.0  # lapsed: the call renews it
    async with board.use(claim_id) as held:
        assert held is trajectory
        assert trajectory.running == 1
        assert len(trajectory.calls) == 1
        assert trajectory.expires_at > time.monotonic() + 200
    assert trajectory.running == 0
    assert not trajectory.calls


async def test_a_calls_own_error_comes_out_unchanged_and_releases_the_claim() -> None:
    board, trajectory, claim_id = await _claimed()
    with pytest.raises(InvalidInput, match="the tool's own"):
        async with board.use(claim_id):
            raise InvalidInput("the tool's own")
    assert trajectory.running == 0
    assert not trajectory.calls
    async with board.use(claim_id):  # still live
        pass


async def test_a_running_call_whose_trajectory_is_withdrawn_is_cancelled_and_says_why() -> None:
    board, trajectory, claim_id = await _claimed()
    entered = anyio.Event()
    after: list[str] = []

    async def call() -> None:
        async with board.use(claim_id):
            entered.set()
            await anyio.sleep_forever()
        after.append("ran on")  # never: the withdrawal's Conflict leaves the block

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            outcome: list[BaseException] = []

            async def run() -> None:
                try:
                    await call()
                except Conflict as exc:
                    outcome.append(exc)

            group.start_soon(run)
            await entered.wait()
            board.withdraw(trajectory, "the campaign was cancelled; claim another")
    assert after == []
    assert len(outcome) == 1
    assert "the campaign was cancelled" in str(outcome[0])
    assert trajectory.running == 0
    assert not trajectory.calls
    with pytest.raises(Conflict, match="the campaign was cancelled"):
        async with board.use(claim_id):
            pass


async def test_an_outer_cancel_passes_through_a_call_and_leaves_the_claim_live() -> None:
    board, trajectory, claim_id = await _claimed()
    with anyio.move_on_after(0.01) as outer:
        async with board.use(claim_id):
            await anyio.sleep_forever()
    assert outer.cancelled_caught
    assert trajectory.running == 0
    assert not trajectory.calls
    async with board.use(claim_id) as held:  # not the claim's cancel: nothing was ended
        assert held is trajectory


async def test_an_unknown_or_closed_claim_is_refused_before_the_call_runs() -> None:
    board, trajectory, claim_id = await _claimed()
    ran: list[str] = []
    with pytest.raises(NotFound, match="claim_trajectory"):
        async with board.use("no-such-claim"):
            ran.append("unknown")
    board.withdraw(trajectory, "withdrawn for the test")
    with pytest.raises(Conflict, match="withdrawn for the test"):
        async with board.use(claim_id):
            ran.append("closed")
    assert ran == []
    assert trajectory.running == 0
