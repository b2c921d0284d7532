"""A `submit` is answered only once its `generated` record is durable in the ledger.

In memory the ledger file is read the moment each answer arrives. Over HTTP the server is real
(`mcp-evalserver --http`, one process or `--workers 2`) and is SIGKILLed the moment an answer
arrives: after a restart (one process) or a takeover (workers), every answered submission is in
the ledger once and its trajectory never runs again.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client

from mcp_evalserver.agents.base import Recorded
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import Conflict, Timeout
from mcp_evalserver.server.mcp_app import create_server
from tests.server.helpers import answer_spec
from testsupport.rawmcp import CallFailed, RawSession
from testsupport.servers import TOKEN, call, http_client, http_server, sigkill

pytestmark = pytest.mark.anyio

_GENERATION = {"attempt_started", "generated"}


def _records(state_dir: Path, campaign_id: str) -> list[dict[str, Any]]:
    """The campaign's ledger as it is on disk now."""
    ledger = CampaignStore(state_dir).directory(campaign_id) / "ledger.jsonl"
    return [json.loads(line) for line in ledger.read_text().splitlines()]


def _generated(state_dir: Path, campaign_id: str) -> Counter[str]:
    return Counter(
        r["trajectory"] for r in _records(state_dir, campaign_id) if r["kind"] == "generated"
    )


async def test_the_ledger_on_disk_holds_each_submission_the_moment_its_submit_returns(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    async with Client(create_server(state_dir)) as client:
        await call(client, "start_campaign", spec=answer_spec(4, agent="external"), campaign_id="c")
        with anyio.fail_after(60):
            for _ in range(4):
                claim = await call(client, "claim_trajectory", campaign_id="c", wait_s=30)
                number = int(claim["task_id"][1:])
                await call(client, "submit", claim_id=claim["claim_id"], answer=str(number**2))
                # Read before anything else runs: no wait for the campaign's progress.
                assert _generated(state_dir, "c")[claim["trajectory_id"]] == 1
            status = await call(client, "campaign_status", campaign_id="c", wait_s=30)
    assert (status["status"], status["resolved"]) == ("finished", 4)


async def test_a_hand_in_that_was_not_recorded_is_answered_with_why_and_what_to_read() -> None:
    recorded = Recorded("t1@0")
    recorded.fail("the campaign stopped (cancelled, or its server shut down) first")
    recorded.succeed()  # settled once: a late success does not turn the failure around
    with pytest.raises(Conflict) as failed:
        await recorded.wait()
    assert "t1@0 was not recorded: the campaign stopped" in str(failed.value)
    assert "read campaign_status" in str(failed.value)
    with pytest.raises(Timeout) as late:
        await Recorded("t2@0").wait(timeout_s=0)
    assert "may still be recorded: read campaign_status" in str(late.value)


def _driver_pid(state_dir: Path, campaign_id: str) -> int:
    """The process that drives the campaign now: the pid of its ledger's last run."""
    runs = [r for r in _records(state_dir, campaign_id) if r["kind"] == "run_started"]
    return int(runs[-1]["pid"])


async def _sessions(url: str, workers: int) -> list[RawSession]:
    """Handshake sessions, one on each of `workers` distinct server processes: the session ids
    name the worker, and the kernel spreads connections over those listening (a worker started
    again after a kill joins them once it listens)."""
    address = httpx2.URL(url)
    found: dict[str, RawSession] = {}
    while len(found) < workers:
        session = RawSession(str(address.host), int(address.port or 0), TOKEN)
        try:
            await session.open()
        except OSError:
            continue  # reset: it reached the killed process as it died
        worker = str(session.session_id).split("-", 1)[0]
        if worker in found:
            await session.close()
        else:
            found[worker] = session
    return list(found.values())


async def _claim(session: RawSession) -> dict[str, Any]:
    """Claims a trajectory; a claim sent while the lease moves is refused ("call again")."""
    while True:
        try:
            return await session.call_tool(
                "claim_trajectory", {"campaign_id": "kill", "wait_s": 30}
            )
        except CallFailed as exc:
            if "call again" not in str(exc):
                raise


async def _submit_then_kill(url: str, state_dir: Path, workers: int) -> list[str]:
    """Claims and submits one trajectory through each of `workers` server processes, and
    SIGKILLs the driving process the moment the last answer arrives; returns what was answered."""
    sessions = await _sessions(url, workers)
    answered = []
    try:
        for session in sessions:
            claim = await _claim(session)
            number = int(claim["task_id"][1:])
            await session.call_tool(
                "submit", {"claim_id": claim["claim_id"], "answer": str(number**2)}
            )
            answered.append(str(claim["trajectory_id"]))
        await sigkill(_driver_pid(state_dir, "kill"))
    finally:
        for session in sessions:
            with contextlib.suppress(Exception):  # a session on the killed process is gone
                await session.close()
    return answered


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
async def test_submits_answered_just_before_a_sigkill_of_the_driver_count_once_and_never_run_again(
    tmp_path: Path, workers: int
) -> None:
    state_dir = tmp_path / "state"
    total = 2 * workers + 2
    answered: list[str] = []
    with anyio.fail_after(240):
        async with contextlib.AsyncExitStack() as stack:
            url = await stack.enter_async_context(http_server(state_dir, workers=workers))
            async with http_client(url) as client:
                spec = answer_spec(total, agent="external")
                await call(client, "start_campaign", spec=spec, campaign_id="kill")
            # Through every worker (all but one relay their submits to the driver), twice:
            # the second time after the lease has moved (or the server was started again).
            for _ in range(2):
                answered += await _submit_then_kill(url, state_dir, workers)
                if workers == 1:  # its one process is dead: a restarted server resumes it
                    await stack.aclose()
                    url = await stack.enter_async_context(http_server(state_dir))
                # In the ledger once, whatever the killed process had left to do.
                assert all(_generated(state_dir, "kill")[t] == 1 for t in answered)
            async with http_client(url) as client:
                while len(answered) < total:
                    claim = await call(client, "claim_trajectory", campaign_id="kill", wait_s=30)
                    number = int(claim["task_id"][1:])
                    await call(client, "submit", claim_id=claim["claim_id"], answer=str(number**2))
                    answered.append(claim["trajectory_id"])
                status = await call(client, "campaign_status", campaign_id="kill", wait_s=60)
    assert (status["status"], status["resolved"]) == ("finished", total)
    records = _records(state_dir, "kill")
    scored = Counter(r["trajectory"] for r in records if r["kind"] == "scored")
    assert _generated(state_dir, "kill") == scored == Counter(answered)
    # Never run again: no attempt of a trajectory starts after its submission was recorded.
    last_step = {r["trajectory"]: r["kind"] for r in records if r["kind"] in _GENERATION}
    assert all(last_step[t] == "generated" for t in answered), last_step
    assert sum(r["kind"] == "run_started" for r in records) == 3  # the start, after each kill
