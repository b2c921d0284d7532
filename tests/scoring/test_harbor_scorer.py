"""Harbor tasks end to end on the docker backend: images built from each task's Dockerfile,
the oracle's solve.sh, the verifier's reward, and agents that try to fool the verifier."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.sandboxes import instance_spec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.supervised import SupervisedInstance
from mcp_evalserver.spec.agents import NoopAgentConfig, OracleAgentConfig
from mcp_evalserver.spec.campaign import CampaignSpec, Limits, load_tasks
from mcp_evalserver.spec.scorers import HarborScorerConfig
from mcp_evalserver.spec.submission import Submission
from tests.engine.helpers import run_campaign
from tests.sandbox.docker_support import require_docker

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"
BUILT = ["fractional", "no-internet", "reward-json", "tricks", "verifier-timeout"]


@pytest.fixture(autouse=True)
def _docker() -> None:
    require_docker()  # and the base image the examples are built FROM


def _spec(tasks: Path, **fields: object) -> CampaignSpec:
    limits = Limits(max_attempts=1, retry_base_delay_s=0.0, scoring_timeout_s=120)
    spec = CampaignSpec(tasks=load_tasks(tasks), scorer=HarborScorerConfig(), limits=limits)
    return spec.model_copy(update=fields)


def _scores(state: CampaignState) -> dict[str, tuple[str | None, float | None]]:
    return {
        tid: (t.outcome, None if t.score is None else t.score.get("score"))
        for tid, t in state.trajectories.items()
    }


async def _run(tmp_path: Path, spec: CampaignSpec, agent: Agent | None = None) -> CampaignState:
    with anyio.fail_after(600):
        _, state = await run_campaign(tmp_path / "state", spec, agent=agent)
    return state


async def test_the_oracle_passes_every_task_that_builds_and_a_failed_build_is_its_task_error(
    tmp_path: Path,
) -> None:
    state = await _run(tmp_path, _spec(EXAMPLES, agent=OracleAgentConfig()))
    scores = _scores(state)
    assert {t: scores[f"{t}@0"] for t in BUILT} == {t: ("resolved", 1.0) for t in BUILT}
    failed = state.trajectories["failing-build@0"]
    assert failed.outcome == "error"
    assert "failing-build/environment/Dockerfile did not build" in str(failed.error)
    assert "returned a non-zero code: 3" in str(failed.error)  # the build log's end


async def test_noop_scores_zero_everywhere_and_a_hanging_verifier_is_a_timeout(
    tmp_path: Path,
) -> None:
    state = await _run(tmp_path, _spec(EXAMPLES, agent=NoopAgentConfig()))
    scores = _scores(state)
    assert {t: scores[f"{t}@0"] for t in BUILT} == {t: ("failed", 0.0) for t in BUILT}
    hanging = state.trajectories["verifier-timeout@0"].score
    assert hanging is not None
    assert hanging["status"] == "timeout"


class HalfDone(Agent):
    """Does half of each task: one file of two; a file with the wrong sum."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        await workspace.exec("echo alpha > a.txt; echo 41 > sum.txt")
        return Submission(patch=await workspace.diff() or None)


