"""The `tests` scorer against submissions that try to game it, in real workspaces.

Each submission here fixes nothing: the real tests fail. What it adds is a way to make the log
say otherwise (a conftest.py that prints at exit, files named like the harness's lines, a
reversed diff). None may resolve.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import diff_of, scoring_in_workspaces
from tests.scoring.test_tests_scorer import BUGGY, FIXED, NEW_TESTS, _task
from testsupport.repos import GIT

pytestmark = [pytest.mark.anyio, pytest.mark.root]

ALL_TESTS = ("test_calc.py::test_add", "test_calc.py::test_mul", "test_calc.py::test_zero")
FAKE_PASSES = "".join(f"PASSED {test}\n" for test in ALL_TESTS)


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
    # The kill lands (the script is a child of the sandbox's init, which reaps orphans), so
    # the forged lines end the log; a script killed by a signal is not graded, whatever it
    # printed, and is counted like any other miss.
    assert log.rstrip().endswith(">>>>> Test Exit Code: 0")
    assert (details["status"], details["outcome"], details["exit_code"]) == (
        "tests_errored",
        "error",
        -9,
    )


# --- strict mode: the four ways that fool SWE-bench 5.0.2 as well -----------------------------

REWRITE_REPORTS = (
    "import pytest\n\n\n"
    "@pytest.hookimpl(wrapper=True)\n"
    "def pytest_runtest_makereport(item, call):\n"
    "    report = yield\n"
    "    report.outcome = 'passed'\n"
    "    report.longrepr = None\n"
    "    return report\n"
)


def _commit(repo: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (repo / name).write_text(text)
    subprocess.run([*GIT, "commit", "-qam", "more"], cwd=repo, check=True)


async def _both_modes(task: Task, patch: str, tmp_path: Path) -> dict[str, dict[str, object]]:
    """The verdict of the default (SWE-bench) mode and of strict mode on one submission."""
    verdicts = {}
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        for mode, scorer in (("swebench", TestsScorer()), ("strict", TestsScorer(strict=True))):
            result = await scoring.score(scorer, task, Submission(patch=patch))
            assert result.details["mode"] == mode
            verdicts[mode] = {
                "resolved": result.resolved,
                "status": result.status,
                "explanation": result.explanation,
                **result.details,
            }
    return verdicts


async def test_strict_mode_does_not_believe_passes_printed_at_exit_before_os_exit_0(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    patch = diff_of(
        Path(task.path or ""), {"conftest.py": at_exit(f"\n{FAKE_PASSES}", then="os._exit(0)")}
    )
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert str(verdicts["strict"]["explanation"]).startswith("strict:")


async def test_strict_mode_restores_a_fail_to_pass_test_the_submission_neutered(
    tmp_path: Path,
) -> None:
    # No test_patch: the FAIL_TO_PASS tests are in the instance already, and nothing in
    # SWE-bench's flow puts them back.
    task = _task(tmp_path, test_patch=None)
    repo = Path(task.path or "")
    _commit(repo, {"test_calc.py": NEW_TESTS})
    neutered = NEW_TESTS.replace("assert add(2, 2) == 4", "pass").replace(
        "assert mul(2, 3) == 6", "pass"
    )
    patch = diff_of(repo, {"test_calc.py": neutered})
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == ["test_calc.py"]
    assert verdicts["strict"]["tests_status"]["FAIL_TO_PASS"]["failure"] == [  # type: ignore[index]
        "test_calc.py::test_add",
        "test_calc.py::test_mul",
    ]


async def test_strict_mode_restores_a_conftest_that_rewrites_reports(tmp_path: Path) -> None:
    task = _task(tmp_path)
    patch = diff_of(Path(task.path or ""), {"conftest.py": REWRITE_REPORTS})
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == ["conftest.py"]
    assert verdicts["strict"]["status"] == "failed"


async def test_strict_mode_restores_pytest_configuration_that_loads_a_rewriting_plugin(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    patch = diff_of(
        Path(task.path or ""),
        {
            "pytest.ini": "[pytest]\naddopts = -p rewrite_reports\n",
            "rewrite_reports.py": REWRITE_REPORTS,
        },
    )
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == ["pytest.ini"]


async def test_strict_mode_fails_a_test_whose_subtest_failed(tmp_path: Path) -> None:
    task = _task(tmp_path)
    with_subtest = NEW_TESTS.replace(
        "def test_add():\n    assert add(2, 2) == 4\n",
        "def test_add(subtests):\n    with subtests.test(msg='negative'):\n"
        "        assert add(-2, -2) == 0\n    assert add(2, 2) == 4\n",
    )
    repo = Path(task.path or "")
    task = task.model_copy(update={"test_patch": diff_of(repo, {"test_calc.py": with_subtest})})
    verdicts = await _both_modes(task, task.patch or "", tmp_path)
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["tests_status"]["FAIL_TO_PASS"]["failure"] == [  # type: ignore[index]
        "test_calc.py::test_add"
    ]


async def test_strict_mode_resolves_the_gold_patch_from_the_junit_report(tmp_path: Path) -> None:
    task = _task(tmp_path)
    verdicts = await _both_modes(task, task.patch or "", tmp_path)
    assert verdicts["swebench"]["resolved"] is True
    assert verdicts["strict"]["resolved"] is True
    assert verdicts["strict"]["restored"] == []
    assert "(JUnit report)" in str(verdicts["strict"]["explanation"])


async def test_strict_mode_restores_a_conftest_the_patch_hides_from_git(tmp_path: Path) -> None:
    task = _task(tmp_path)
    repo = Path(task.path or "")
    patch = diff_of(repo, {"conftest.py": REWRITE_REPORTS}) + diff_of(
        repo, {".gitignore": "conftest.py\n"}
    )
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == ["conftest.py"]


async def test_strict_mode_does_not_believe_passes_printed_at_exit_beside_a_forged_failure(
    tmp_path: Path,
) -> None:
    # No os._exit: pytest exits 1 for the real failures, and a forged FAILED line for a test
    # nobody grades makes that exit code agree with the log, whose last word on each graded
    # test is a forged PASSED.
    task = _task(tmp_path)
    forged = f"\n{FAKE_PASSES}FAILED test_other.py::test_unrelated - boom\n"
    patch = diff_of(Path(task.path or ""), {"conftest.py": at_exit(forged)})
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["status"] == "failed"


async def test_strict_mode_removes_package_metadata_that_registers_a_rewriting_plugin(
    tmp_path: Path,
) -> None:
    # pytest loads every `[pytest11]` entry point of every distribution on sys.path, and the
    # repository's root is on it under `python -m pytest`.
    task = _task(tmp_path)
    patch = diff_of(
        Path(task.path or ""),
        {
            "evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
            "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = rewrite_reports\n",
            "rewrite_reports.py": REWRITE_REPORTS,
        },
    )
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == [
        "evil-1.0.dist-info/METADATA",
        "evil-1.0.dist-info/entry_points.txt",
    ]


#: A `pytest.py` that stands in for pytest under `python -m pytest`: it runs no test, writes
#: a JUnit report of passes where strict mode asks for one, prints passes and exits 0.
FAKE_PYTEST = (
    "import os\nimport re\n\n"
    "wanted = re.search(r'--junitxml=(\\S+)', os.environ.get('PYTEST_ADDOPTS', ''))\n"
    "if wanted:\n"
    "    os.makedirs(os.path.dirname(wanted.group(1)), exist_ok=True)\n"
    "    with open(wanted.group(1), 'w') as report:\n"
    "        report.write('<testsuites><testsuite name=\"pytest\">' + ''.join(\n"
    '            f\'<testcase classname="test_calc" name="{name}" file="test_calc.py"/>\'\n'
    "            for name in ('test_add', 'test_mul', 'test_zero'))\n"
    "            + '</testsuite></testsuites>')\n"
    f"print({FAKE_PASSES!r})\n"
)


async def test_strict_mode_removes_a_root_module_that_stands_in_for_pytest(
    tmp_path: Path,
) -> None:
    task = _task(tmp_path)
    patch = diff_of(Path(task.path or ""), {"pytest.py": FAKE_PYTEST})
    verdicts = await _both_modes(task, patch, tmp_path)
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == ["pytest.py"]
    assert verdicts["strict"]["status"] == "failed"


def _new_executable(path: str, text: str) -> str:
    """A git-style diff creating an executable file at `path` (may be inside `.git`)."""
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100755\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


async def test_strict_mode_puts_back_a_git_hook_the_patch_wrote_into_dot_git(
    tmp_path: Path,
) -> None:
    # `git apply` refuses paths inside .git; the chain's last command, GNU patch, writes
    # them. The hook runs at the next `git checkout` (the test files' reset, or strict mode's
    # own restore) and writes a conftest.py that rewrites reports after it was restored.
    task = _task(tmp_path)
    hook = f"#!/bin/sh\ncat > conftest.py <<'EOF'\n{REWRITE_REPORTS}EOF\n"
    patch = _new_executable(".git/hooks/post-checkout", hook)
    verdicts = await _both_modes(task, patch, tmp_path)
    assert str(verdicts["swebench"]["apply_command"]).startswith("patch --batch --forward")
    assert verdicts["swebench"]["resolved"] is True, "this fools SWE-bench 5.0.2 too"
    assert verdicts["strict"]["resolved"] is False
    assert verdicts["strict"]["restored"] == [".git/hooks/post-checkout"]
    assert verdicts["strict"]["status"] == "failed"
