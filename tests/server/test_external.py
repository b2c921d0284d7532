"""External trajectories in real workspaces: claim, work, submit, leases (in memory)."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from mcp import Client

from mcp_evalserver.server.mcp_app import create_server
from tests.sandbox.host_processes import host_pids, marker, wait_until_gone
from tests.server.helpers import MODES, repo_spec
from testsupport.repos import FIXED
from testsupport.servers import call, call_error

pytestmark = [pytest.mark.anyio, pytest.mark.root]


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_fixes_a_repository_through_the_sandbox_tools_and_is_scored(
    tmp_path: Path, mode: str
) -> None:
    spec = repo_spec(tmp_path / "repos", 1)
    async with Client(create_server(tmp_path / "state"), mode=mode) as client:
        started = await call(client, "start_campaign", spec=spec)
        with anyio.fail_after(60):
            claim = await call(client, "claim_trajectory", wait_s=30)
            claim_id = claim["claim_id"]
            assert claim["has_workspace"] is True
            assert claim["workdir"] == spec["tasks"][0]["path"]
            listing = await call(client, "sandbox_exec", claim_id=claim_id, command="ls; exit 3")
            assert listing["exit_code"] == 3
            assert "calc.py" in listing["stdout"]
            await call(client, "write_file", claim_id=claim_id, path="calc.py", content=FIXED)
            read = await call(client, "sandbox_exec", claim_id=claim_id, command="cat calc.py")
            assert read["stdout"] == FIXED
            outside = await call_error(
                client, "write_file", claim_id=claim_id, path="/etc/evil", content="x"
            )
            assert "InvalidInput" in outside
            assert (
                f"only the workspace is writable; write under {spec['tasks'][0]['path']}" in outside
            )
            missing = await call_error(client, "read_file", claim_id=claim_id, path="nope.txt")
            assert "NotFound" in missing
            assert "list files with sandbox_exec" in missing
            diff = await call(client, "get_diff", claim_id=claim_id)
            assert diff["files"] == ["calc.py"]
            assert "+    return a + b" in diff["patch"]
            submitted = await call(client, "submit", claim_id=claim_id)
            assert submitted["files"] == ["calc.py"]
            after = await call_error(client, "sandbox_exec", claim_id=claim_id, command="true")
            assert "was submitted" in after
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=30
            )
        assert status["status"] == "finished"
        assert status["resolved"] == 1
    # The host's repository was never touched: the work happened in the workspace.
    assert "a - b" in (Path(spec["tasks"][0]["path"]) / "calc.py").read_text()


async def test_a_lapsed_lease_lets_another_client_take_over_the_workspace_as_it_was(
    tmp_path: Path,
) -> None:
    spec = repo_spec(tmp_path / "repos", 1, lease_s=0.5)
    async with Client(create_server(tmp_path / "state")) as client:
        await call(client, "start_campaign", spec=spec)
        with anyio.fail_after(60):
            first = await call(client, "claim_trajectory", wait_s=30)
            await call(
                client, "write_file", claim_id=first["claim_id"], path="note.txt", content="hi"
            )
            # The first client goes quiet; the claim waits for its lease to lapse, no sleeping.
            second = await call(client, "claim_trajectory", wait_s=30)
        assert second["trajectory_id"] == first["trajectory_id"]
        assert second["reclaimed"] is True
        # The same generation attempt, under the same key.
        assert (second["attempt"], second["idempotency_key"]) == (1, first["idempotency_key"])
        assert len(first["idempotency_key"]) == 32
        read = await call(
            client, "sandbox_exec", claim_id=second["claim_id"], command="cat note.txt"
        )
        assert read["stdout"] == "hi"
        stale = await call_error(client, "get_diff", claim_id=first["claim_id"])
        assert "lapsed" in stale
        assert "another client claimed it" in stale


async def test_a_server_the_agent_started_answers_its_later_calls_and_dies_at_submit(
    tmp_path: Path,
) -> None:
    # Processes outlive a call, as in a container, and end with the trajectory.
    arg = marker()
    serve = f"python3 -m http.server 8000 --bind 127.0.0.1 >/tmp/http.log 2>&1 & sleep {arg} &"
    fetch = (
        'for i in $(seq 200); do python3 -c "import urllib.request as u; '
        "print(u.urlopen('http://127.0.0.1:8000/calc.py').status)\" 2>/dev/null && break; "
        "sleep 0.05; done"
    )
    spec = repo_spec(tmp_path / "repos", 1)
    async with Client(create_server(tmp_path / "state"), mode=MODES[-1]) as client:
        await call(client, "start_campaign", spec=spec)
        with anyio.fail_after(60):
            claim_id = (await call(client, "claim_trajectory", wait_s=30))["claim_id"]
            started = await call(client, "sandbox_exec", claim_id=claim_id, command=serve)
            answered = await call(client, "sandbox_exec", claim_id=claim_id, command=fetch)
            assert host_pids(arg)
            await call(client, "submit", claim_id=claim_id)
            await wait_until_gone(arg)
    assert started["exit_code"] == 0
    assert answered["stdout"] == "200\n"
