"""Differential test, end to end: the `tests` scorer against SWE-bench 5.0.2's `run_instance`.

The same instance and prediction go through SWE-bench's own `run_instance` (its apply chain
with its resets and its already-applied check, its eval script with the exit code recorded,
its timeout, its grading, its `report.json` or its `EvaluationError`) and through our scorer
in a real workspace; the verdicts and the report.json must agree. Only Docker is stood in
for: SWE-bench's container is a copy of the instance's git checkout on the host, and its
`exec_run`, `copy_to_container` and `exec_run_with_timeout` run the same commands there.

The submissions are the adversarial ones of issue 9: a reversed fix, tests that print a second
start marker, a file named like the exit-code line, tests that hang, a patch that does not
apply. Where SWE-bench 5.0.2 itself is fooled, the test says so and asserts that we are not.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import anyio
import pytest

from mcp_evalserver.engine.swebench_runs import grade_of, instance_task
from mcp_evalserver.scoring.base import ScoreResult
from mcp_evalserver.scoring.swebench.compat import SwebenchInstance, instance_report
from mcp_evalserver.scoring.testsuite import TestsScorer
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.predictions import Prediction
from mcp_evalserver.spec.submission import Submission
from tests.scoring.sandboxed import PYTHON_PYTEST, diff_of, git_repo, scoring_in_workspaces
from tests.scoring.swebench_reference import (
    LOG_REPORT,
    LOG_TEST_OUTPUT,
    RUN_EVALUATION_LOG_DIR,
    make_test_spec,
    swe_run,
)
from tests.scoring.test_tests_scorer import BUGGY, FIXED, HANGS, NEW_TESTS, OLD_TESTS
from tests.scoring.test_tests_scorer_adversarial import FAKE_PASSES, at_exit

pytestmark = [pytest.mark.anyio, pytest.mark.root, pytest.mark.slow]

INSTANCE = "owner__calc-9"
MODEL = "org/model-x"
#: Both harnesses' test timeout: the hanging tests wait it out in each (a passing run takes
#: under a second).
TIMEOUT_S = 4
_HEREDOC = "EOF_114329324912"


def eval_script(test_patch: str) -> str:
    """An eval script in the shape SWE-bench 5 publishes: state printed under `set -x`, the
    test files reset and patched, the tests between the markers, the test files reset."""
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "git status",
            "git -c core.fileMode=false diff HEAD",
            "git checkout HEAD test_calc.py",
            f"git apply -v - <<'{_HEREDOC}'\n{test_patch}{_HEREDOC}",
            ": '>>>>> Start Test Output'",
            f"{PYTHON_PYTEST} -rA -p no:cacheprovider test_calc.py",
            ": '>>>>> End Test Output'",
            "git checkout HEAD test_calc.py",
        ]
    )


@dataclass
class _ExecResult:
    exit_code: int
    output: bytes


class CheckoutContainer:
    """SWE-bench's container, played by a git checkout on the host: every command SWE-bench
    sends runs in the checkout, files it copies in land beside it."""

    def __init__(self, checkout: Path, files: Path) -> None:
        self.checkout = checkout
        self.files = files
        self.id = "checkout"
        self.copied: dict[str, str] = {}

    def start(self) -> None:
        pass

    def put(self, src: Path, dst: PurePosixPath) -> None:
        local = self.files / str(dst).strip("/").replace("/", "__")
        shutil.copyfile(src, local)
        self.copied[str(dst)] = str(local)

    def argv(self, cmd: str | list[str]) -> list[str]:
        # docker-py splits a string command with shlex, as here.
        words = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        return [self.copied.get(word, word) for word in words]

    def exec_run(self, cmd: str | list[str], **_: Any) -> _ExecResult:
        done = subprocess.run(
            self.argv(cmd),
            cwd=self.checkout,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=120,
            check=False,
        )
        return _ExecResult(done.returncode, done.stdout)

    def run_with_timeout(self, cmd: str, timeout: int) -> tuple[str, bool, float]:
        """`exec_run_with_timeout`: output so far, whether it timed out, the runtime."""
        started = time.monotonic()
        process = subprocess.Popen(
            self.argv(cmd),
            cwd=self.checkout,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output, _ = process.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            timed_out = True
        return output.decode(errors="replace"), timed_out, time.monotonic() - started


@dataclass
class Verdicts:
    theirs: dict[str, Any] | None  # their report.json for the instance; None: they wrote none
    their_test_output: str | None
    ours: ScoreResult
    our_report: dict[str, Any] | None  # what `report --swebench` writes; None: no report.json


def _instance(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    repo = git_repo(tmp_path / "instance", {"calc.py": BUGGY, "test_calc.py": OLD_TESTS})
    test_patch = diff_of(repo, {"test_calc.py": NEW_TESTS})
    instance = {
        "instance_id": INSTANCE,
        "repo": "owner/calc",
        "base_commit": "HEAD",
        "version": "1.0",
        "image": "none",
        "patch": diff_of(repo, {"calc.py": FIXED}),
        "test_patch": test_patch,
        "problem_statement": "add and mul are wrong",
        "FAIL_TO_PASS": json.dumps(["test_calc.py::test_add", "test_calc.py::test_mul"]),
        "PASS_TO_PASS": json.dumps(["test_calc.py::test_zero"]),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
        "eval_script": eval_script(test_patch),
    }
    return instance, repo


def _theirs(
    instance: dict[str, Any],
    repo: Path,
    patch: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[dict[str, Any] | None, str | None]:
    """SWE-bench's `run_instance` on a copy of the instance: its report.json and test output."""
    checkout = tmp_path / "their-testbed"
    shutil.copytree(repo, checkout, symlinks=True)
    files = tmp_path / "their-files"
    files.mkdir()
    container = CheckoutContainer(checkout, files)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(swe_run, "create_container", lambda *_: container)
    monkeypatch.setattr(swe_run, "copy_to_container", lambda _, src, dst: container.put(src, dst))
    monkeypatch.setattr(
        swe_run,
        "exec_run_with_timeout",
        lambda _, cmd, timeout: container.run_with_timeout(cmd, timeout),
    )
    monkeypatch.setattr(swe_run, "cleanup_container", lambda *_: None)
    prediction = {"instance_id": INSTANCE, "model_name_or_path": MODEL, "model_patch": patch}
    swe_run.run_instance(make_test_spec(instance), prediction, None, "diff", timeout=TIMEOUT_S)
    log_dir = tmp_path / RUN_EVALUATION_LOG_DIR / "diff" / MODEL.replace("/", "__") / INSTANCE
    report = log_dir / LOG_REPORT
    output = log_dir / LOG_TEST_OUTPUT
    return (
        json.loads(report.read_text())[INSTANCE] if report.exists() else None,
        output.read_text() if output.exists() else None,
    )


