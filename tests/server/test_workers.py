"""`--http --workers N`: one port served by several processes, one of which drives campaigns.

The server is real (`mcp-evalserver --http --workers N` as a subprocess) and so are its
deaths: SIGKILLs of the driving worker mid-campaign, and of a worker that does not drive while
its client holds a claim. The ledger shows what happened: each trajectory generated and scored
exactly once, every submission that was answered kept.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.external import ClaimBoard, ExternalTrajectory
from mcp_evalserver.errors import Conflict
from mcp_evalserver.server.front.lease import DriverLease, Holder, read_holder
from mcp_evalserver.server.front.rpc import Peer, serve_driver
from mcp_evalserver.server.front.service import FrontService, RemoteTrajectories
from mcp_evalserver.server.front.worker_config import WorkerConfig
from tests.exports.campaign import exported_over_mcp
from tests.server.helpers import answer_spec, repo_spec
from testsupport.processes import descendants
from testsupport.rawmcp import CallFailed
from testsupport.repos import FIXED
from testsupport.servers import (
    REPO,
    TOKEN,
    call,
    call_error,
    http_client,
    http_server,
    sessions_on_each_worker,
    sigkill,
)

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
LEGACY_VERSION = "2025-11-25"
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
}


def _parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _workers_of(state_dir: Path) -> tuple[int, list[int]]:
    """The driving worker's pid and every worker's (the children of its parent)."""
    holder = read_holder(state_dir)
    assert holder is not None
    parent = _parent_of(holder.pid)
    children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    return holder.pid, [int(pid) for pid in children]


async def _answer(client: Client, claim: dict[str, Any]) -> str:
    """Submits the right answer of a claimed answer-only task (N squared)."""
    number = int(claim["task_id"][1:])
    await call(client, "submit", claim_id=claim["claim_id"], answer=str(number * number))
    return str(claim["trajectory_id"])


async def _until_done(client: Client, campaign_id: str, done: int) -> None:
    """Follows the campaign (progress notifications of a waiting campaign_status) until
    `done` trajectories are done: their submissions are in the ledger."""
    reached = anyio.Event()

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        if progress >= done:
            reached.set()

    async with anyio.create_task_group() as group:

        async def follow() -> None:
            arguments = {"campaign_id": campaign_id, "wait_s": 60}
            await client.call_tool("campaign_status", arguments, progress_callback=progress)

        group.start_soon(follow)
        await reached.wait()
        group.cancel_scope.cancel()


@pytest.mark.slow
async def test_sigkills_of_workers_mid_campaign_lose_no_submission_and_run_nothing_twice(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    spec = answer_spec(6, agent="external")
    answered: list[str] = []
    with anyio.fail_after(240):
        async with http_server(state_dir, workers=3) as url:
            async with http_client(url, mode=MODERN) as client:
                await call(client, "start_campaign", spec=spec, campaign_id="chaos")
            # Twice: the driving worker is killed while a client holds a claim.
            for _ in range(2):
                async with http_client(url, mode=MODERN) as client:
                    claim = await call(client, "claim_trajectory", campaign_id="chaos", wait_s=30)
                    answered.append(await _answer(client, claim))
                    await _until_done(client, "chaos", len(answered))
                    held = await call(client, "claim_trajectory", campaign_id="chaos", wait_s=30)
                driver, _ = _workers_of(state_dir)
                await sigkill(driver)  # gone, as a restart would find it
                async with http_client(url, mode=MODERN) as client:
                    # The claim died with the driver; a new driver says what to do instead.
                    refused = await call_error(
                        client, "submit", claim_id=held["claim_id"], answer="0"
                    )
                    assert "claim_trajectory" in refused
                    status = await call(client, "campaign_status", campaign_id="chaos")
                    assert status["active"] is True, status
                taken_over = read_holder(state_dir)
                assert taken_over is not None
                assert taken_over.pid != driver
            # A worker that does not drive dies while its client holds a claim: the client
            # submits it through another worker, and nothing is lost.
            async with http_client(url, mode=MODERN) as client:
                claim = await call(client, "claim_trajectory", campaign_id="chaos", wait_s=30)
            driver, workers = _workers_of(state_dir)
            await sigkill(next(pid for pid in workers if pid != driver))
            async with http_client(url, mode=MODERN) as client:
                answered.append(await _answer(client, claim))
                while len(answered) < 6:
                    claim = await call(client, "claim_trajectory", campaign_id="chaos", wait_s=30)
                    answered.append(await _answer(client, claim))
                status = await call(client, "campaign_status", campaign_id="chaos", wait_s=60)
    assert status["status"] == "finished"
    assert status["resolved"] == 6
    assert sorted(answered) == [f"t{n}@0" for n in range(1, 7)]
    ledger = state_dir / "campaigns" / "chaos" / "ledger.jsonl"
    records = [json.loads(line) for line in ledger.read_text().splitlines()]
    generated = Counter(r["trajectory"] for r in records if r["kind"] == "generated")
    scored = Counter(r["trajectory"] for r in records if r["kind"] == "scored")
    assert generated == scored == Counter(answered)
    assert sum(r["kind"] == "run_started" for r in records) == 3  # the start, two takeovers


@pytest.mark.slow
async def test_a_sigkilled_parent_takes_every_worker_and_their_sandboxes_with_it(
    tmp_path: Path,
) -> None:
    """Orphaned workers would serve beside the server restarted in the parent's place, and
    nothing would ever restart or stop them."""
    state_dir = tmp_path / "state"
    allow = ("--allow-paths", str(tmp_path), "--allow-plugins")
    async with http_server(state_dir, *allow, workers=3) as url:
        async with http_client(url, mode=MODERN) as client:
            started = await call(client, "start_campaign", spec=repo_spec(tmp_path, 1))
            claim = await call(
                client, "claim_trajectory", campaign_id=started["campaign_id"], wait_s=30
            )
            ran = await call(client, "sandbox_exec", claim_id=claim["claim_id"], command="true")
            assert ran["exit_code"] == 0
        driver, workers = _workers_of(state_dir)
        parent = _parent_of(driver)
        below = [pid for pid in descendants(parent) if pid != parent]
        assert len(workers) == 3
        assert len(below) > len(workers)  # the instance's supervisor and its holders too
        pidfds = [os.pidfd_open(pid) for pid in below]
        try:
            await sigkill(parent)
            with anyio.fail_after(30):
                for pidfd in pidfds:
                    await anyio.wait_readable(pidfd)  # readable once that process has exited
        finally:
            for pidfd in pidfds:  # none is left whatever the test found
                with contextlib.suppress(ProcessLookupError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                os.close(pidfd)


@pytest.mark.slow
async def test_a_handshake_session_is_answered_whichever_worker_its_requests_reach(
    tmp_path: Path,
) -> None:
    async with (
        http_server(tmp_path, workers=4) as url,
        # No keep-alive: every request opens a connection, which the kernel gives any worker.
        httpx2.AsyncClient(
            headers=HEADERS, limits=httpx2.Limits(max_keepalive_connections=0)
        ) as http,
    ):
        opened = await http.post(url, json=_initialize())
        assert opened.status_code == 200
        session = opened.headers["mcp-session-id"]
        assert session.startswith("w")  # the worker that holds it
        headers = {"mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}
        notified = await http.post(
            url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
        )
        assert notified.status_code == 202
        for number in range(24):
            listed = await http.post(url, json=_list_campaigns(number), headers=headers)
            assert listed.status_code == 200, listed.text
            assert _result(listed.text)["structuredContent"]["total"] == 0
        # A session no worker holds is unknown, as after a restart: the client opens another.
        for gone in ("w9-0123", session.split("-", 1)[0] + "-0123"):
            lost = await http.post(url, json=_list_campaigns(99), headers=headers | {
                "mcp-session-id": gone})  # fmt: skip
            assert lost.status_code == 404


@pytest.mark.slow
async def test_the_dashboard_and_healthz_answer_from_every_worker(tmp_path: Path) -> None:
    async with (
        http_server(tmp_path, workers=4) as url,
        http_client(url, mode=MODERN) as client,
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"},
            limits=httpx2.Limits(max_keepalive_connections=0),
        ) as http,
    ):
        await call(client, "start_campaign", spec=answer_spec(2), campaign_id="shown")
        await call(client, "campaign_status", campaign_id="shown", wait_s=30)
        base = url.removesuffix("/mcp")
        for _ in range(16):
            health = await http.get(f"{base}/healthz")
            assert health.status_code == 200
            assert health.json()["status"] == "ok"
            page = await http.get(f"{base}/", headers={"Accept": "text/html"})
            assert page.status_code == 200
            assert "shown" in page.text


def _waiting(trajectory_id: str, lease_s: float = 300.0) -> ExternalTrajectory:
    context = SimpleNamespace(campaign_id="c", trajectory_id=trajectory_id)
    return ExternalTrajectory(cast(TrajectoryContext, context), lease_s)


async def test_a_claim_among_ten_thousand_waiting_takes_a_lapsed_one_first_then_the_oldest() -> (
    None
):
    board = ClaimBoard()
    waiting = [_waiting(f"t{n}") for n in range(10_000)]
    for trajectory in waiting:
        board.publish(trajectory)
    lapsing = _waiting("lapsing", lease_s=0.0)  # its lease ends as it is taken
    board.publish(lapsing)
    assert (await board.claim("c"))[0] is waiting[0]
    assert (await board.claim("c", trajectory_id="lapsing"))[0] is lapsing
    lapsing.lease_s = 300.0  # its next client keeps it
    assert (await board.claim("c"))[0] is lapsing  # its client went away: it goes first
    assert (await board.claim("c"))[0] is waiting[1]
    assert board.waiting("c") == (9_998, 3)
    assert board.waiting("another") == (0, 0)


def test_the_driver_lease_is_never_held_by_two_and_passes_on_when_its_holder_dies(
    tmp_path: Path,
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    ) as holder:
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline() == b"held\n"
            lease = DriverLease(tmp_path)
            me = Holder(pid=os.getpid(), socket="/nowhere", server="test")
            with pytest.raises(BlockingIOError):
                lease.try_take(me)
            assert not lease.held
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            previous = lease.try_take(me)
            assert previous == Holder(pid=holder.pid, socket="/held", server="other")
            assert read_holder(tmp_path) == me
            lease.release()
        finally:
            holder.kill()


_HOLD = """
import os, signal, sys
from pathlib import Path
from mcp_evalserver.server.front.lease import DriverLease, Holder
DriverLease(Path(sys.argv[1])).try_take(Holder(pid=os.getpid(), socket="/held", server="other"))
print("held", flush=True)
signal.pause()
"""


def _initialize() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }


def _list_campaigns(number: int) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": number + 1,
        "method": "tools/call",
        "params": {"name": "list_campaigns", "arguments": {}},
    }


def _result(body: str) -> dict[str, Any]:
    """The JSON-RPC result of a response (SSE: its `data:` line; else the body)."""
    for line in body.splitlines():
        if line.startswith("data:"):
            body = line.removeprefix("data:")
    message: dict[str, Any] = json.loads(body)
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


@pytest.mark.slow
async def test_usage_reported_through_any_worker_counts_once_against_the_budget(
    tmp_path: Path,
) -> None:
    """A cheating client cannot spend past the budget by reporting through a worker that does
    not drive: every worker's `report_usage` reaches the one ledger the budget is checked on."""
    state_dir = tmp_path / "state"
    spec = answer_spec(4, agent="external")
    spec["limits"] |= {"concurrency": 1, "budget_usd": 0.75}
    with anyio.fail_after(120):
        async with http_server(state_dir, workers=2) as url:
            async with http_client(url, mode=MODERN) as client:
                await call(client, "start_campaign", spec=spec, campaign_id="spent")
            # One session on each worker, so one of them is surely not the driver.
            sessions = await sessions_on_each_worker(url, 2)
            try:
                for session in sessions:
                    claim = await session.call_tool(
                        "claim_trajectory", {"campaign_id": "spent", "wait_s": 30}
                    )
                    reported = await session.call_tool(
                        "report_usage",
                        {"claim_id": claim["claim_id"], "model": "m", "input_tokens": 10,
                         "output_tokens": 5, "cost_usd": 0.5},
                    )  # fmt: skip
                    assert reported["cost_usd"] == 0.5
                    number = int(claim["task_id"][1:])
                    with contextlib.suppress(CallFailed):  # the second ends at the budget
                        await session.call_tool(
                            "submit", {"claim_id": claim["claim_id"], "answer": str(number**2)}
                        )
            finally:
                for session in sessions:
                    await session.close()
            async with http_client(url, mode=MODERN) as client:
                status = await call(client, "campaign_status", campaign_id="spent", wait_s=30)
    assert status["spent_usd"] == 1.0
    assert status["status"] == "finished"
    assert status["outcomes"] == {"resolved": 1, "budget_exhausted": 3}
    ledger = state_dir / "campaigns" / "spent" / "ledger.jsonl"
    records = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert sum(r["kind"] == "model_usage" for r in records) == 2


