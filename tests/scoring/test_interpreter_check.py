"""A test command whose interpreter a workspace cannot see fails its instance, once per task
and instance, with an error that names the hidden path; it is never graded as the
submission's failure. The eval script is followed as bash runs it: every step, `cd`,
`source`, assignments, bare names on the PATH the command will have."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.builtin import OracleAgent
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.scoring.swebench.interpreters import check_test_command
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Task
from tests.engine.helpers import outcomes, run_campaign, spec_of
from tests.root import require_root
from tests.scoring.sandboxed import PYTEST_DEPS_DIR, diff_of, git_repo

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"


@pytest.fixture
def under_root() -> Iterator[Path]:
    """A directory in /root, which the host sees and every workspace hides."""
    require_root()
    path = Path(tempfile.mkdtemp(prefix="mcp-evalserver-test-", dir="/root"))
    yield path
    shutil.rmtree(path)


def _task(repo: Path, python: Path) -> Task:
    """A task whose tests run `.venv/bin/python`, a symlink to `python`."""
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to(python)
    with open(repo / ".git" / "info" / "exclude", "a") as exclude:
        exclude.write("/.venv/\n")
    return Task(
        id="calc",
        path=str(repo),
        patch=diff_of(repo, {"calc.py": FIXED}),
        FAIL_TO_PASS=["test_calc.py::test_add"],
        eval_script=f"PYTHONPATH={PYTEST_DEPS_DIR} .venv/bin/python -m pytest -rA test_calc.py",
    )


@pytest.mark.anyio
@pytest.mark.root
async def test_an_interpreter_hidden_by_the_workspace_view_fails_the_instance_with_what_to_do(
    tmp_path: Path, under_root: Path
) -> None:
    # The instance's venv was made from a Python under /root (pyenv's place): on the host it
    # runs, in a workspace /root is empty and every evaluation would exit 127.
    hidden = under_root / "python3"
    hidden.symlink_to("/usr/bin/python3")
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": TESTS})
    task = _task(repo, hidden)
    with anyio.fail_after(180):
        _, state = await run_campaign(
            tmp_path / "state", spec_of([task], samples=2), OracleAgent(), TestsScorer()
        )
    assert outcomes(state) == {"calc@0": "error", "calc@1": "error"}
    for trajectory in state.trajectories.values():
        message = (trajectory.error or {}).get("message", "")
        assert f"`.venv/bin/python` resolves to {hidden}" in message
        assert "/root is private to each workspace" in message
        assert "/usr/bin/python3 -m venv .venv" in message


@pytest.mark.anyio
@pytest.mark.root
async def test_an_interpreter_the_workspace_shows_passes_the_check_and_the_tests_grade(
    tmp_path: Path,
) -> None:
    require_root()
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": TESTS})
    task = _task(repo, Path("/usr/bin/python3"))
    with anyio.fail_after(180):
        _, state = await run_campaign(
            tmp_path / "state", spec_of([task]), OracleAgent(), TestsScorer()
        )
    assert outcomes(state) == {"calc@0": "resolved"}


#: Scripts that start a program from a directory workspaces hide, each in a way the check of
#: paths in the test section up to its first `cd` did not see ({hidden} is under /root).
HIDDEN_SCRIPTS = {
    "an activate script sourced after a cd": (
        "\n".join(
            [
                ": '>>>>> Start Test Output'",
                "cd sub",
                "source {hidden}/venv/bin/activate && python3 -m pytest",
                ": '>>>>> End Test Output'",
            ]
        ),
        "{hidden}/venv/bin/activate",
    ),
    "an environment activated before the test section": (
        "\n".join(
            [
                "source {hidden}/venv/bin/activate",
                "cd sub",
                ": '>>>>> Start Test Output'",
                "./run-tests",
                ": '>>>>> End Test Output'",
            ]
        ),
        "{hidden}/venv/bin/activate",
    ),
    "a bare name on a PATH exported before the section": (
        "\n".join(
            [
                "export PATH={hidden}/bin:$PATH",
                ": '>>>>> Start Test Output'",
                "run-hidden-tests -x",
                ": '>>>>> End Test Output'",
            ]
        ),
        "{hidden}/bin",
    ),
    "a bare name on a PATH set for the command alone, behind env and timeout": (
        "\n".join(
            [
                ": '>>>>> Start Test Output'",
                "PATH={hidden}/bin:$PATH env LANG=C timeout 600 run-hidden-tests",
                ": '>>>>> End Test Output'",
            ]
        ),
        "{hidden}/bin",
    ),
    "an interpreter held in a variable": (
        "\n".join(
            [
                "PY={hidden}/bin/python3",
                ": '>>>>> Start Test Output'",
                'cd sub && "$PY" -m pytest',
                ": '>>>>> End Test Output'",
            ]
        ),
        "{hidden}/bin/python3",
    ),
}


@pytest.fixture
def hidden_tools(under_root: Path) -> Path:
    """Under /root: a venv's activate script that puts its bin on the PATH, a program on
    that bin, and a python symlink; all run on the host, none in a workspace."""
    bin_dir = under_root / "bin"
    bin_dir.mkdir()
    (bin_dir / "run-hidden-tests").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "run-hidden-tests").chmod(0o755)
    (bin_dir / "python3").symlink_to("/usr/bin/python3")
    (under_root / "venv" / "bin").mkdir(parents=True)
    (under_root / "venv" / "bin" / "activate").write_text(
        'export PATH="$(dirname "${BASH_SOURCE[0]}")/../../bin:$PATH"\n'
    )
    return under_root


def _repo_with_sub(tmp_path: Path) -> Path:
    repo = git_repo(
        tmp_path / "repo",
        {"calc.py": BUGGY, "test_calc.py": TESTS, "sub/run-tests": "#!/bin/sh\nexit 0\n"},
    )
    (repo / "sub" / "run-tests").chmod(0o755)
    return repo


@pytest.mark.anyio
@pytest.mark.root
@pytest.mark.parametrize("case", list(HIDDEN_SCRIPTS))
async def test_a_hidden_program_is_found_wherever_the_script_starts_it(
    case: str, tmp_path: Path, hidden_tools: Path
) -> None:
    script, named = (text.format(hidden=hidden_tools) for text in HIDDEN_SCRIPTS[case])
    repo = _repo_with_sub(tmp_path)
    task = Task(id="calc", path=str(repo), FAIL_TO_PASS=["test_calc.py::test_add"])
    async with SandboxPool() as pool:
        instance = await pool.instance(task, anyio.CapacityLimiter(1))
        with anyio.fail_after(60), pytest.raises(InvalidInput) as refused:
            await check_test_command(instance, task, script)
        # The same script with the hidden directory replaced by one the workspace shows passes.
        shown = script.replace(str(hidden_tools), str(repo / "shown"))
        shutil.copytree(hidden_tools, repo / "shown", symlinks=True)
        with anyio.fail_after(60):
            await check_test_command(instance, task, shown)
    message = str(refused.value)
    assert named in message
    assert "/root is private to each workspace" in message


@pytest.mark.anyio
@pytest.mark.root
async def test_following_the_script_runs_no_test_and_applies_nothing(tmp_path: Path) -> None:
    repo = _repo_with_sub(tmp_path)
    task = Task(id="calc", path=str(repo), FAIL_TO_PASS=["test_calc.py::test_add"])
    script = "\n".join(
        [
            "touch before-the-section",
            "git apply /dev/null",
            ": '>>>>> Start Test Output'",
            "cd sub && ./run-tests > ../ran 2>&1",
            "while true; do ./run-tests; done",
            ": '>>>>> End Test Output'",
        ]
    )
    async with SandboxPool() as pool:
        instance = await pool.instance(task, anyio.CapacityLimiter(1))
        with anyio.fail_after(60):
            await check_test_command(instance, task, script)
        workspace = await instance.workspace("look")
        listing = await workspace.exec("ls; ls sub", timeout=30)
        await workspace.destroy()
    assert "before-the-section" not in listing.stdout
    assert "ran" not in listing.stdout.split()


def _tasks_of_one_instance(tmp_path: Path, hidden_tools: Path) -> tuple[Task, Task]:
    """Two tasks of one directory: `good` runs its tests with a Python the workspace shows,
    `bad` with one under /root."""
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": TESTS})
    good = Task(
        id="good",
        path=str(repo),
        patch=diff_of(repo, {"calc.py": FIXED}),
        FAIL_TO_PASS=["test_calc.py::test_add"],
        eval_script=f"PYTHONPATH={PYTEST_DEPS_DIR} /usr/bin/python3 -m pytest -rA test_calc.py",
    )
    bad = good.model_copy(
        update={
            "id": "bad",
            "eval_script": f"PYTHONPATH={PYTEST_DEPS_DIR} {hidden_tools}/bin/python3 "
            "-m pytest -rA test_calc.py",
        }
    )
    return good, bad


@pytest.mark.anyio
@pytest.mark.root
async def test_each_task_sharing_an_instance_is_checked_and_refused_on_its_own(
    tmp_path: Path, hidden_tools: Path
) -> None:
    # Two tasks of one instance (the same directory): one runs its tests with a Python the
    # workspace shows, the other with one under /root. Whichever makes the instance first,
    # the other's check must still run, and one's refusal must not refuse the other.
    good, bad = _tasks_of_one_instance(tmp_path, hidden_tools)
    for first, second in ((good, bad), (bad, good)):
        with anyio.fail_after(180):
            _, state = await run_campaign(
                tmp_path / f"state-{first.id}",
                spec_of([first, second], samples=2, concurrency=1),
                OracleAgent(),
                TestsScorer(),
            )
        assert outcomes(state) == {
            "good@0": "resolved",
            "good@1": "resolved",
            "bad@0": "error",
            "bad@1": "error",
        }


@pytest.mark.anyio
@pytest.mark.root
async def test_a_later_campaign_on_a_shared_pool_checks_the_instance_an_earlier_one_made(
    tmp_path: Path, hidden_tools: Path
) -> None:
    # The server keeps one sandbox pool for every campaign: the instance the first campaign
    # made (and checked for its own task) is reused by the second, whose task runs its tests
    # with a Python under /root. Its check must run all the same.
    good, bad = _tasks_of_one_instance(tmp_path, hidden_tools)
    store = CampaignStore(tmp_path / "state")
    states = {}
    async with SandboxPool() as pool:
        for task in (good, bad):
            campaign_id = await store.create(spec_of([task]), task.id)
            runner = CampaignRunner(
                store, campaign_id, agent=OracleAgent(), scorer=TestsScorer(), sandboxes=pool
            )
            with anyio.fail_after(180):
                states[task.id] = await runner.run()
    assert outcomes(states["good"]) == {"good@0": "resolved"}
    assert outcomes(states["bad"]) == {"bad@0": "error"}
    # Refused by the check, not merely a run that printed nothing (tests_errored).
    message = (states["bad"].trajectories["bad@0"].error or {}).get("message", "")
    assert f"resolves to {hidden_tools}/bin/python3" in message
    assert "/root is private to each workspace" in message
