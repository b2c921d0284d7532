"""Forking a trajectory over MCP: an external client branches one trajectory into three, fixes
the bug in one branch only, and the report groups the branches under their root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.mcp_app import create_server
from tests.server.helpers import MODES, repo_spec
from testsupport.repos import FIXED
from testsupport.servers import call, call_error

pytestmark = [pytest.mark.anyio, pytest.mark.root]

# Graded by running the code of the submission in a fresh workspace, not by reading its text.
CHECK = "python3 -c 'import calc; assert calc.add(2, 3) == 5'"
RUNS_THE_CODE = {"type": "command", "command": CHECK}


def fork_spec(root: Path) -> dict[str, Any]:
    spec = repo_spec(root, 1, concurrency=8, per_instance=8)
    spec["scorer"] = RUNS_THE_CODE
    return spec


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_forks_a_trajectory_into_three_and_only_the_fixed_branch_resolves(
    tmp_path: Path, mode: str
) -> None:
    async with Client(create_server(tmp_path / "state"), mode=mode) as client:
        started = await call(client, "start_campaign", spec=fork_spec(tmp_path / "repos"))
        campaign_id = started["campaign_id"]
        with anyio.fail_after(120):
            root = await call(client, "claim_trajectory", wait_s=30)
            root_claim = root["claim_id"]
            await call(client, "write_file", claim_id=root_claim, path="notes.txt", content="n\n")
            forked = await call(client, "fork_trajectory", claim_id=root_claim, n=3)
            branches = forked["branches"]
            assert forked["waiting"] == []
            ids = [b["trajectory_id"] for b in branches]
            await call(client, "write_file", claim_id=root_claim, path="late.txt", content="l\n")
            seen = []
            for number, branch in enumerate(branches):
                claim_id = branch["claim_id"]
                listing = await call(client, "sandbox_exec", claim_id=claim_id, command="ls")
                seen.append(listing["stdout"].split())
                content = FIXED if number == 1 else f"def add(a, b):\n    return a * {number}\n"
                await call(client, "write_file", claim_id=claim_id, path="calc.py", content=content)
            for branch in branches:
                await call(client, "submit", claim_id=branch["claim_id"])
            await call(client, "submit", claim_id=root_claim)  # the root keeps the bug
            status = await call(client, "campaign_status", campaign_id=campaign_id, wait_s=60)
            report = await client.read_resource(f"campaign://{campaign_id}/report")
        text = getattr(report.contents[0], "text", "")
    assert ids == [f"{root['trajectory_id']}.{k}" for k in (1, 2, 3)]
    assert all(b["task_id"] == root["task_id"] for b in branches)
    # Each branch starts with the root's files at the fork, and nothing the root wrote after.
    assert seen == [["calc.py", "notes.txt"]] * 3
    assert status["status"] == "finished"
    # campaign_status counts as the report does: the root and its branches once.
    assert (status["resolved"], status["pass_rate"]) == (1, 1.0)
    assert "best of branches 1/1 roots (100.0%)" in text
    assert f"| {root['trajectory_id']} | 3 | 1 of 3 | yes |" in text

    # Replay rebuilds the tree from the ledger alone; statistics count the root once.
    state = CampaignStore(tmp_path / "state").load(campaign_id)
    assert [state.trajectories[t].parent for t in ids] == [root["trajectory_id"]] * 3
    assert len({state.trajectories[t].checkpoint for t in ids}) == 1
    outcomes = [state.trajectories[t].outcome for t in [root["trajectory_id"], *ids]]
    assert outcomes == ["failed", "failed", "resolved", "failed"]
    grouped = build_report(state)
    assert (grouped["graded"], grouped["resolved"], grouped["pass_rate"]) == (1, 1, 1.0)
    assert grouped["branches"]["roots"][0]["resolved_branches"] == 1
    independent = build_report(state, branches_as_samples=True)
    assert (independent["graded"], independent["resolved"]) == (4, 1)


async def test_fork_checkpoint_and_restore_say_what_went_wrong(tmp_path: Path) -> None:
    async with Client(create_server(tmp_path / "state")) as client:
        await call(client, "start_campaign", spec=fork_spec(tmp_path / "repos"))
        with anyio.fail_after(60):
            claim = (await call(client, "claim_trajectory", wait_s=30))["claim_id"]
            await call(client, "write_file", claim_id=claim, path="calc.py", content=FIXED)
            saved = await call(client, "checkpoint", claim_id=claim)
            await call(client, "sandbox_exec", claim_id=claim, command="rm calc.py")
            await call(client, "restore", claim_id=claim, checkpoint_id=saved["checkpoint_id"])
            back = await call(client, "sandbox_exec", claim_id=claim, command="cat calc.py")
            unknown = await call_error(client, "restore", claim_id=claim, checkpoint_id="cp999")
            too_many = await call_error(client, "fork_trajectory", claim_id=claim, n=65)
            no_claim = await call_error(client, "checkpoint", claim_id="nope")
            await call(client, "submit", claim_id=claim)
    assert back["stdout"] == FIXED
    assert "NotFound" in unknown
    assert saved["checkpoint_id"] in unknown  # it lists the checkpoints there are
    assert "64" in too_many
    assert "claim_trajectory" in no_claim


async def test_branches_beyond_the_campaigns_free_slots_wait_and_are_claimed_later(
    tmp_path: Path,
) -> None:
    spec = fork_spec(tmp_path / "repos")
    spec["limits"].update(concurrency=1, per_instance=1)  # the root holds the only slot
    async with Client(create_server(tmp_path / "state")) as client:
        started = await call(client, "start_campaign", spec=spec)
        with anyio.fail_after(120):
            root = await call(client, "claim_trajectory", wait_s=30)
            forked = await call(client, "fork_trajectory", claim_id=root["claim_id"], n=2, wait_s=0)
            await call(client, "submit", claim_id=root["claim_id"])
            later = []
            for _ in forked["waiting"]:
                claim = await call(client, "claim_trajectory", wait_s=60)
                later.append(claim["trajectory_id"])
                await call(client, "write_file", claim_id=claim["claim_id"], path="calc.py",
                           content=FIXED)  # fmt: skip
                await call(client, "submit", claim_id=claim["claim_id"])
            status = await call(
                client, "campaign_status", campaign_id=started["campaign_id"], wait_s=60
            )
    assert forked["branches"] == []
    assert forked["waiting"] == [f"{root['trajectory_id']}.1", f"{root['trajectory_id']}.2"]
    assert later == forked["waiting"]
    assert status["status"] == "finished"
