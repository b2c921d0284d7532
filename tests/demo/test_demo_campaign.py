"""The demo campaigns end to end, on a subset of the suite: real workspaces, the `tests` scorer.

The oracle, noop, the `openai` agent and mini-swe-agent's own loop (its litellm model against
the fake endpoint) run on it. The subset is built under pytest's tmp_path on purpose:
workspaces hide the host's /tmp, so this also proves an instance holds everything its tests
need.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from demo.build_suite import DEMO_DIR, build_suite
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.server.mcp_app import create_server
from mcp_evalserver.spec.agents import OpenAIAgentConfig
from mcp_evalserver.spec.campaign import CampaignSpec, Task, load_tasks
from tests.agents.fake_openai import FakeOpenAI, Reply, serving
from tests.agents.fake_openai import call as call_tool
from tests.agents.helpers import records
from tests.engine.helpers import run_campaign
from tests.litellm_sockets import litellm_sockets
from testsupport.servers import call

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]

SUBSET = {"inflection": ("ordinal-thirteen", "camelize-lower-first"), "toolz": ("unique-key",)}
MODEL = "openai/scripted-model"
#: Dollars per token the fake model is priced at (litellm's registry, as for a local model).
INPUT_PRICE, OUTPUT_PRICE = 1e-5, 5e-5
#: The fake's tokens per reply (`Reply`'s defaults): 100 in, 20 out.
COST_PER_CALL = 100 * INPUT_PRICE + 20 * OUTPUT_PRICE
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


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


async def test_noop_resolves_no_task_of_the_demo(subset_file: Path, tmp_path: Path) -> None:
    with anyio.fail_after(60):
        _, state = await run_campaign(tmp_path, _demo_spec("noop", subset_file))
    results = _by_task(state)
    assert len(results) == 3
    assert all(r == [("failed", "empty")] * 2 for r in results.values()), results


async def test_the_oracle_resolves_every_task_of_the_demo_started_by_the_mcp_tools_from_its_file(
    subset_file: Path, tmp_path: Path
) -> None:
    # One campaign for what two proved apart (the oracle resolving every task, and the MCP
    # tools taking the demo's task file): the spec `make demo` runs, its tasks named by file.
    spec = json.loads((DEMO_DIR / "campaign-oracle.json").read_text())
    spec.update(tasks=str(subset_file), samples=2)
    async with Client(create_server(tmp_path)) as client:
        started = await call(client, "start_campaign", spec=spec)
        with anyio.fail_after(170):
            status = started
            while status["status"] != "finished":
                status = await call(
                    client, "campaign_status", campaign_id=started["campaign_id"], wait_s=10
                )
    assert status["done"] == 6
    assert status["pass_rate"] == 1.0
    state = CampaignStore(tmp_path).load(started["campaign_id"])
    results = _by_task(state)
    assert len(results) == 3
    assert all(r == [("resolved", "resolved")] * 2 for r in results.values()), results
    assert build_report(state)["nodes"] is None  # one machine: no nodes to name


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


def _bash(thought: str, command: str) -> Reply:
    return Reply(content=thought, tool_calls=(("bash", {"command": command}),))


class Engineer:
    """The scripted model: which task a request is about (its prompt is in the first user
    message), and how far the conversation got (replies so far), choose the next command."""

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks

    def task_of(self, body: dict[str, Any]) -> Task:
        opening = str(body["messages"][1]["content"])
        (task,) = [t for t in self.tasks if t.prompt in opening]
        return task

    def __call__(self, body: dict[str, Any]) -> Reply:
        task = self.task_of(body)
        assert task.patch is not None
        (path,) = re.findall(r"^diff --git a/(\S+) ", task.patch, re.MULTILINE)
        test_command = task.prompt.rsplit("`", 2)[1]
        steps = [
            _bash("First, the tests as the issue says.", test_command),
            _bash("Where the code lives.", f"grep -n 'def ' {path} | head -40"),
            _bash("The fix.", f"git apply <<'PATCH'\n{task.patch}PATCH"),
            _bash("Done.", SUBMIT),
        ]
        replies = sum(1 for m in body["messages"] if m["role"] == "assistant")
        return steps[replies]


@litellm_sockets
async def test_mini_swe_agent_investigates_and_fixes_each_demo_task_through_its_own_loop(
    subset_file: Path, tmp_path: Path
) -> None:
    # The `mini-swe-agent` agent type: mini-swe-agent's DefaultAgent with its litellm model
    # against the fake endpoint, which plays an engineer who knows each bug. It runs the task's
    # tests, looks at the file, applies the fix and submits, one command a turn, as mini-swe-
    # agent's `mini` config asks; the tests scorer grades the patch.
    tasks = load_tasks(subset_file)
    registry = tmp_path / "prices.json"
    registry.write_text(
        json.dumps(
            {
                MODEL: {
                    "input_cost_per_token": INPUT_PRICE,
                    "output_cost_per_token": OUTPUT_PRICE,
                    "litellm_provider": "openai",
                    "mode": "chat",
                }
            }
        )
    )
    engineer = Engineer(tasks)
    with serving(FakeOpenAI([], then=engineer)) as fake, anyio.fail_after(400):
        # The demo's own spec (scorer, limits), with this agent and one sample per task.
        spec = CampaignSpec.model_validate_json((DEMO_DIR / "campaign-oracle.json").read_text())
        agent = {
            "type": "mini-swe-agent",
            # A test run may take more than the default 30 s on a loaded machine.
            "config": {"agent": {"step_limit": 8}, "environment": {"timeout": 300}},
            "model": {
                "model_name": MODEL,
                "model_kwargs": {"api_base": fake.url, "api_key": "sk-none"},
                "litellm_model_registry": str(registry),
            },
        }
        spec = CampaignSpec.model_validate(
            spec.model_dump() | {"tasks": tasks, "samples": 1, "agent": agent}
        )
        runner, state = await run_campaign(tmp_path / "state", spec)

    outcomes = {
        t.task_id: (t.outcome, (t.score or {}).get("status")) for t in state.trajectories.values()
    }
    assert len(outcomes) == len(tasks)
    assert set(outcomes.values()) == {("resolved", "resolved")}, outcomes
    # It investigated before fixing: each saw its task's tests fail, then read the file.
    by_task: dict[str, list[dict[str, Any]]] = {}
    for seen in fake.seen:
        by_task.setdefault(engineer.task_of(seen.body).id, []).append(seen.body)
    assert {task: len(bodies) for task, bodies in by_task.items()} == {t.id: 4 for t in tasks}
    for bodies in by_task.values():
        ran_tests = json.dumps(bodies[1]["messages"][-1])
        assert re.search(r"\d+ failed", ran_tests), ran_tests[-500:]
    # Its usage and cost, as mini-swe-agent counted them, reach the ledger and the report.
    for generated in records(runner.directory, "generated"):
        usage = generated["usage"]
        assert (usage["requests"], usage["input_tokens"], usage["output_tokens"]) == (4, 400, 80)
        assert usage["cost_usd"] == pytest.approx(4 * COST_PER_CALL)
    total = len(tasks) * 4 * COST_PER_CALL
    report = build_report(state)
    assert report["summary"]["cost_usd"] == pytest.approx(total)
    assert report["cost"]["cost_usd"] == pytest.approx(total)  # its `model_usage` records
    assert f"cost: **${total:.4f}**" in render_markdown(report)