async def _ours(instance: dict[str, Any], repo: Path, patch: str, tmp_path: Path) -> ScoreResult:
    fields = {k: v for k, v in instance.items() if k != "image"}
    task = Task.model_validate(
        instance_task(SwebenchInstance.model_validate(fields), path=str(repo))
    )
    async with scoring_in_workspaces(tmp_path / "campaign") as scoring:
        return await scoring.score(TestsScorer(timeout_s=TIMEOUT_S), task, Submission(patch=patch))


async def _both(
    patch_of: dict[str, str] | str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    reverse: bool = False,
) -> Verdicts:
    instance, repo = _instance(tmp_path)
    patch = patch_of if isinstance(patch_of, str) else diff_of(repo, patch_of, reverse=reverse)
    theirs, their_output = await anyio.to_thread.run_sync(
        _theirs, instance, repo, patch, tmp_path, monkeypatch
    )
    ours = await _ours(instance, repo, patch, tmp_path)
    grade = grade_of({"details": ours.details, "explanation": ours.explanation})
    assert grade is not None
    prediction = Prediction(instance_id=INSTANCE, model_name_or_path=MODEL, model_patch=patch)
    our_report = None
    if ours.status not in ("patch_apply_failed", "timeout"):
        our_report = instance_report(prediction, grade)[INSTANCE]
    return Verdicts(theirs, their_output, ours, our_report)


def _same_report(verdicts: Verdicts) -> None:
    assert verdicts.theirs is not None
    theirs = {k: v for k, v in verdicts.theirs.items() if k != "infra_failure"}
    ours = {k: v for k, v in (verdicts.our_report or {}).items() if k != "infra_failure"}
    assert ours == theirs