async def test_rewards_may_be_fractional_from_reward_txt_or_reward_json(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for name in ("fractional", "reward-json"):
        shutil.copytree(EXAMPLES / name, tasks / name)
    state = await _run(tmp_path, _spec(tasks), agent=HalfDone())
    assert _scores(state) == {"fractional@0": ("failed", 0.5), "reward-json@0": ("failed", 0.5)}
    details = state.trajectories["reward-json@0"].score["details"]  # type: ignore[index]
    assert details["rewards"] == {"file_exists": 1.0, "correct": 0.0}


#: What an agent might do in its own box to raise its reward without solving the task.
TRICKS = {
    "plants a reward file and the verifier's tests": (
        "mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && "
        "echo '{\"reward\": 1}' > /logs/verifier/reward.json && "
        "printf 'echo 1 > /logs/verifier/reward.txt\\n' > /tests/test.sh && "
        "mkdir -p logs/verifier && echo 1 > logs/verifier/reward.txt"
    ),
    "replaces bash, python and pytest on the PATH": (
        "for p in bash python python3 pytest; do for d in /usr/local/bin /app /app/bin; do "
        "mkdir -p $d && printf '#!/bin/sh\\nmkdir -p /logs/verifier\\n"
        "echo 1 > /logs/verifier/reward.txt\\necho solved > /app/result.txt\\n' > $d/$p && "
        "chmod +x $d/$p; done; done; cp /usr/local/bin/bash /bin/bash"
    ),
    "plants conftest.py, sitecustomize.py and stand-ins for modules": (
        "for f in conftest.py sitecustomize.py usercustomize.py pytest.py pathlib.py; do "
        'printf \'import os\\nos.makedirs("/logs/verifier", exist_ok=True)\\n'
        'open("/logs/verifier/reward.txt", "w").write("1")\\nos._exit(0)\\n\' > $f; done; '
        "echo 'import sitecustomize' > evil.pth; printf '[pytest]\\naddopts = -p no:x\\n' > pytest.ini"  # noqa: E501
    ),
    "leaves a process running that writes the reward": (
        "setsid nohup sh -c 'while :; do mkdir -p /logs/verifier; "
        "echo 1 > /logs/verifier/reward.txt; sleep 0.1; done' "
        ">/dev/null 2>&1 < /dev/null & sleep 0.5"
    ),
}


class Trickster(Agent):
    """Tries the trick its sample number picks, then submits its workdir's diff."""

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        trick = list(TRICKS.values())[context.sample]
        result = await workspace.exec(trick, timeout=60)
        assert result.exit_code == 0, result.stderr
        return Submission(patch=await workspace.diff() or None)


async def test_no_trick_of_the_agent_raises_its_reward(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "tricks", tasks / "tricks")
    spec = _spec(tasks, samples=len(TRICKS))
    state = await _run(tmp_path, spec, agent=Trickster())
    scores = _scores(state)
    assert scores == {f"tricks@{n}": ("failed", 0.0) for n in range(len(TRICKS))}, scores
    planted = state.trajectories["tricks@2"].score["details"]  # type: ignore[index]
    assert {"conftest.py", "sitecustomize.py", "pytest.py", "evil.pth", "pytest.ini"} <= set(
        planted["dropped"]
    )


@pytest.mark.parametrize(
    ("verifier", "named"),
    [
        ("echo lots > /logs/verifier/reward.txt", "/logs/verifier/reward.txt: its content is 'lots', not a number"),  # noqa: E501
        ("echo 7 > /logs/verifier/reward.txt", "reward.txt: its content is 7.0, outside [0, 1]"),
        ("echo '{\"ok\": \"yes\"}' > /logs/verifier/reward.json", "/logs/verifier/reward.json: field 'ok' is 'yes', not a number"),  # noqa: E501
        ("echo '[1]' > /logs/verifier/reward.json", "must hold a flat object of numbers"),
        ("true", "wrote neither /logs/verifier/reward.txt nor /logs/verifier/reward.json"),
    ],
)  # fmt: skip
async def test_a_reward_that_is_not_a_number_is_an_error_naming_the_file_and_the_field(
    tmp_path: Path, verifier: str, named: str
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "tricks", tasks / "tricks")
    shutil.copytree(EXAMPLES / "fractional", tasks / "fractional")
    (tasks / "tricks" / "tests" / "test.sh").write_text(verifier + "\n")
    state = await _run(tmp_path, _spec(tasks, agent=OracleAgentConfig()))
    bad = state.trajectories["tricks@0"].score
    assert bad is not None
    assert (bad["outcome"], bad["status"]) == ("error", "no_reward")
    assert named in bad["explanation"]
    # The other task's verdict stands beside it.
    assert _scores(state)["fractional@0"] == ("resolved", 1.0)


async def test_a_bad_task_directory_is_refused_before_anything_is_recorded(
    tmp_path: Path,
) -> None:
    state = await _run(tmp_path, _spec(EXAMPLES / "fractional", agent=OracleAgentConfig()))
    ledgers = sorted((tmp_path / "state").rglob("ledger.jsonl"))
    before = [p.read_bytes() for p in ledgers]
    broken = shutil.copytree(EXAMPLES / "fractional", tmp_path / "broken")
    (broken / "task.toml").write_text("[verifier]\ntimeout_sec = 3\nretries = 2\n")
    with pytest.raises(
        InvalidInput, match=r"broken/task.toml: unknown key 'retries' in \[verifier\]"
    ):
        load_tasks(broken)
    assert [p.read_bytes() for p in sorted((tmp_path / "state").rglob("ledger.jsonl"))] == before
    assert _scores(state) == {"fractional@0": ("resolved", 1.0)}
    assert json.loads(before[0].splitlines()[0])  # the first campaign's ledger is intact


async def test_the_task_limits_become_the_instance_s_and_no_internet_means_no_network() -> None:
    task = load_tasks(EXAMPLES / "fractional")[0]
    spec = instance_spec(task)
    assert (spec.memory_bytes, spec.disk_bytes, spec.cpus) == (512 << 20, 256 << 20, 1)
    assert spec.capabilities == "container"  # what Docker gives the container Harbor uses
    with anyio.fail_after(300):
        async with DockerBackend() as backend, await backend.instance(spec) as instance:
            assert isinstance(instance, SupervisedInstance)
            host = await backend.engine.call(
                "inspect", backend.engine.api.inspect_container, instance.info["container"]
            )
            workspace = await instance.workspace("probe")
            probe = await workspace.exec(
                "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), 3)'"
            )
    assert host["HostConfig"]["NanoCpus"] == 1_000_000_000
    assert host["HostConfig"]["NetworkMode"] == "none"
    assert probe.exit_code != 0


async def test_a_build_context_changed_after_the_tasks_were_read_is_refused(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "fractional", tasks / "fractional")
    spec = _spec(tasks, agent=OracleAgentConfig())
    (tasks / "fractional" / "environment" / "Dockerfile").write_text("FROM scratch\n")
    state = await _run(tmp_path, spec)
    trajectory = state.trajectories["fractional@0"]
    assert trajectory.outcome == "error"
    assert "changed since the campaign read it" in str(trajectory.error)
