"""The demo campaigns end to end, on a subset of the suite: real workspaces, the `tests` scorer.

The subset is built under demo/build/tests (cached there): local workspaces hide /tmp, so an
instance under pytest's tmp_path would be invisible to its own trajectories.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from mcp import Client

from demo.build_suite import DEMO_DIR, build_suite
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec import CampaignSpec, load_spec, load_tasks
from mcp_evalserver.state import CampaignState
from tests.engine.helpers import run_campaign
from tests.server.helpers import call

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]

SUBSET = {"inflection": ("ordinal-thirteen", "camelize-lower-first"), "toolz": ("unique-key",)}


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            pytest.fail("needs root for mount namespaces and overlayfs")
        pytest.skip("needs root for mount namespaces and overlayfs")


@pytest.fixture(scope="module")
def subset_file() -> Path:
    return build_suite(
        DEMO_DIR / "build" / "tests",
        projects=list(SUBSET),
        bugs=[bug for bugs in SUBSET.values() for bug in bugs],
        log=lambda _: None,
    )


def _demo_spec(agent: str, tasks_file: Path) -> CampaignSpec:
    """The spec `make demo` runs, on the subset, two samples per task."""
    spec = load_spec(DEMO_DIR / f"campaign-{agent}.json")
    return spec.model_copy(update={"tasks": load_tasks(tasks_file), "samples": 2})


def _by_task(state: CampaignState) -> dict[str, list[tuple[str | None, str | None]]]:
    results: dict[str, list[tuple[str | None, str | None]]] = {}
    for trajectory in state.trajectories.values():
        status = (trajectory.score or {}).get("status")
        results.setdefault(trajectory.task_id, []).append((trajectory.outcome, status))
    return results


async def test_the_oracle_resolves_every_task_of_the_demo(
    subset_file: Path, tmp_path: Path
) -> None:
    with anyio.fail_after(170):
        _, state = await run_campaign(tmp_path, _demo_spec("oracle", subset_file))
    results = _by_task(state)
    assert len(results) == 3
    assert all(r == [("resolved", "resolved")] * 2 for r in results.values()), results


async def test_noop_resolves_no_task_of_the_demo(subset_file: Path, tmp_path: Path) -> None:
    with anyio.fail_after(60):
        _, state = await run_campaign(tmp_path, _demo_spec("noop", subset_file))
    results = _by_task(state)
    assert len(results) == 3
    assert all(r == [("failed", "empty")] * 2 for r in results.values()), results


async def test_the_mcp_tools_accept_the_demo_task_file(subset_file: Path, tmp_path: Path) -> None:
    spec = json.loads((DEMO_DIR / "campaign-oracle.json").read_text())
    spec.update(tasks=str(subset_file), samples=1)
    async with Client(create_server(tmp_path)) as client:
        started = await call(client, "start_campaign", spec=spec)
        with anyio.fail_after(120):
            status = started
            while status["status"] != "finished":
                status = await call(
                    client, "campaign_status", campaign_id=started["campaign_id"], wait_s=10
                )
    assert status["done"] == 3
    assert status["pass_rate"] == 1.0
