"""The `tests` scorer grades patches by running real tests in real local workspaces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mcp_evalserver.agents.base import Submission
from mcp_evalserver.scoring.config import TestsScorerConfig
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.scoring.testsuite import TestsScorer, pytest_command
from mcp_evalserver.spec import Task
from tests.scoring.sandboxed import diff_of, git_repo, require_root, scoring_in_workspaces

pytestmark = [pytest.mark.anyio, pytest.mark.root]

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
HALF_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a - b\n"
OLD_TESTS = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TESTS = (
    "from calc import add, mul\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n\n\n"
    "def test_add():\n    assert add(2, 2) == 4\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
)
# Workspaces hide /root (where the venv's interpreter lives): run the system Python on the
# venv's site-packages, which sit under the (visible, read-only) project directory.
PYTHON = "/usr/bin/python3"
SITE_PACKAGES = Path(pytest.__file__).parents[1]
PYTEST = f"PYTHONPATH={SITE_PACKAGES} {PYTHON} -m pytest -rA -p no:cacheprovider test_calc.py"


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    require_root()


def _task(tmp_path: Path, **fields: object) -> Task:
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": OLD_TESTS})
    test_patch = diff_of(repo, {"test_calc.py": NEW_TESTS})
    values: dict[str, object] = {
        "id": "calc",
        "path": str(repo),
        "patch": diff_of(repo, {"calc.py": FIXED}),
        "test_patch": test_patch,
        "FAIL_TO_PASS": ["test_calc.py::test_add", "test_calc.py::test_mul"],
        "PASS_TO_PASS": ["test_calc.py::test_zero"],
        "eval_script": PYTEST,
        **fields,
    }
    return Task.model_validate(values)


async def test_the_gold_patch_resolves_with_the_swebench_tests_report_and_its_log(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    scorer = build_scorer(TestsScorerConfig())
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(scorer, task, Submission(patch=task.patch))
        log = scoring.artifact(result.details["log"])
    assert result.resolved, result.explanation
    assert (result.status, result.outcome, result.score) == ("resolved", "resolved", 1.0)
    assert result.details["eval_status"] == "graded"
    assert result.details["resolution"] == "RESOLVED_FULL"
    assert result.details["apply_command"].startswith("git apply --verbose")
    assert result.details["tests_status"]["FAIL_TO_PASS"] == {
        "success": ["test_calc.py::test_add", "test_calc.py::test_mul"],
        "failure": [],
    }
    assert "PASSED test_calc.py::test_mul" in log
    assert ">>>>> Test Exit Code: 0" in log
    # The instance itself is untouched: the patch went into the workspace only.
    assert Path(task.path or "", "calc.py").read_text() == BUGGY


async def test_a_partial_fix_is_reported_partial_and_not_resolved(tmp_path: Path) -> None:
    task = _task(tmp_path)
    patch = diff_of(Path(task.path or ""), {"calc.py": HALF_FIXED})
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=patch))
    assert not result.resolved
    assert (result.status, result.outcome) == ("failed", "failed")
    assert result.details["resolution"] == "RESOLVED_PARTIAL"
    assert result.score == pytest.approx(2 / 3)
    assert result.details["tests_status"]["FAIL_TO_PASS"]["failure"] == ["test_calc.py::test_mul"]


async def test_an_empty_patch_fails_without_running_anything(tmp_path: Path) -> None:
    task = _task(tmp_path, eval_script="exit 99")
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch="  \n"))
    assert (result.status, result.outcome, result.details) == ("empty", "failed", {})


async def test_a_patch_that_does_not_apply_is_the_submissions_failure(tmp_path: Path) -> None:
    task = _task(tmp_path)
    patch = (task.patch or "").replace("-    return a - b", "-    return a / b")
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=patch))
        log = scoring.artifact(result.details["log"])
    assert (result.status, result.outcome) == ("patch_apply_failed", "failed")
    assert result.details["patch_applied"] is False
    # Every step of the fallback chain was tried.
    assert "git apply --verbose --reject" in log
    assert "patch --batch --fuzz=5 -p1" in log


async def test_a_harness_timeout_is_an_infrastructure_failure(tmp_path: Path) -> None:
    task = _task(tmp_path, eval_script="sleep 30")
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(timeout_s=0.5), task, Submission(patch=task.patch))
        log = scoring.artifact(result.details["log"])
    assert (result.status, result.outcome) == ("timeout", "infra_error")
    assert ">>>>> Tests Timed Out" in log


async def test_tests_that_never_run_are_an_evaluation_error(tmp_path: Path) -> None:
    task = _task(tmp_path, eval_script=f"{PYTHON} -c 'import sys; sys.exit(4)'")
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=task.patch))
    assert (result.status, result.outcome) == ("tests_errored", "error")
    assert result.details["exit_code"] == 4


async def test_the_test_patch_overrides_a_submission_that_edits_the_tests(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    # The submission "fixes" the tests instead of the code: the test patch must still win.
    cheat = diff_of(
        Path(task.path or ""),
        {"test_calc.py": "def test_add():\n    pass\n\n\ndef test_mul():\n    pass\n"},
    )
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=cheat))
    assert not result.resolved
    assert result.details["resolution"] == "RESOLVED_NO"
    assert result.details["tests_status"]["FAIL_TO_PASS"]["failure"] == [
        "test_calc.py::test_add",
        "test_calc.py::test_mul",
    ]


async def test_without_an_eval_script_pytest_runs_the_files_the_test_ids_name(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path, eval_script=None)
    scorer = TestsScorer(test_command=PYTEST)
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(scorer, task, Submission(patch=task.patch))
    assert result.resolved, result.explanation
    assert pytest_command(task) == "python -m pytest -rA -p no:cacheprovider test_calc.py"


def test_a_task_whose_ids_name_no_files_has_no_default_pytest_command() -> None:
    task = Task(id="d", FAIL_TO_PASS=json.dumps(["test_x (app.tests.T)"]))
    assert pytest_command(task) is None
    assert TestsScorer().eval_script(task) is None


def test_an_unknown_parser_name_is_rejected_when_the_scorer_is_built() -> None:
    with pytest.raises(Exception, match="unknown log parser 'pyttest'"):
        build_scorer(TestsScorerConfig(parser="pyttest"))
