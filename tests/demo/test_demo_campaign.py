"""The demo campaigns end to end, on a subset of the suite: real workspaces, the `tests` scorer.

The subset is built under pytest's tmp_path on purpose: workspaces hide the host's /tmp, so
this also proves an instance holds everything its tests need.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from demo.build_suite import DEMO_DIR, build_suite
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.agents import OpenAIAgentConfig
from mcp_evalserver.spec.campaign import CampaignSpec, load_tasks
from tests.agents.fake_openai import FakeOpenAI, serving
from tests.agents.fake_openai import call as call_tool
from tests.engine.helpers import run_campaign
from testsupport.servers import call

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]

SUBSET = {"inflection": ("ordinal-thirteen", "camelize-lower-first"), "toolz": ("unique-key",)}


@pytest.fixture(scope="module")
def subset_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_suite(
        tmp_path_factory.mktemp("demo") / "build",
        projects=list(SUBSET),
        bugs=[bug for bugs in SUBSET.values() for bug in bugs],
        log=lambda _: None,
    )


def _demo_spec(agent: str, tasks_file: Path) -> CampaignSpec:
    """The spec `make demo` runs, on the subset, two samples per task."""
    # Validated as written, not resolved: its task file (demo/build/tasks.jsonl) exists only
    # after `make demo`, and a clean clone has not run it.
    spec = CampaignSpec.model_validate_json((DEMO_DIR / f"campaign-{agent}.json").read_text())
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


async def test_a_model_that_tests_and_fixes_a_demo_task_resolves_it(
    subset_file: Path, tmp_path: Path
) -> None:
    # The openai agent against a scripted model: it runs the tests in its workspace the way the
    # prompt says (bytecode and all), writes the fixed file and submits. Only the fix may
    # reach the patch, and the tests scorer must resolve it.
    (task,) = [t for t in load_tasks(subset_file) if t.id == "inflection__camelize-lower-first"]
    sources = subset_file.parent / "sources"
    fixed = (sources / "inflection-0.5.1" / "inflection" / "__init__.py").read_text()
    test_command = task.prompt.rsplit("`", 2)[1]
    script = [
        call_tool("exec", command=test_command),
        call_tool("write_file", path="inflection/__init__.py", content=fixed),
        call_tool("submit", answer="fixed camelize"),
    ]
    with serving(FakeOpenAI(script)) as fake, anyio.fail_after(120):
        spec = _demo_spec("noop", subset_file).model_copy(
            update={
                "tasks": [task],
                "samples": 1,
                "agent": OpenAIAgentConfig(model="scripted", base_url=fake.url),
            }
        )
        _, state = await run_campaign(tmp_path, spec)
    (trajectory,) = state.trajectories.values()
    assert trajectory.outcome == "resolved", trajectory.score
    # What the model saw of its test run: the bug, caught by the suite.
    assert "1 failed" in str(fake.seen[1].body["messages"][-1]["content"])
    assert trajectory.submission is not None
    (patch,) = tmp_path.glob(f"campaigns/*/{trajectory.submission['patch']['path']}")
    touched = [line for line in patch.read_text().splitlines() if line.startswith("diff --git")]
    assert touched == ["diff --git a/inflection/__init__.py b/inflection/__init__.py"]
