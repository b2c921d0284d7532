"""Harbor task directories load as tasks; bad ones are refused naming the file and the field."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import anyio
import pytest

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.builtin import OracleAgent
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.scoring.harbor import without_protected
from mcp_evalserver.spec.agents import OracleAgentConfig
from mcp_evalserver.spec.campaign import (
    CampaignSpec,
    Limits,
    Task,
    load_spec,
    load_tasks,
    parse_spec,
)
from mcp_evalserver.spec.harbor import IMAGE_REPOSITORY, harbor_of
from mcp_evalserver.spec.scorers import HarborScorerConfig
from tests.engine.helpers import run_campaign

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "harbor"


def _copy(tmp_path: Path, name: str = "fractional") -> Path:
    return Path(shutil.copytree(EXAMPLES / name, tmp_path / name))


def test_a_folder_of_task_directories_gives_one_task_each() -> None:
    tasks = {task.id: task for task in load_tasks(EXAMPLES)}
    assert set(tasks) == {
        "failing-build", "fractional", "no-internet", "reward-json", "tricks", "verifier-timeout",
    }  # fmt: skip
    fractional = tasks["fractional"]
    harbor = harbor_of(fractional.metadata)
    assert harbor is not None
    assert fractional.prompt.startswith("Write `alpha`")
    assert fractional.image is not None
    assert fractional.image.startswith(IMAGE_REPOSITORY + "/")
    assert (fractional.workdir, fractional.network) == ("/app", False)
    assert fractional.metadata["difficulty"] == "easy"
    assert harbor.build_context == str(EXAMPLES / "fractional" / "environment")
    assert (harbor.verifier_timeout_s, harbor.agent_timeout_s) == (30, 60)
    assert (harbor.memory_mb, harbor.storage_mb, harbor.cpus) == (512, 256, 1)
    assert set(harbor.tests) == {"test.sh"}
    assert set(harbor.solution) == {"solve.sh"}
    assert "tests/test.sh" in harbor.executable
    assert set(harbor_of(tasks["tricks"].metadata).tests) == {"test.sh", "check.py"}  # type: ignore[union-attr]


def test_the_base_commit_of_a_harbor_task_names_nothing_of_the_task() -> None:
    # The workdir is committed in the image by the task's setup: its message and author are
    # what `git log` shows the agent.
    for task in load_tasks(EXAMPLES):
        (setup,) = task.setup
        assert "commit" in setup
        for told in (task.id, *task.id.split("-"), task.prompt[:40]):
            assert told not in setup, (task.id, told)


def test_a_spec_may_name_one_task_directory_relative_to_itself(tmp_path: Path) -> None:
    _copy(tmp_path)
    (tmp_path / "spec.json").write_text('{"tasks": "fractional", "scorer": {"type": "harbor"}}')
    spec = load_spec(tmp_path / "spec.json")
    assert [task.id for task in spec.task_list()] == ["fractional"]
    assert spec.scorer.type == "harbor"


def test_the_image_tag_follows_the_build_context(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    before = load_tasks(task)[0].image
    assert load_tasks(task)[0].image == before
    (task / "environment" / "Dockerfile").write_text("FROM mcp-evalserver/base:bookworm\n")
    assert load_tasks(task)[0].image != before


def test_a_docker_image_stands_in_for_a_dockerfile(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "environment" / "Dockerfile").unlink()
    toml = (task / "task.toml").read_text()
    (task / "task.toml").write_text(toml.replace("cpus = 1", 'docker_image = "x/y:1"\ncpus = 1'))
    loaded = load_tasks(task)[0]
    assert loaded.image == "x/y:1"
    assert harbor_of(loaded.metadata).build_context is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda t: (t / "task.toml").write_text("[verifier]\ntimeout = 3\n"), "unknown key '[verifier] timeout'"),  # noqa: E501
        (lambda t: (t / "task.toml").write_text("[verifyer]\n"), "unknown key 'verifyer'"),
        (lambda t: (t / "task.toml").write_text('[verifier]\ntimeout_sec = "soon"\n'), "[verifier] timeout_sec: Input should be a valid number"),  # noqa: E501
        (lambda t: (t / "task.toml").write_text('[environment]\nallow_internet = "maybe"\n'), "[environment] allow_internet: Input should be a valid boolean"),  # noqa: E501
        (lambda t: (t / "task.toml").write_text("[agent]\ntimeout_sec = -1\n"), "[agent] timeout_sec: Input should be greater than 0"),  # noqa: E501
        (lambda t: (t / "task.toml").write_text("[agent\n"), "is not TOML"),
        (lambda t: (t / "tests" / "test.sh").unlink(), "tests/test.sh is missing"),
        (lambda t: (t / "instruction.md").unlink(), "instruction.md is missing"),
        (lambda t: (t / "environment" / "Dockerfile").unlink(), "give environment/Dockerfile or task.toml [environment] docker_image"),  # noqa: E501
        (lambda t: (t / "environment" / "Dockerfile").write_text("FROM x\nWORKDIR /\n"), "WORKDIR /"),  # noqa: E501
        (lambda t: (t / "tests" / "link").symlink_to("/etc/passwd"), "is a symlink"),
        (lambda t: (t / "environment" / "docker-compose.yaml").write_text("services: {}\n"), "a task of several containers (Docker Compose) cannot run here"),  # noqa: E501
    ],
)  # fmt: skip
def test_a_bad_task_directory_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, edit: object, named: str
) -> None:
    task = _copy(tmp_path)
    edit(task)  # type: ignore[operator]
    with pytest.raises(InvalidInput) as caught:
        load_tasks(task)
    message = str(caught.value)
    assert named in message
    assert str(task) in message


#: Terminal-Bench 2.1 task.toml files as published (provenance in the README beside them).
TB21 = Path(__file__).parent / "fixtures" / "tb21"


@pytest.mark.parametrize("name", sorted(p.name for p in TB21.iterdir() if p.is_dir()))
def test_a_terminal_bench_2_1_task_toml_loads_as_published(tmp_path: Path, name: str) -> None:
    task = Path(shutil.copytree(EXAMPLES / "fractional", tmp_path / name))
    shutil.copy(TB21 / name / "task.toml", task / "task.toml")
    loaded = load_tasks(task)[0]
    harbor = harbor_of(loaded.metadata)
    assert harbor is not None
    assert (harbor.verifier_timeout_s, harbor.agent_timeout_s, harbor.cpus) == (900, 900, 1)
    assert harbor.memory_mb in (2048, 8192)
    assert loaded.network is True
    assert loaded.metadata["package"]["name"] == f"terminal-bench/{name}"
    # Both a Dockerfile and docker_image: built here from the Dockerfile (no registry).
    assert loaded.image is not None
    assert loaded.image.startswith(IMAGE_REPOSITORY + "/")
    assert loaded.metadata["published_image"].startswith(f"alexgshaw/{name}:")


@pytest.mark.parametrize(
    ("toml", "named"),
    [
        ("[environment]\ngpus = 1\n", "[environment] gpus (no GPU reaches a workspace)"),
        ('[environment]\nos = "windows"\n', "[environment] os"),
        ('artifacts = ["/app/out"]\n', "artifacts (files Harbor copies out after a trial)"),
        ('[environment]\nenv = {TOKEN = "${TOKEN}"}\n', "[environment] env"),
        ('[agent]\nuser = "agent"\n', "[agent] user"),
        ('[environment]\nallowed_hosts = ["pypi.org"]\n', "[environment] allowed_hosts"),
        ('[verifier]\nnetwork_mode = "public"\n[environment]\nallow_internet = false\n',
         "[verifier] network_mode 'public' differs from the agent's 'no-network'"),
    ],
)  # fmt: skip
def test_a_harbor_key_this_project_cannot_honour_is_refused_naming_it(
    tmp_path: Path, toml: str, named: str
) -> None:
    task = _copy(tmp_path)
    (task / "task.toml").write_text(toml)
    with pytest.raises(InvalidInput) as caught:
        load_tasks(task)
    assert named in str(caught.value)
    assert str(task / "task.toml") in str(caught.value)


def test_network_mode_old_sizes_and_workdir_are_honoured(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    (task / "task.toml").write_text(
        'version = "1.0"\n[environment]\nnetwork_mode = "no-network"\nmemory = "1G"\n'
        'storage = "512M"\nworkdir = "/srv/app"\ngpus = 0\n'
    )
    loaded = load_tasks(task)[0]
    harbor = harbor_of(loaded.metadata)
    assert harbor is not None
    assert (loaded.network, loaded.workdir) == (False, "/srv/app")
    assert (harbor.memory_mb, harbor.storage_mb) == (1024, 512)


def test_a_folder_without_task_directories_is_not_taken_for_one(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    with pytest.raises(InvalidInput, match="not a SWE-bench task repository"):
        parse_spec({"tasks": str(tmp_path)})


def test_the_harbor_scorer_refuses_tasks_that_are_not_harbor_tasks() -> None:
    scorer = build_scorer(HarborScorerConfig())
    tasks = [*load_tasks(EXAMPLES / "fractional"), Task(id="plain", answer="4")]
    with pytest.raises(InvalidInput, match="these tasks are not: plain"):
        scorer.check_tasks(tasks)
    scorer.check_tasks(tasks[:1])


@pytest.mark.anyio
async def test_the_oracle_says_when_a_harbor_task_has_no_solution(tmp_path: Path) -> None:
    task = _copy(tmp_path)
    shutil.rmtree(task / "solution")
    loaded = load_tasks(task)[0]
    context = cast(TrajectoryContext, SimpleNamespace(task=loaded))
    with pytest.raises(InvalidInput, match=r"fractional/solution/solve.sh is missing"):
        await OracleAgent().generate(context)


@pytest.mark.anyio
async def test_without_docker_a_harbor_task_says_it_needs_the_docker_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    limits = Limits(max_attempts=1, retry_base_delay_s=0.0)
    spec = CampaignSpec(tasks=load_tasks(EXAMPLES / "fractional"), limits=limits)
    spec = spec.model_copy(update={"agent": OracleAgentConfig(), "scorer": HarborScorerConfig()})
    with anyio.fail_after(60):
        _, state = await run_campaign(tmp_path / "state", spec)
    trajectory = state.trajectories["fractional@0"]
    assert trajectory.outcome == "infra_error"
    assert "fractional is a Harbor task" in str(trajectory.error)
    assert "runs on the docker backend only" in str(trajectory.error)


def test_the_verifier_gets_no_conftest_or_pytest_stand_in_from_the_agent_s_diff() -> None:
    def section(path: str) -> str:
        return f"diff --git {path.replace('@', 'a')} {path.replace('@', 'b')}\n+x\n"

    patch = "".join(
        section(p)
        for p in (
            "@/result.txt", "@/conftest.py", "@/sub/pytest.ini", '"@/odd\\tdir/conftest.py"',
            "@/lib/x.pth", "@/_pytest/main.py", "@/answer.py",
        )
    )  # fmt: skip
    kept, dropped = without_protected(patch)
    assert dropped == [
        "conftest.py", "sub/pytest.ini", "odd\\tdir/conftest.py", "lib/x.pth", "_pytest/main.py",
    ]  # fmt: skip
    assert kept == section("@/result.txt") + section("@/answer.py")


def test_a_tasks_verifier_environment_mode_must_agree_with_the_campaigns_verify_mode(
    tmp_path: Path,
) -> None:
    task = _copy(tmp_path)
    (task / "task.toml").write_text('[verifier]\nenvironment_mode = "separate"\n')
    tasks = load_tasks(task)
    with pytest.raises(InvalidInput, match="set the scorer's `verify` to 'fresh'"):
        build_scorer(HarborScorerConfig()).check_tasks(tasks)  # in_place by default
    build_scorer(HarborScorerConfig(verify="fresh")).check_tasks(tasks)
