"""Chaos during real campaigns: the sandbox is hurt while a trajectory is mid-way, and the
campaign still ends with the results of an undisturbed run, no `infra_error`, and each
trajectory generated and scored exactly once in the ledger.

The campaign is real: instances of a small git repository (local directory or container),
the `tests` scorer running unittest in fresh workspaces, an agent that works in its own
workspace. The fault is injected when the agent signals that it is mid-trajectory (an event,
no sleeps); the agent then goes on, meets the fault, and the runner takes over.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.cli.main import main
from mcp_evalserver.engine.ledger import LEDGER_FILE, read_ledger
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import SandboxUnavailable
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.sandbox.base import InstanceSpec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.local import LocalBackend
from mcp_evalserver.sandbox.supervised import SupervisedInstance, SupervisedWorkspace
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, Task
from mcp_evalserver.spec.scorers import TestsScorerConfig
from mcp_evalserver.spec.submission import Submission
from tests.root import require_root
from tests.sandbox.docker_support import require_docker
from tests.sandbox.faults import (
    PrivateEngine,
    docker_kill,
    docker_rm_f,
    kill_holder,
    sigkill_supervisor,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

SETUP = (
    "git init -q . && git config user.email t@t && git config user.name t",
    "printf 'def add(a, b):\\n    return a - b\\n' > calc.py",
    "printf 'import unittest\\n\\nimport calc\\n\\n\\nclass TestCalc(unittest.TestCase):\\n"
    "    def test_add(self):\\n        self.assertEqual(calc.add(2, 3), 5)\\n\\n"
    "    def test_zero(self):\\n        self.assertEqual(calc.add(0, 0), 0)\\n' > test_calc.py",
    "git add -A && git commit -qm base",
)
FIXED = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a * b\n"  # the tests run, and test_add fails
VICTIM = "calc0@0"

UNDISTURBED = {
    task: [("resolved", "resolved"), ("failed", "failed")] for task in ("calc0", "calc1")
}

WorkspaceFault = Callable[[SupervisedWorkspace], Awaitable[None]]


def _set_up(directory: Path, setup: list[str]) -> Path:
    directory.mkdir(parents=True)
    for command in setup:
        subprocess.run(["sh", "-c", command], cwd=directory, check=True)
    return directory


def _gold_patch(scratch: Path) -> str:
    _set_up(scratch, list(SETUP))
    (scratch / "calc.py").write_text(FIXED)
    return subprocess.run(
        ["git", "diff"], cwd=scratch, check=True, capture_output=True, text=True
    ).stdout


def _tasks(kind: str, root: Path) -> list[Task]:
    patch = _gold_patch(root / "gold")
    tasks = []
    for number in range(2):
        # Distinct setups: one instance per task.
        setup = [*SETUP, f"echo {number} > .instance && git add -A && git commit -qm n"]
        where: dict[str, str | list[str]]
        if kind == "local":
            where = {"path": str(_set_up(root / f"repo{number}", setup))}
        else:
            where = {"image": require_docker(), "setup": setup}
        tasks.append(
            Task(
                id=f"calc{number}",
                prompt="make add() add",
                patch=patch,
                FAIL_TO_PASS=["test_add (test_calc.TestCalc)"],
                PASS_TO_PASS=["test_zero (test_calc.TestCalc)"],
                **where,
            )
        )
    return tasks


class ChaosAgent(Agent):
    """Fixes the bug in its own workspace (sample 0) or gets it wrong (sample 1).

    The first attempt of `victim` stops mid-trajectory (workspace made, a command run) and
    sets `mid`, until the test has hurt the sandbox and set `go`.
    """

    def __init__(self, victim: str | None) -> None:
        self.victim = victim
        self.mid = anyio.Event()
        self.go = anyio.Event()
        self.paused: SupervisedWorkspace | None = None
        self.attempts: Counter[str] = Counter()

    async def generate(self, context: TrajectoryContext) -> Submission:
        self.attempts[context.trajectory_id] += 1
        workspace = await context.sandbox.workspace()
        status = await workspace.exec("git status --porcelain")
        if status.exit_code != 0:
            raise ValueError(f"git status failed: {status.stderr}")
        if context.trajectory_id == self.victim and not self.mid.is_set():
            assert isinstance(workspace, SupervisedWorkspace)
            self.paused = workspace
            self.mid.set()
            await self.go.wait()
        await workspace.write_file("calc.py", FIXED if context.sample == 0 else WRONG)
        return Submission(patch=await workspace.diff())


def _spec(tasks: list[Task], max_attempts: int = 3, retry_s: float = 0.05) -> CampaignSpec:
    return CampaignSpec(
        name="chaos",
        tasks=tasks,
        samples=2,
        scorer=TestsScorerConfig(
            parser="unittest", test_command="python3 -m unittest -v test_calc", timeout_s=120
        ),
        limits=Limits(
            concurrency=4,
            per_instance=2,
            scoring=2,
            max_attempts=max_attempts,
            retry_base_delay_s=retry_s,
        ),
    )


def _results(state: CampaignState) -> dict[str, list[tuple[str | None, str | None]]]:
    by_task: dict[str, list[tuple[str | None, str | None]]] = {}
    for trajectory in sorted(state.trajectories.values(), key=lambda t: t.id):
        status = (trajectory.score or {}).get("status")
        by_task.setdefault(trajectory.task_id, []).append((trajectory.outcome, status))
    return by_task


async def _run(
    state_dir: Path,
    spec: CampaignSpec | str,
    agent: ChaosAgent,
    fault: WorkspaceFault | None,
    pool: SandboxPool | None = None,
) -> tuple[CampaignRunner, CampaignState]:
    """Runs a new campaign of `spec`, or resumes the campaign named `spec`."""
    store = CampaignStore(state_dir)
    campaign_id = spec if isinstance(spec, str) else await store.create(spec)
    async with pool or SandboxPool() as pool:
        runner = CampaignRunner(store, campaign_id, agent=agent, sandboxes=pool)
        result: list[CampaignState] = []

        async def run() -> None:
            result.append(await runner.run())
            agent.mid.set()  # a campaign that ended without pausing fails below, not hangs

        with anyio.fail_after(240):
            async with anyio.create_task_group() as group:
                group.start_soon(run)
                if fault is not None:
                    await agent.mid.wait()
                    assert agent.paused is not None, f"never paused: {result}"
                    await fault(agent.paused)
                    agent.go.set()
    return runner, result[0]


def _each_finished_once(runner: CampaignRunner, trajectories: int) -> None:
    records = read_ledger(runner.directory / LEDGER_FILE).records
    generated = Counter(r.trajectory for r in records if r.kind == "generated")
    scored = Counter(r.trajectory for r in records if r.kind == "scored")
    assert set(generated.values()) == set(scored.values()) == {1}
    assert len(generated) == len(scored) == trajectories


async def _chaos(kind: str, fault: WorkspaceFault, tmp_path: Path, *, heals_instance: bool) -> None:
    spec = _spec(_tasks(kind, tmp_path / "reference-tasks"))
    _, reference = await _run(tmp_path / "reference", spec, ChaosAgent(None), None)
    expected = _results(reference)
    assert expected == UNDISTURBED, expected

    agent = ChaosAgent(VICTIM)
    spec = _spec(_tasks(kind, tmp_path / "chaos-tasks"))
    runner, state = await _run(tmp_path / "chaos", spec, agent, fault)
    assert state.count("infra_error") == 0
    assert _results(state) == expected
    _each_finished_once(runner, 4)
    assert agent.attempts[VICTIM] >= 2, "the victim met the fault and started a new attempt"
    assert state.trajectories[VICTIM].infra_history, "its failed attempt is in the history"
    if heals_instance:
        assert state.reprovisioned, "the re-provisioning is recorded"
        assert state.reprovisioned[0]["task"] == "calc0"
        # campaign_status shows it, from the ledger.
        shown = EvalService(tmp_path / "chaos").status(runner.campaign_id).reprovisioned
        assert shown[0].task == "calc0"
        assert shown[0].reason
        # So does the CLI's `status ID`.
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            cli_status = main(
                ["--state-dir", str(tmp_path / "chaos"), "status", runner.campaign_id]
            )
        assert cli_status == 0
        health = json.loads(printed.getvalue())["infrastructure"]
        assert health["instances_reprovisioned"] == len(state.reprovisioned)
        assert health["reprovisioned"][0]["task"] == "calc0"
        assert health["reprovisioned"][0]["reason"] == shown[0].reason


def _instance_fault(fault: Callable[..., Awaitable[None]]) -> WorkspaceFault:
    async def hurt(workspace: SupervisedWorkspace) -> None:
        await fault(workspace.instance)

    return hurt


@pytest.fixture
def root_only() -> None:
    require_root()


@pytest.mark.root
@pytest.mark.usefixtures("root_only")
async def test_a_campaign_survives_a_sigkilled_supervisor(tmp_path: Path) -> None:
    await _chaos("local", _instance_fault(sigkill_supervisor), tmp_path, heals_instance=True)


@pytest.mark.root
@pytest.mark.usefixtures("root_only")
async def test_a_campaign_survives_a_killed_workspace_holder(tmp_path: Path) -> None:
    await _chaos("local", kill_holder, tmp_path, heals_instance=False)


@pytest.mark.docker
async def test_a_campaign_survives_a_sigkilled_supervisor_in_a_live_container(
    tmp_path: Path,
) -> None:
    await _chaos("docker", _instance_fault(sigkill_supervisor), tmp_path, heals_instance=True)


@pytest.mark.docker
async def test_a_campaign_survives_docker_kill_of_an_instance_container(tmp_path: Path) -> None:
    await _chaos("docker", _instance_fault(docker_kill), tmp_path, heals_instance=True)


@pytest.mark.docker
async def test_a_campaign_survives_docker_rm_f_of_an_instance_container(tmp_path: Path) -> None:
    await _chaos("docker", _instance_fault(docker_rm_f), tmp_path, heals_instance=True)


@pytest.mark.docker
async def test_a_campaign_survives_a_killed_holder_in_a_container(tmp_path: Path) -> None:
    await _chaos("docker", kill_holder, tmp_path, heals_instance=False)


@pytest.mark.docker
@pytest.mark.root
@pytest.mark.usefixtures("root_only")
# docker-py's unix transport leaves the socket of a connect that failed (the engine is down)
# unclosed; the engine releases it at once (see DockerEngine.call) and Python warns of it.
@pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <socket.socket:pytest.PytestUnraisableExceptionWarning"
)
async def test_a_campaign_survives_a_restart_of_its_docker_engine(tmp_path: Path) -> None:
    image = require_docker()
    # An engine of its own: restarting the shared one would kill other tests' containers.
    engine = PrivateEngine(Path(f"/var/lib/mcp-evalserver/chaos-engine-{os.getpid()}"))
    try:
        await engine.start()
        await engine.load_image(image)
        # Backoff of 1 s doubling over 6 tries per cause: a restart has ~30 s to complete.
        spec = _spec(_tasks("docker", tmp_path / "tasks"), max_attempts=6, retry_s=1.0)
        agent = ChaosAgent(VICTIM)

        async def restart_engine(_: SupervisedWorkspace) -> None:
            await engine.restart()

        pool = SandboxPool(backends=lambda *_: DockerBackend(base_url=engine.url))
        runner, state = await _run(tmp_path / "state", spec, agent, restart_engine, pool)
    finally:
        with anyio.CancelScope(shield=True):
            await engine.aclose()
    assert state.count("infra_error") == 0
    assert _results(state) == UNDISTURBED
    _each_finished_once(runner, 4)
    assert agent.attempts[VICTIM] >= 2
    assert state.reprovisioned, "the instances lost with the engine were provisioned again"


class RefusingLocalBackend(LocalBackend):
    """The local backend, refusing to provision the `refused` directories while `refusing`."""

    def __init__(self, refused: set[str]) -> None:
        super().__init__()
        self.refused = refused
        self.refusing = True

    async def instance(self, spec: InstanceSpec) -> SupervisedInstance:
        if self.refusing and spec.path in self.refused:
            raise SandboxUnavailable(f"the backend refuses to provision {spec.path} for now")
        return await super().instance(spec)


@pytest.mark.root
@pytest.mark.usefixtures("root_only")
async def test_a_campaign_left_with_infrastructure_failures_is_completed_by_resume_alone(
    tmp_path: Path,
) -> None:
    tasks = _tasks("local", tmp_path / "tasks")
    refused = {str(tasks[1].path)}
    agent = ChaosAgent(None)
    refusing = RefusingLocalBackend(refused)
    runner, state = await _run(
        tmp_path / "state",
        _spec(tasks, max_attempts=2),
        agent,
        None,
        SandboxPool(backends=lambda *_: refusing),
    )
    assert _results(state) == {
        "calc0": UNDISTURBED["calc0"],
        "calc1": [("infra_error", None), ("infra_error", None)],
    }
    assert state.describe_status() == (
        "finished with 2 infrastructure failures — resume to retry them"
    )
    assert len(state.trajectories["calc1@0"].infra_history) == 2

    # The backend is back (a new process would make a new one): resume runs those two alone.
    agent.attempts.clear()
    healed = RefusingLocalBackend(refused)
    healed.refusing = False
    resumed, state = await _run(
        tmp_path / "state", runner.campaign_id, agent, None, SandboxPool(backends=lambda *_: healed)
    )
    assert resumed.retrying == 2
    assert agent.attempts == {"calc1@0": 1, "calc1@1": 1}, "nothing else ran again"
    assert _results(state) == UNDISTURBED
    assert state.describe_status() == "finished"
    _each_finished_once(resumed, 4)
    assert len(state.trajectories["calc1@0"].infra_history) == 2, "the history stays"