@pytest.mark.parametrize(
    ("unanswered", "expected"),
    [
        ("grant", "claim again with claim_trajectory"),
        ("submit", "may or may not have counted: read campaign_status or the resource "
         "campaign://c/trajectories/t3@0"),
    ],
)  # fmt: skip
async def test_a_relayed_submit_whose_driver_dies_before_answering_says_what_to_do_next(
    tmp_path: Path, unanswered: str, expected: str
) -> None:
    """A worker that does not drive relays a submit; the driver dies before answering (the
    worker is real; the driver is a stand-in that never answers `unanswered` and stops once it
    got it). Died at the grant, nothing was handed in: claim again. Died at the submit, the
    submission may have been recorded: read where the trajectory stands."""
    state_dir, stand_in = tmp_path / "state", tmp_path / "driver.sock"
    task = {"id": "t3", "prompt": "3 squared?", "answer": "9"}
    received, stop = anyio.Event(), anyio.Event()

    async def grant(peer: Peer, request_id: int, args: dict[str, Any]) -> dict[str, Any]:
        if unanswered == "grant":
            received.set()
            await anyio.sleep_forever()
        return {"available": False, "lease_s": 300.0, "campaign_id": "c",
                "trajectory_id": "t3@0", "task": task}  # fmt: skip

    async def submit(peer: Peer, request_id: int, args: dict[str, Any]) -> None:
        assert args["submission"]["answer"] == "9"
        received.set()
        await anyio.sleep_forever()

    async def drive(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        async with anyio.create_task_group() as group:
            handlers = {"grant": grant, "submit": submit}
            await group.start(serve_driver, stand_in, handlers, lambda peer: None)
            task_status.started()
            await stop.wait()
            group.cancel_scope.cancel()  # its connections close, as a SIGKILL closes them

    async def stop_once_received() -> None:
        await received.wait()
        stop.set()

    lease = DriverLease(state_dir)  # held here: the worker never drives
    lease.try_take(Holder(pid=os.getpid(), socket=str(stand_in), server="s"))
    try:
        with anyio.fail_after(60):
            worker = WorkerConfig(index=1, workers=2, run_dir=tmp_path, server="s")
            async with (
                FrontService(state_dir, worker=worker) as front,
                anyio.create_task_group() as group,
            ):
                await group.start(drive)
                group.start_soon(stop_once_received)
                with pytest.raises(Conflict) as refused:
                    await RemoteTrajectories(front).submit("claim-1", "9")
    finally:
        lease.release()
    assert "the process driving campaigns stopped" in str(refused.value)
    assert expected in str(refused.value)
    assert ("campaign_status" in str(refused.value)) == (unanswered == "submit")


@pytest.mark.root
async def test_a_call_running_in_any_worker_holds_its_claim_past_the_lease(
    tmp_path: Path,
) -> None:
    """A worker that does not drive runs the call itself, where the driver does not see it: it
    renews the claim while the call runs, so nobody takes the trajectory over meanwhile."""
    with anyio.fail_after(120):
        allowed = ("--allow-plugins", "--allow-paths", str(tmp_path))
        async with http_server(tmp_path / "state", *allowed, workers=2) as url:
            async with http_client(url, mode=MODERN) as client:
                for number in range(2):  # a campaign of one trajectory per session
                    spec = repo_spec(tmp_path / f"repos{number}", 1, lease_s=2.0)
                    await call(client, "start_campaign", spec=spec, campaign_id=f"held{number}")
            # One session on each worker, so one of them is surely not the driver.
            sessions = await sessions_on_each_worker(url, 2)
            try:
                for number, session in enumerate(sessions):
                    campaign_id = f"held{number}"
                    claim = await session.call_tool(
                        "claim_trajectory", {"campaign_id": campaign_id, "wait_s": 30}
                    )
                    outputs: list[dict[str, Any]] = []
                    go = f"go{number}"
                    # Runs until the test lets it end (a file appears), past many leases.
                    command = (
                        f"touch started; while [ ! -e {go} ]; do sleep 0.02; done; echo finished"
                    )
                    arguments = {"claim_id": claim["claim_id"], "command": command}

                    async def long_command(
                        session: Any = session, arguments: Any = arguments, outputs: Any = outputs
                    ) -> None:
                        outputs.append(await session.call_tool("sandbox_exec", arguments))

                    async with anyio.create_task_group() as group:
                        group.start_soon(long_command)
                        async with http_client(url, mode=MODERN) as other:
                            # Once it runs, nothing else calls on the claim for three leases.
                            path = {"claim_id": claim["claim_id"], "path": "started"}
                            while (await other.call_tool("read_file", path)).is_error:
                                await anyio.lowlevel.checkpoint()
                            refused = await call_error(
                                other, "claim_trajectory", campaign_id=campaign_id, wait_s=6.0
                            )
                            # Made by an edit, relayed by whichever worker serves `other`.
                            await call(
                                other, "edit_file", claim_id=claim["claim_id"], path=go,
                                old_text="", new_text="go\n",
                            )  # fmt: skip
                    assert f"no trajectory of campaign '{campaign_id}' is waiting" in refused
                    assert outputs[0]["stdout"] == "finished\n"
            finally:
                for session in sessions:
                    await session.close()


async def _script(session: Any, campaign_id: str) -> None:
    """An external agent's calls on one claim: a command, a write, an edit that fails, a read,
    a failing command, the submit."""
    claim = await session.call_tool("claim_trajectory", {"campaign_id": campaign_id, "wait_s": 30})
    on = {"claim_id": claim["claim_id"]}
    await session.call_tool("sandbox_exec", {**on, "command": "grep -n return calc.py"})
    await session.call_tool("write_file", {**on, "path": "calc.py", "content": FIXED})
    with contextlib.suppress(CallFailed):
        await session.call_tool(
            "edit_file", {**on, "path": "calc.py", "old_text": "zz", "new_text": "y"}
        )
    await session.call_tool("read_file", {**on, "path": "calc.py", "limit": 1})
    await session.call_tool("sandbox_exec", {**on, "command": "exit 3", "timeout_s": 5})
    await session.call_tool("submit", {**on, "answer": "fixed add"})


async def _steps(url: str, campaign_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls of the campaign's one trajectory, as its ATIF export has them."""
    async with http_client(url, mode=MODERN) as client:
        status: dict[str, Any] = {}
        while status.get("status") != "finished":
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=30)
        atif, _ = await exported_over_mcp(client, campaign_id, "atif")
    (document,) = json.loads(atif)["trajectories"]
    return [
        (step_call["function_name"], step_call["arguments"])
        for step in document["steps"]
        for step_call in step.get("tool_calls", [])
    ]


@pytest.mark.root
async def test_every_worker_keeps_the_calls_it_serves_in_the_trajectorys_transcript(
    tmp_path: Path,
) -> None:
    """A worker that does not drive runs workspace calls itself: each is kept in the
    trajectory's transcript (its ATIF steps) as a server of one process (`--workers 1`)
    keeps it, and so is the submit it relays."""
    steps: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    allowed = ("--allow-plugins", "--allow-paths", str(tmp_path))
    with anyio.fail_after(240):
        async with http_server(tmp_path / "one", *allowed) as url:
            async with http_client(url, mode=MODERN) as client:
                spec = repo_spec(tmp_path / "repos-one", 1)
                await call(client, "start_campaign", spec=spec, campaign_id="one")
            (session,) = await sessions_on_each_worker(url, 1)
            try:
                await _script(session, "one")
            finally:
                await session.close()
            steps["one"] = await _steps(url, "one")
        async with http_server(tmp_path / "state", *allowed, workers=2) as url:
            async with http_client(url, mode=MODERN) as client:
                for number in range(2):
                    spec = repo_spec(tmp_path / f"repos{number}", 1)
                    await call(client, "start_campaign", spec=spec, campaign_id=f"kept{number}")
            # One session on each worker, so one of them is surely not the driver.
            sessions = await sessions_on_each_worker(url, 2)
            try:
                for number, session in enumerate(sessions):
                    await _script(session, f"kept{number}")
            finally:
                for session in sessions:
                    await session.close()
            for number in range(2):
                steps[f"kept{number}"] = await _steps(url, f"kept{number}")
    assert [name for name, _ in steps["one"]] == [
        "sandbox_exec", "write_file", "edit_file", "read_file", "sandbox_exec", "submit",
    ]  # fmt: skip
    assert steps["kept0"] == steps["one"]
    assert steps["kept1"] == steps["one"]
