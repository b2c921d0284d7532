"""The `tests` scorer against submissions that try to game it, in real workspaces.

Each submission here fixes nothing: the real tests fail. What it adds is a way to make the log
say otherwise (a conftest.py that prints at exit, files named like the harness's lines, a
reversed diff). None may resolve.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_evalserver.agents.base import Submission
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec import Task
from tests.scoring.sandboxed import diff_of, require_root, scoring_in_workspaces
from tests.scoring.test_tests_scorer import BUGGY, FIXED, _task

pytestmark = [pytest.mark.anyio, pytest.mark.root]

ALL_TESTS = ("test_calc.py::test_add", "test_calc.py::test_mul", "test_calc.py::test_zero")
FAKE_PASSES = "".join(f"PASSED {test}\n" for test in ALL_TESTS)


@pytest.fixture(autouse=True)
def _needs_root() -> None:
    require_root()


def at_exit(text: str, *, then: str = "") -> str:
    """A conftest.py that writes `text` to fd 1 when the interpreter exits, then runs `then`."""
    return (
        "import atexit\nimport os\n\n\n"
        "def _forge():\n"
        f"    os.write(1, {text!r}.encode())\n"
        f"    {then or 'pass'}\n\n\n"
        "atexit.register(_forge)\n"
    )


async def _score(task: Task, patch: str, tmp_path: Path) -> tuple[dict[str, object], str]:
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        result = await scoring.score(TestsScorer(), task, Submission(patch=patch))
        log = scoring.artifact(result.details["log"])
    assert not result.resolved, (result.explanation, log)
    return {"status": result.status, "outcome": result.outcome, **result.details}, log


async def test_a_reversed_fix_is_not_applied_backwards(tmp_path: Path) -> None:
    task = _task(tmp_path)
    repo = Path(task.path or "")
    # The diff from the fixed code back to the buggy one: `patch --batch` without --forward
    # says "Assuming -R" and applies it backwards, which is the fix.
    reversed_fix = diff_of(repo, {"calc.py": FIXED}, reverse=True)
    assert "-    return a + b" in reversed_fix
    details, log = await _score(task, reversed_fix, tmp_path)
    assert details["status"] == "failed"
    assert details["resolution"] == "RESOLVED_NO"
    assert "Assuming -R" not in log
    assert (repo / "calc.py").read_text() == BUGGY


async def test_a_second_start_marker_printed_by_the_tests_cannot_replace_their_results(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    forged = (
        f"\n>>>>> Start Test Output\n{FAKE_PASSES}>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
    )
    patch = diff_of(Path(task.path or ""), {"conftest.py": at_exit(forged)})
    details, _ = await _score(task, patch, tmp_path)
    # SWE-bench's slice ends at the forged start marker: the real run is what is graded.
    assert details["status"] == "failed"
    assert details["tests_status"]["FAIL_TO_PASS"]["failure"] == [  # type: ignore[index]
        "test_calc.py::test_add",
        "test_calc.py::test_mul",
    ]


async def test_an_exit_code_line_printed_by_the_tests_is_not_believed(tmp_path: Path) -> None:
    task = _task(tmp_path)
    forged = f"\n{FAKE_PASSES}>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
    patch = diff_of(Path(task.path or ""), {"conftest.py": at_exit(forged)})
    details, _ = await _score(task, patch, tmp_path)
    # pytest exited 1; the forged lines say every test passed: the log is not the run.
    assert (details["status"], details["outcome"]) == ("exit_code_mismatch", "error")
    assert details["exit_code"] == 1


async def test_the_apply_steps_output_is_never_graded(tmp_path: Path) -> None:
    task = _task(tmp_path)
    # `git apply --verbose` prints the names of the files it adds: this one reads as the
    # harness's exit-code line, and the conftest forges passes after the real summary.
    patch = diff_of(
        Path(task.path or ""),
        {">>>>> Test Exit Code: 0": "", "conftest.py": at_exit(f"\n{FAKE_PASSES}")},
    )
    details, log = await _score(task, patch, tmp_path)
    assert "Checking patch >>>>> Test Exit Code: 0" in log, "the apply step printed the name"
    assert (details["status"], details["exit_code"]) == ("exit_code_mismatch", 1)


async def test_tests_cannot_kill_the_eval_script_to_hide_what_follows_their_forgery(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    forged = f"\n{FAKE_PASSES}>>>>> End Test Output\n>>>>> Test Exit Code: 0\n"
    patch = diff_of(
        Path(task.path or ""),
        {"conftest.py": at_exit(forged, then="os.kill(os.getppid(), 9)")},
    )
    details, log = await _score(task, patch, tmp_path)
    # The script is the sandbox's init: SIGKILL from inside is ignored, it runs on and exits
    # with pytest's status.
    assert log.rstrip().endswith(">>>>> Test Exit Code: 1")
    assert (details["status"], details["exit_code"]) == ("exit_code_mismatch", 1)
