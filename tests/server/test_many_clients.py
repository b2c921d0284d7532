"""Many clients against one HTTP server: private workspaces, and a client killed mid-call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.runtime.artifacts import read_artifact
from tests.sandbox.host_processes import marker, wait_until_gone, wait_until_running
from testsupport.repos import git_repo
from testsupport.servers import REPO, TOKEN, call, http_client, http_server

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]

CLIENTS = 50
# The spec's scorer is a plugin and its task a host directory: token holders need both.
_PRIVILEGES = ("--allow-plugins", "--allow-paths")


def _spec(repo: Path, samples: int, lease_s: float) -> dict[str, object]:
    return {
        "name": "many",
        "tasks": [{"id": "calc", "prompt": "sign your work", "path": str(repo)}],
        "samples": samples,
        "agent": {"type": "external", "lease_s": lease_s},
        "scorer": {"type": "python", "factory": "tests.server.helpers:diff_scorer"},
        "limits": {"concurrency": samples, "per_instance": samples},
    }


async def test_fifty_clients_drive_fifty_trajectories_and_every_diff_is_its_own(
    tmp_path: Path, workers: int
) -> None:
    repo = git_repo(tmp_path / "repo")
    state_dir = tmp_path / "state"
    async with http_server(state_dir, *_PRIVILEGES, str(tmp_path), workers=workers) as url:
        async with http_client(url) as admin:
            started = await call(admin, "start_campaign", spec=_spec(repo, CLIENTS, 300.0))
        campaign_id = started["campaign_id"]
        signed: dict[str, str] = {}

        async def one_client(number: int) -> None:
            async with http_client(url, mode="legacy" if number % 2 else "2026-07-28") as client:
                claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=60)
                claim_id = claim["claim_id"]
                line = f"client {number}\n"
                await call(client, "write_file", claim_id=claim_id, path="owner.txt", content=line)
                seen = await call(
                    client, "sandbox_exec", claim_id=claim_id, command="cat owner.txt"
                )
                assert seen["stdout"] == line
                diff = await call(client, "get_diff", claim_id=claim_id)
                assert diff["files"] == ["owner.txt"]
                assert f"+client {number}\n" in diff["patch"]
                await call(client, "submit", claim_id=claim_id)
                signed[claim["trajectory_id"]] = line

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for number in range(CLIENTS):
                    group.start_soon(one_client, number)
            async with http_client(url) as admin:
                status = await call(admin, "campaign_status", campaign_id=campaign_id, wait_s=60)
    assert status["status"] == "finished"
    assert len(signed) == CLIENTS
    assert len(set(signed.values())) == CLIENTS
    # The ledger holds each trajectory's own patch, and nobody else's.
    directory = state_dir / "campaigns" / campaign_id
    for record in map(json.loads, (directory / "ledger.jsonl").read_text().splitlines()):
        if record["kind"] == "generated":
            patch = read_artifact(directory, record["submission"]["patch"]).decode()
            owners = [line for line in patch.splitlines() if line.startswith("+client ")]
            assert owners == [f"+{signed[record['trajectory']].strip()}"]


async def test_a_client_killed_mid_call_leaves_the_server_serving_and_its_lease_lapses(
    tmp_path: Path,
) -> None:
    repo = git_repo(tmp_path / "repo")
    sleep = marker()
    async with (
        http_server(tmp_path / "state", *_PRIVILEGES, str(tmp_path)) as url,
        http_client(url) as client,
    ):
        started = await call(client, "start_campaign", spec=_spec(repo, 1, 1.0))
        campaign_id = started["campaign_id"]
        command = [sys.executable, "-m", "tests.server.killed_client", url, TOKEN, campaign_id]
        env = {**os.environ, "PYTHONPATH": str(REPO), "SLEEP_SECONDS": sleep}
        with anyio.fail_after(60):
            async with await anyio.open_process(
                command, cwd=REPO, env=env, stderr=subprocess.DEVNULL
            ) as victim:
                assert victim.stdout is not None
                output = b""
                while b"calling\n" not in output:
                    output += await victim.stdout.receive()
                # Killed while its call runs: its command is running in the workspace.
                await wait_until_running(sleep)
                victim.kill()
                await victim.wait()
            # The server serves other clients while the dead client's call is pending...
            listed = await call(client, "list_campaigns")
            assert listed["total"] == 1
            # ...and the call is cancelled with its connection (its command killed), so once
            # the lease lapses the trajectory is claimable, its workspace kept.
            await wait_until_gone(sleep)
            claim = await call(client, "claim_trajectory", campaign_id=campaign_id, wait_s=30)
            assert claim["reclaimed"] is True
            assert f"claimed {claim['trajectory_id']}" in output.decode()
            note = await call(
                client, "sandbox_exec", claim_id=claim["claim_id"], command="cat note.txt"
            )
            assert note["stdout"] == "mine"
            await call(client, "submit", claim_id=claim["claim_id"])
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=30)
    assert status["status"] == "finished"
