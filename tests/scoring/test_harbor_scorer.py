"""Harbor tasks end to end on the docker backend: images built from each task's Dockerfile,
the oracle's solve.sh, the verifier's reward, and agents that try to fool the verifier."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput, SandboxUnavailable
from mcp_evalserver.runtime.sandboxes import instance_spec
from mcp_evalserver.sandbox.docker import DockerBackend
from mcp_evalserver.sandbox.supervised import SupervisedInstance
from mcp_evalserver.scoring.base import ScoreResult, ScoringContext
from mcp_evalserver.scoring.harbor import HarborScorer
from mcp_evalserver.server.dashboard.render import static_report
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


class Runs(Agent):
    """Runs the command its sample number picks, then submits its workdir's diff."""

    def __init__(self, *commands: str) -> None:
        self.commands = commands

    async def generate(self, context: TrajectoryContext) -> Submission:
        workspace = await context.sandbox.workspace()
        result = await workspace.exec(self.commands[context.sample], timeout=60)
        assert result.exit_code == 0, result.stderr
        return Submission(patch=await workspace.diff() or None)


def Trickster() -> Runs:
    return Runs(*TRICKS.values())


async def test_no_trick_raises_the_reward_in_fresh_and_in_place_each_is_zero_or_flagged(
    tmp_path: Path,
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "tricks", tasks / "tricks")
    for verify in ("fresh", "in_place"):
        spec = _spec(tasks, samples=len(TRICKS), scorer=HarborScorerConfig(verify=verify))
        state = await _run(tmp_path / verify, spec, agent=Trickster())
        scores = _scores(state)
        if verify == "fresh":
            assert scores == {f"tricks@{n}": ("failed", 0.0) for n in range(len(TRICKS))}, scores
            planted = state.trajectories["tricks@2"].score["details"]  # type: ignore[index]
            assert {"/app/conftest.py", "/app/sitecustomize.py", "/app/evil.pth"} <= set(
                planted["dropped"]
            )
            replaced = state.trajectories["tricks@1"].score["details"]  # type: ignore[index]
            assert {"/usr/bin/bash", "/usr/local/bin/python3"} <= set(replaced["dropped"])
            continue
        for tid, trajectory in state.trajectories.items():
            details = trajectory.score["details"]  # type: ignore[index]
            assert details["mode"] == "in_place"
            assert details["workspace"] == "the agent's own"
            assert scores[tid] == ("failed", 0.0) or details.get("evidence"), (tid, details)
        evidence = {
            tid: t.score["details"].get("evidence", {})  # type: ignore[index]
            for tid, t in state.trajectories.items()
        }
        assert "/logs/verifier/reward.txt" in evidence["tricks@0"]["verifier_files_planted"]
        assert "/usr/bin/bash" in evidence["tricks@1"]["image_programs_replaced_or_shadowed"]
        assert "/app/conftest.py" in evidence["tricks@2"]["python_or_pytest_configuration_planted"]
        report = build_report(state)
        assert set(report["evidence"]) >= {"tricks@0", "tricks@1", "tricks@2"}
        assert "tampering evidence" in render_markdown(report)
        html = static_report(CampaignStore(tmp_path / verify / "state"), state.id)
        assert 'id="tampering-evidence"' in html


#: Changes what a workdir diff cannot carry: a mode, a file in /etc, a nested repository, a
#: program installed (a new command: no image program is replaced or shadowed).
STATE_CHANGES = (
    "echo secret > /etc/evs-key && chmod 600 /etc/evs-key && "
    "printf '#!/bin/sh\\necho hi\\n' > /usr/local/bin/evs-tool && "
    "chmod +x /usr/local/bin/evs-tool && "
    "mkdir -p /app/sub && cd /app/sub && git init -q && "
    "git -c user.email=a@b -c user.name=a commit -q --allow-empty -m one"
)


def _state_task(tmp_path: Path) -> Path:
    """A task whose verifier rewards exactly `STATE_CHANGES`."""
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "fractional", tasks / "state")
    (tasks / "state" / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        '[ "$(stat -c %a /etc/evs-key)" = 600 ] && [ "$(cat /etc/evs-key)" = secret ] && '
        '[ "$(evs-tool)" = hi ] && '
        "git -C /app/sub log --oneline | grep -q one && echo 1 > /logs/verifier/reward.txt "
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    return tasks


def Chmodder() -> Runs:
    return Runs(STATE_CHANGES)


async def test_both_modes_give_the_verifier_every_file_the_agent_changed_anywhere(
    tmp_path: Path,
) -> None:
    """A mode, a file in /etc and a nested repository reach the verifier in either mode."""
    tasks = _state_task(tmp_path)
    for verify in ("fresh", "in_place"):
        spec = _spec(tasks, scorer=HarborScorerConfig(verify=verify))
        state = await _run(tmp_path / verify, spec, agent=Chmodder())
        assert _scores(state) == {"state@0": ("resolved", 1.0)}, (verify, state.trajectories)
        details = state.trajectories["state@0"].score["details"]  # type: ignore[index]
        assert not details.get("evidence"), details
        assert not details.get("dropped"), details


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
    with pytest.raises(InvalidInput, match=r"broken/task.toml: unknown key '\[verifier\] retries'"):
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


class LosesTheFirstEvaluation(HarborScorer):
    """In place, but the first evaluation fails as if the agent's box had gone away."""

    failed = False

    async def score(self, context: ScoringContext) -> ScoreResult:
        if not self.failed:
            self.failed = True
            assert context.in_agent_workspace
            raise SandboxUnavailable("the instance went away (a test)")
        return await super().score(context)


async def test_in_place_restores_the_agents_files_when_its_workspace_is_gone(
    tmp_path: Path,
) -> None:
    tasks = _state_task(tmp_path)
    spec = _spec(tasks, scorer=HarborScorerConfig(verify="in_place"))
    spec = spec.model_copy(update={"limits": spec.limits.model_copy(update={"max_attempts": 3})})
    with anyio.fail_after(600):
        _, state = await run_campaign(
            tmp_path / "state", spec, agent=Chmodder(), scorer=LosesTheFirstEvaluation()
        )
    trajectory = state.trajectories["state@0"]
    assert (trajectory.outcome, trajectory.score["score"]) == ("resolved", 1.0)  # type: ignore[index]
    assert trajectory.score["details"]["workspace"].startswith("restored from the agent's files")  # type: ignore[index]


async def test_a_repository_the_image_has_at_the_workdir_keeps_its_own_history(
    tmp_path: Path,
) -> None:
    """No commit of ours lands in a task's own repository (its history may be the task)."""
    tasks = tmp_path / "tasks"
    task = Path(shutil.copytree(EXAMPLES / "fractional", tasks / "repo"))
    dockerfile = (task / "environment" / "Dockerfile").read_text()
    (task / "environment" / "Dockerfile").write_text(
        dockerfile + "RUN git init -q /app && git -C /app -c user.email=a@b -c user.name=a "
        "commit -q --allow-empty -m theirs\n"
    )
    (task / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        '[ "$(git -C /app log --format=%s)" = theirs ] && echo 1 > /logs/verifier/reward.txt '
        "|| echo 0 > /logs/verifier/reward.txt\n"
    )
    state = await _run(tmp_path, _spec(tasks, agent=NoopAgentConfig()))
    assert _scores(state) == {"repo@0": ("resolved", 1.0)}
