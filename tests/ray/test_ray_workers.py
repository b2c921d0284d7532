"""`mcp-evalserver --http --workers 2 --ray ADDRESS`: clients of both workers work on instances
that live on the cluster's nodes.

A worker that does not drive cannot be passed a connection to a supervisor on a Ray node, so
its workspace tool calls run whole in the driver; the driver's run straight on the node.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import anyio
import pytest

from tests.server.helpers import repo_spec
from testsupport.rawmcp import RawSession
from testsupport.ray_cluster import LoopbackCluster
from testsupport.repos import FIXED
from testsupport.servers import http_server, sessions_on_each_worker

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.root, pytest.mark.slow]


async def _fix_and_submit(session: RawSession, campaign_id: str) -> str:
    """Claims a trajectory and fixes calc.py with every workspace tool; its trajectory id."""
    claim = await session.call_tool("claim_trajectory", {"campaign_id": campaign_id, "wait_s": 60})
    claim_id = {"claim_id": claim["claim_id"]}
    listing = await session.call_tool("sandbox_exec", claim_id | {"command": "ls; exit 3"})
    assert (listing["exit_code"], listing["stdout"]) == (3, "calc.py\n")
    await session.call_tool("write_file", claim_id | {"path": "calc.py", "content": FIXED})
    # read_file's structured answer is the range read (its numbered lines are the text):
    # the file itself comes back through a command.
    read = await session.call_tool("read_file", claim_id | {"path": "calc.py"})
    assert read["size"] == len(FIXED.encode())
    shown = await session.call_tool("sandbox_exec", claim_id | {"command": "cat calc.py"})
    assert shown["stdout"] == FIXED
    diff = await session.call_tool("get_diff", claim_id)
    assert diff["files"] == ["calc.py"]
    submitted = await session.call_tool("submit", claim_id)
    assert submitted["files"] == ["calc.py"]
    return str(claim["trajectory_id"])


async def test_clients_of_two_workers_fix_instances_on_ray_nodes_and_each_is_scored_once(
    ray_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    state_dir = tmp_path / "state"
    spec = repo_spec(tmp_path / "repos", 4)
    options = ("--ray", ray_cluster.address, "--allow-plugins", "--allow-paths", str(tmp_path))
    with anyio.fail_after(240):
        async with http_server(state_dir, *options, workers=2) as url:
            sessions = await sessions_on_each_worker(url, 2)
            try:
                started = await sessions[0].call_tool("start_campaign", {"spec": spec})
                campaign_id = started["campaign_id"]
                submitted = [await _fix_and_submit(s, campaign_id) for s in sessions * 2]
                status = await sessions[1].call_tool(
                    "campaign_status", {"campaign_id": campaign_id, "wait_s": 60}
                )
            finally:
                for session in sessions:
                    await session.close()
    assert (status["status"], status["resolved"]) == ("finished", 4), status
    ledger = state_dir / "campaigns" / campaign_id / "ledger.jsonl"
    records = [json.loads(line) for line in ledger.read_text().splitlines()]
    scored = [r for r in records if r["kind"] == "scored"]
    assert Counter(r["trajectory"] for r in scored) == Counter(submitted)
    assert len(set(submitted)) == 4
    # The work ran on the cluster's worker nodes (the head offers no sandbox slots); scoring
    # read only the patch, so its records name no node.
    workers = {ray_cluster.node_id(node) for node in ray_cluster.workers}
    generated = [r for r in records if r["kind"] == "generated"]
    assert len(generated) == 4
    assert {r.get("node") for r in generated} <= workers
