"""Where work runs, as a person asks for it: MCP `campaign_status` and the CLI's `status`."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_evalserver.server.mcp_app import create_server
from tests.ray import holding
from testsupport.ray_cluster import LoopbackCluster
from testsupport.repos import git_repo
from testsupport.servers import call

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.root]


def _busy(nodes: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [row for row in nodes or [] if row["instances"]]


async def test_status_shows_per_node_the_instances_workspaces_and_commands_in_flight(
    ray_cluster: LoopbackCluster, tmp_path: Path
) -> None:
    key = uuid.uuid4().hex
    holding.HOLDING[key] = anyio.Event()
    repo = git_repo(tmp_path / "repo")
    spec = {
        "name": "where",
        "tasks": [{"id": "t1", "path": str(repo), "answer": "x"}],
        "agent": {"type": "python", "factory": "tests.ray.holding:agent", "options": {"key": key}},
    }
    state_dir = tmp_path / "state"
    server = create_server(state_dir, ray_address=ray_cluster.address)
    async with Client(server) as client:
        campaign_id = (await call(client, "start_campaign", spec=spec))["campaign_id"]
        with anyio.fail_after(120):
            await holding.HOLDING[key].wait()
            status = await call(client, "campaign_status", campaign_id=campaign_id)
            (row,) = _busy(status["nodes"])
            assert row["node"] in {ray_cluster.node_id(n) for n in ray_cluster.workers}
            assert (row["workspaces"], row["commands_in_flight"], row["slots"]) == (1, 1, 4)
            # Another process (the CLI) reads the snapshot the running campaign keeps fresh
            # (nodes.json, rewritten once a second while something changes).
            seen: list[dict[str, Any]] = []
            while not seen or seen[0]["commands_in_flight"] != 1:
                await anyio.sleep(0.1)
                cli = await anyio.run_process(
                    [sys.executable, "-m", "mcp_evalserver.cli", "--state-dir", str(state_dir),
                     "status", campaign_id]
                )  # fmt: skip
                seen = _busy((json.loads(cli.stdout)["nodes_now"] or {}).get("nodes"))
            assert seen[0]["node"] == row["node"]
            assert seen[0]["instances"] == row["instances"]
        await call(client, "cancel_campaign", campaign_id=campaign_id)
