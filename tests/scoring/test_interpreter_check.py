"""A test command whose interpreter a workspace cannot see fails its instance, once, with an
error that names the hidden path; it is never graded as the submission's failure."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.agents.builtin import OracleAgent
from mcp_evalserver.scoring.interpreters import PYTHON_ALTERNATIVES, interpreter_words
from mcp_evalserver.scoring.test_plans import plan_tests
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec import Task
from tests.engine.helpers import outcomes, run_campaign, spec_of
from tests.scoring.sandboxed import PYTEST_DEPS_DIR, diff_of, git_repo, require_root

BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TESTS = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"


def _words(task: Task, **scorer: str) -> list[tuple[str, ...]]:
    plan = plan_tests(task, **scorer)
    return [word.alternatives for word in interpreter_words(task, plan)]


def test_an_eval_scripts_test_section_is_checked_for_the_paths_it_starts_programs_from() -> None:
    script = "\n".join(
        [
            "source /opt/miniconda3/bin/activate",  # before the section: not the tests'
            ": '>>>>> Start Test Output'",
            "# a comment naming /nowhere/python",
            "source /root/venv/bin/activate && pytest -rA",
            "LANG=C .venv/bin/python -m pytest x.py; echo $HOME/x",
            "cd sub && ./run-tests",
            ": '>>>>> End Test Output'",
        ]
    )
    task = Task(id="t", eval_script=script)
    assert _words(task) == [("/root/venv/bin/activate",), (".venv/bin/python",)]


def test_inferred_and_configured_commands_are_checked_for_their_interpreter() -> None:
    task = Task(id="t", FAIL_TO_PASS=["tests/test_a.py::test_b"])
    assert _words(task) == [PYTHON_ALTERNATIVES]
    assert _words(task, command="PYTHONPATH=x /opt/py/bin/python -m pytest") == [
        ("/opt/py/bin/python",)
    ]
    django = Task(id="d", repo="django/django", FAIL_TO_PASS=["test_x (a.tests.T)"])
    assert _words(django) == [("./tests/runtests.py",)]
    assert _words(Task(id="n", FAIL_TO_PASS=["test_x"])) == []


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
        assert f"interpreter `.venv/bin/python` resolves to {hidden}" in message
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