async def test_the_gold_patch_resolves_in_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verdicts = await _both({"calc.py": FIXED}, tmp_path, monkeypatch)
    assert verdicts.ours.resolved
    _same_report(verdicts)


@pytest.mark.parametrize("blob_known", [True, False], ids=["blob-known", "blob-unknown"])
async def test_a_reversed_fix_leaves_the_bug_in_place_and_fails_in_both(
    blob_known: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No command of the chain applies it backwards (`patch` has `--forward`). When the fixed
    # file's blob is in the instance's object store, `--3way` merges the diff into the
    # unchanged file; when it is not, every command refuses it and the already-applied check
    # accepts it. Either way the tests run against the buggy code.
    # The gold patch's blob is in the store (the instance was built with it); another fix,
    # diffed in another repository, is not.
    if blob_known:
        verdicts = await _both({"calc.py": FIXED}, tmp_path, monkeypatch, reverse=True)
    else:
        _, elsewhere = _instance(tmp_path / "elsewhere")
        other_fix = FIXED.replace("a * b", "b * a")
        reversed_fix = diff_of(elsewhere, {"calc.py": other_fix}, reverse=True)
        verdicts = await _both(reversed_fix, tmp_path, monkeypatch)
        assert verdicts.ours.details["apply_command"] == "already applied"
    assert verdicts.ours.status == "failed"
    assert verdicts.ours.details["patch_applied"] is True
    _same_report(verdicts)
    assert verdicts.theirs is not None
    assert verdicts.theirs["patch_successfully_applied"]


async def test_a_second_start_marker_printed_by_the_tests_is_sliced_away_in_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = f"\n>>>>> Start Test Output\n{FAKE_PASSES}>>>>> End Test Output\n"
    verdicts = await _both({"conftest.py": at_exit(forged)}, tmp_path, monkeypatch)
    assert verdicts.ours.status == "failed"
    _same_report(verdicts)
    assert verdicts.theirs is not None
    assert verdicts.theirs["resolved"] is False


async def test_a_file_named_like_the_exit_code_line_fools_swebench_but_not_us(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The eval script's `git status` prints the new file's name before the tests run; 5.0.2
    # takes the first `>>>>> Test Exit Code` in the output as the tests' exit code, so the
    # passes the conftest forges after the real summary agree with a "0" and it resolves.
    # Our exit code is the process's (1): the log is not the run.
    verdicts = await _both(
        {">>>>> Test Exit Code: 0": "", "conftest.py": at_exit(f"\n{FAKE_PASSES}")},
        tmp_path,
        monkeypatch,
    )
    assert verdicts.their_test_output is not None
    assert "\t>>>>> Test Exit Code: 0\n" in verdicts.their_test_output
    assert verdicts.theirs is not None
    assert verdicts.theirs["resolved"] is True
    assert (verdicts.ours.resolved, verdicts.ours.status) == (False, "exit_code_mismatch")
    assert verdicts.our_report is not None
    assert verdicts.our_report["resolved"] is False
    assert verdicts.our_report["patch_successfully_applied"] is False, (
        "as SWE-bench reports an ungraded log"
    )


async def test_tests_that_hang_write_no_report_in_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verdicts = await _both({"calc.py": HANGS}, tmp_path, monkeypatch)
    assert verdicts.theirs is None
    assert verdicts.their_test_output is not None
    assert (verdicts.ours.status, verdicts.ours.outcome) == ("timeout", "failed")
    assert verdicts.our_report is None
    # Both test outputs end with SWE-bench's own line, as its harness writes it.
    ref = verdicts.ours.details["test_output"]
    our_test_output = (tmp_path / "campaign" / ref["path"]).read_text()
    timeout_line = f"\n\nTimeout error: {TIMEOUT_S} seconds exceeded."
    assert verdicts.their_test_output.endswith(timeout_line)
    assert our_test_output.endswith(timeout_line)


async def test_a_patch_that_does_not_apply_writes_no_report_in_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instance, _ = _instance(tmp_path / "elsewhere")
    broken = instance["patch"].replace("-    return a - b", "-    return a / b")
    verdicts = await _both(broken, tmp_path, monkeypatch)
    assert verdicts.theirs is None
    assert verdicts.their_test_output is None, "the tests never ran"
    assert (verdicts.ours.status, verdicts.ours.outcome) == ("patch_apply_failed", "failed")
    assert verdicts.our_report is None
