"""The `tests` scorer grades patches by running real tests in real local workspaces."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import TrajectorySandbox
from mcp_evalserver.scoring.base import ScoringContext
from mcp_evalserver.scoring.factory import build_scorer
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Limits, Task
from mcp_evalserver.spec.scorers import TestsScorerConfig
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import (
    PYTEST_DEPS_DIR,
    PYTHON_PYTEST,
    diff_of,
    git_repo,
    scoring_in_workspaces,
)

pytestmark = [pytest.mark.anyio, pytest.mark.root]

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
#: The fix, except that `add` hangs: tests that call it never finish.
HANGS = FIXED.replace("return a + b", "__import__('time').sleep(60)")
HALF_FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a - b\n"
OLD_TESTS = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TESTS = (
    "from calc import add, mul\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n\n\n"
    "def test_add():\n    assert add(2, 2) == 4\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
)
PYTHON = "/usr/bin/python3"
PYTEST = f"{PYTHON_PYTEST} -rA -p no:cacheprovider test_calc.py"


def _no_sandbox(task: Task) -> ScoringContext:
    return ScoringContext(
        campaign_id="c",
        trajectory_id=f"{task.id}@0",
        task=task,
        submission=Submission(patch=task.patch),
        campaign_dir=Path("/nonexistent"),
        limiters=Limiters(Limits()),
        sandbox=TrajectorySandbox(None, task, "s", anyio.CapacityLimiter(1)),
    )


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
    assert "git apply --verbose --3way" in log
    assert "git apply --verbose --reject" in log
    assert "patch --batch --forward --fuzz=5 -p1" in log


async def test_tests_that_hang_past_the_time_limit_are_the_submissions_failure(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    # The submission's code hangs when the tests call it.
    hang = diff_of(Path(task.path or ""), {"calc.py": HANGS})
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(timeout_s=2), task, Submission(patch=hang))
        log = scoring.artifact(result.details["log"])
    # Counted in the pass rate's denominator like any other miss (never infra_error).
    assert (result.status, result.outcome, result.resolved) == ("timeout", "failed", False)
    assert result.details["eval_status"] == "timeout"
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
    assert scorer.plan(task).reason.startswith("the scorer's test_command; parser pytest")
    assert TestsScorer().plan(task).command == (
        'PY="$(command -v python || command -v python3)"; '
        '"$PY" -m pytest -rA -p no:cacheprovider test_calc.py'
    )


def _pytest_at_the_root(repo: Path) -> Path:
    """`python3 -m pytest` (the default command) imports pytest from the working directory."""
    vendored = sorted((repo / PYTEST_DEPS_DIR).iterdir())
    for package in vendored:
        (repo / package.name).symlink_to(package)
    with open(repo / ".git" / "info" / "exclude", "a") as exclude:
        exclude.writelines(f"/{package.name}\n" for package in vendored)
    return repo


SPACED_TESTS = (
    "import pytest\n\nfrom calc import add, mul\n\n\n"
    '@pytest.mark.parametrize("words", ["two and two", "two times three"])\n'
    "def test_words(words):\n"
    '    assert (add(2, 2) if "and" in words else mul(2, 3)) in (4, 6)\n\n\n'
    "def test_zero():\n    assert add(0, 0) == 0\n"
)


async def test_ids_with_spaces_are_graded_by_a_parser_that_keeps_them_and_the_log_says_so(
    tmp_path: Path,
) -> None:
    repo = _pytest_at_the_root(
        git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": OLD_TESTS})
    )
    task = Task(
        id="spaced",
        repo="someone/calc",
        path=str(repo),
        patch=diff_of(repo, {"calc.py": FIXED}),
        test_patch=diff_of(repo, {"test_calc.py": SPACED_TESTS}),
        FAIL_TO_PASS=[
            "test_calc.py::test_words[two and two]",
            "test_calc.py::test_words[two times three]",
        ],
        PASS_TO_PASS=["test_calc.py::test_zero"],
    )
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        gold = await scoring.score(TestsScorer(), task, Submission(patch=task.patch))
        log = scoring.artifact(gold.details["log"])
        half = diff_of(repo, {"calc.py": HALF_FIXED})
        partial = await scoring.score(TestsScorer(), task, Submission(patch=half))
    assert gold.resolved, gold.explanation
    assert log.startswith(
        "mcp-evalserver: tests: python -m pytest over the test ids' files; "
        "parser pytest_verbose (a test id holds a space)\n"
    )
    assert gold.details["test_plan"] in log
    assert partial.details["tests_status"]["FAIL_TO_PASS"] == {
        "success": ["test_calc.py::test_words[two and two]"],
        "failure": ["test_calc.py::test_words[two times three]"],
    }


DOCTESTED = FIXED.replace(
    "return a * b", '"""\n    >>> mul(2, 3)\n    6\n    """\n    return a * b'
)


async def test_doctest_ids_are_collected_with_doctest_modules(tmp_path: Path) -> None:
    repo = _pytest_at_the_root(
        git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": OLD_TESTS})
    )
    task = Task(
        id="doctested",
        path=str(repo),
        patch=diff_of(repo, {"calc.py": DOCTESTED}),
        FAIL_TO_PASS=["calc.py::calc.mul"],
        PASS_TO_PASS=["test_calc.py::test_zero"],
    )
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=task.patch))
    assert result.resolved, result.explanation
    assert "--doctest-modules" in (TestsScorer().plan(task).command or "")


FORCE_COLOUR_CONFTEST = (
    "import pytest\n\n\n@pytest.hookimpl(tryfirst=True)\n"
    "def pytest_configure(config):\n    config.option.color = 'yes'\n"
)
#: Where colour comes from, and whether it wins over the scorer's PYTEST_ADDOPTS=--color=no.
COLOUR_SOURCES = {
    "--color=yes on the eval script's command line": ({}, f"{PYTEST} --color=yes", True),
    "a conftest.py that forces colour": ({"conftest.py": FORCE_COLOUR_CONFTEST}, PYTEST, True),
    "addopts in pytest.ini": ({"pytest.ini": "[pytest]\naddopts = --color=yes\n"}, PYTEST, False),
}


@pytest.mark.parametrize("source", list(COLOUR_SOURCES))
async def test_a_test_run_in_colour_is_graded_as_the_same_run_without_colour(
    source: str, tmp_path: Path
) -> None:
    files, eval_script, in_colour = COLOUR_SOURCES[source]
    repo = git_repo(tmp_path / "repo", {"calc.py": BUGGY, "test_calc.py": NEW_TESTS, **files})
    task = Task(
        id="colour",
        path=str(repo),
        patch=diff_of(repo, {"calc.py": FIXED}),
        FAIL_TO_PASS=["test_calc.py::test_add", "test_calc.py::test_mul"],
        PASS_TO_PASS=["test_calc.py::test_zero"],
        eval_script=eval_script,
    )
    half_fix = diff_of(repo, {"calc.py": HALF_FIXED})
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        gold = await scoring.score(TestsScorer(), task, Submission(patch=task.patch))
        output = scoring.artifact(gold.details["test_output"])
        half = await scoring.score(TestsScorer(), task, Submission(patch=half_fix))
    assert ("\x1b[32mPASSED\x1b[0m" in output) is in_colour
    assert gold.resolved, gold.explanation
    assert (half.status, half.outcome, half.details["resolution"]) == (
        "failed",
        "failed",
        "RESOLVED_PARTIAL",
    )
    assert half.details["tests_status"]["FAIL_TO_PASS"]["failure"] == ["test_calc.py::test_mul"]


def test_a_task_whose_ids_name_nothing_runnable_has_no_default_command() -> None:
    task = Task(id="d", FAIL_TO_PASS=json.dumps(["test_x"]))
    assert TestsScorer().plan(task).command is None
    assert TestsScorer().eval_script(task) is None


async def test_a_task_with_no_test_command_is_an_error_that_says_what_to_give(
    tmp_path: Path,
) -> None:
    task = Task(id="d", path=str(tmp_path), FAIL_TO_PASS=["test_x"], patch="diff --git a/x b/x\n")
    result = await TestsScorer().score(_no_sandbox(task))
    assert (result.status, result.outcome) == ("no_tests", "error")
    assert "give the task an `eval_script` or the scorer a `test_command`" in result.explanation


def test_an_unknown_parser_name_is_rejected_when_the_scorer_is_built() -> None:
    with pytest.raises(InvalidInput, match="unknown log parser 'pyttest'"):
        build_scorer(TestsScorerConfig(parser="pyttest"))
