"""Demo-suite campaigns with the `tests` scorer on a real multi-node Ray cluster on loopback.

The campaign the demo test runs on this machine (tests/demo/test_demo_campaign.py: every task
resolved on every sample) runs on the cluster and must give the same per-task results; then a
node is killed while a trajectory's command runs on it, and the campaign still
finishes with every trajectory recorded exactly once and the loss counted as infrastructure.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from demo.build_suite import DEMO_DIR
from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.spec.campaign import CampaignSpec, RaySandboxConfig, load_tasks
from mcp_evalserver.spec.submission import Submission
from tests.demo.test_demo_campaign import subset_file as demo_subset_file
from tests.engine.helpers import run_campaign
from testsupport.ray_cluster import SLOTS, LoopbackCluster

pytestmark = [pytest.mark.anyio, pytest.mark.ray, pytest.mark.root, pytest.mark.slow]

# The demo test's subset (two projects, three bugs), built once per module.
subset_file = demo_subset_file


def _spec(tasks_file: Path, address: str, samples: int = 2) -> CampaignSpec:
    """The demo's oracle campaign (the `tests` scorer) on the subset, on the cluster."""
    spec = CampaignSpec.model_validate_json((DEMO_DIR / "campaign-oracle.json").read_text())
    sandbox = RaySandboxConfig(address=address)
    limits = spec.limits.model_copy(update={"retry_base_delay_s": 0.2})
    return spec.model_copy(
        update={
            "tasks": load_tasks(tasks_file),
            "samples": samples,
            "sandbox": sandbox,
            "limits": limits,
        }
    )


def _by_task(state: CampaignState) -> dict[str, list[tuple[str | None, str | None]]]:
    results: dict[str, list[tuple[str | None, str | None]]] = {}
    for trajectory in sorted(state.trajectories.values(), key=lambda t: t.id):
        status = (trajectory.score or {}).get("status")
        results.setdefault(trajectory.task_id, []).append((trajectory.outcome, status))
    return results


def _ledger(state_dir: Path, campaign_id: str) -> list[dict[str, Any]]:
    path = CampaignStore(state_dir).directory(campaign_id) / "ledger.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_a_demo_campaign_on_the_cluster_matches_one_machine_and_uses_two_nodes(
    ray_cluster: LoopbackCluster, subset_file: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(400):
        _, there = await run_campaign(tmp_path, _spec(subset_file, ray_cluster.address))
    # What one machine gives for it: the demo test's oracle campaign (the same spec) proves it.
    one_machine = {task.id: [("resolved", "resolved")] * 2 for task in load_tasks(subset_file)}
    assert _by_task(there) == one_machine
    nodes = build_report(there)["nodes"]
    assert nodes is not None
    workers = {ray_cluster.node_id(node) for node in ray_cluster.workers}
    assert set(nodes) <= workers
    assert len(nodes) >= 2, nodes  # three instances spread over the two nodes
    placed = [task for row in nodes.values() for task in row["instances"]]
    assert sorted(placed) == sorted(_by_task(there)), "each instance on one node"
    assert "instance(s)" in render_markdown(build_report(there))


class HoldingOracle(Agent):
    """Applies the gold patch in its workspace; the first trajectory first runs a long command
    there, so the test can kill that node while the command is in flight."""

    def __init__(self) -> None:
        self.holding = anyio.Event()
        self.node: str | None = None

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        if not self.holding.is_set():
            self.node = workspace.node
            self.holding.set()
            await workspace.exec("sleep 600")  # ends when its node dies
        patch = context.task.patch or ""
        applied = await workspace.exec(["git", "apply", "-"], stdin=patch)
        assert applied.ok, applied.stderr
        return Submission(patch=await workspace.diff())


async def test_a_node_killed_mid_campaign_costs_a_retry_not_a_result(
    ray_cluster: LoopbackCluster, subset_file: Path, tmp_path: Path
) -> None:
    store = CampaignStore(tmp_path)
    campaign_id = await store.create(_spec(subset_file, ray_cluster.address, samples=3))
    agent = HoldingOracle()
    async with SandboxPool() as pool:
        runner = CampaignRunner(store, campaign_id, agent=agent, sandboxes=pool)
        with anyio.fail_after(400):
            async with anyio.create_task_group() as group:
                group.start_soon(runner.run)
                await agent.holding.wait()
                await anyio.wait_all_tasks_blocked()
                in_flight = {row["node"]: row for row in pool.nodes() or []}
                assert in_flight[agent.node]["commands_in_flight"] >= 1
                (doomed,) = [n for n in ray_cluster.workers if n.node_id == agent.node]
                await anyio.to_thread.run_sync(ray_cluster.kill_worker, doomed)
            # The session's cluster keeps its shape for the tests after this one.
            ray_cluster.add_worker(4, SLOTS)  # Ray starts nodes from the main thread only
    state = store.load(campaign_id)
    assert state.status == "finished"
    assert all(r == [("resolved", "resolved")] * 3 for r in _by_task(state).values())
    records = _ledger(tmp_path, campaign_id)
    for kind in ("generated", "scored"):
        per_trajectory = Counter(r["trajectory"] for r in records if r["kind"] == kind)
        assert sorted(per_trajectory) == sorted(state.trajectories)
        assert set(per_trajectory.values()) == {1}  # each exactly once
    lost = [r for r in records if r["kind"] in ("generation_failed", "scoring_failed")]
    assert lost, "the killed node failed no step"
    assert all(r["outcome"] == "infra_error" and not r["final"] for r in lost)
    assert all(r["error"]["type"] == "SandboxUnavailable" for r in lost)
    report = build_report(state)
    assert report["infrastructure"]["failed_attempts"] == len(lost)
    assert report["infrastructure"]["unresolved_failures"] == 0
    assert report["infrastructure"]["instances_reprovisioned"] >= 1
    assert "infra_error" not in report["outcomes"]
    assert agent.node in (report["nodes"] or {})
