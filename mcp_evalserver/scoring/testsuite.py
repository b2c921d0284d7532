"""The `tests` scorer: SWE-bench's evaluation of a patch, in a fresh workspace of the instance.

Steps: an empty patch is `failed` (status `empty`) without running anything; otherwise apply
the patch (fallback chain, `patching`), put the files of the task's `test_patch` back to the
base commit and apply it, run the tests between SWE-bench's markers, parse the log and grade it
(`grading.grade_log`). The whole log is stored as an artifact and named in `details.log`.

Statuses: `resolved`, `failed` (graded, not resolved; `details.resolution` tells a partial
resolution apart), `empty`, `patch_apply_failed` (outcome failed), `test_patch_failed`,
`tests_errored`, `exit_code_mismatch` (outcome error), `timeout` (the harness's time limit:
outcome infra_error, kept out of pass rates).

Score: the share of FAIL_TO_PASS and PASS_TO_PASS tests that pass (1.0 when both are empty and
the run is resolved); only a full resolution counts as resolved.

SWE-bench 5 instances carry their own `eval_script` (with the markers), `image` and
`log_parser`: the script runs as it is, its test exit code recorded as SWE-bench records it,
and parser `auto` takes the instance's `log_parser` (kept in the task's metadata).
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.sandbox.base import Workspace
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.scoring.grading import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TESTS_TIMEOUT,
    EvalStatus,
    Grade,
    eval_test_section,
    grade_log,
)
from mcp_evalserver.scoring.logparsers import SWEBENCH_REPO_PARSERS, LogParser, get_parser
from mcp_evalserver.scoring.patching import (
    EVAL_DIR,
    apply_patch,
    patched_files,
    restore_files,
)
from mcp_evalserver.spec import Task


def pytest_command(task: Task) -> str | None:
    """`python -m pytest -rA` (python3 where there is no `python`) over the files that
    FAIL_TO_PASS and PASS_TO_PASS name (pytest ids).

    None when no id names a file (`path::test`), e.g. Django-style ids.
    """
    files: dict[str, None] = {}
    for test in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]:
        path, separator, _ = test.partition("::")
        if separator:
            files.setdefault(path)
    if not files:
        return None
    return (
        'PY="$(command -v python || command -v python3)"; "$PY" -m pytest -rA -p no:cacheprovider '
        + " ".join(shlex.quote(f) for f in files)
    )


def record_test_exit_code(script: str) -> str:
    """SWE-bench's `record_test_exit_code`: keep the test command's exit status (`$?` right
    before the end marker) and print it after the marker, unless the script already does."""
    if TEST_EXIT_CODE in script:
        return script
    lines = script.split("\n")
    for number, line in enumerate(lines):
        if END_TEST_OUTPUT in line:
            return "\n".join(
                [
                    *lines[:number],
                    "MCP_EVALSERVER_TEST_EXIT_CODE=$?",
                    line,
                    f'echo "{TEST_EXIT_CODE}: $MCP_EVALSERVER_TEST_EXIT_CODE"',
                    *lines[number + 1 :],
                ]
            )
    return script


class TestsScorer(Scorer):
    """Grades a patch by running the task's tests, as SWE-bench does."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(
        self,
        *,
        parser: str = "auto",
        test_command: str | None = None,
        timeout_s: float = 1800.0,
        output_cap: int = 8 << 20,
    ) -> None:
        """Checks the parser name now, so a typo fails the campaign before it starts.

        Raises:
            InvalidInput: no log parser has that name.
        """
        if parser != "auto":
            get_parser(parser)
        self.parser = parser
        self.test_command = test_command
        self.timeout_s = timeout_s
        self.output_cap = output_cap

    def parser_for(self, task: Task) -> LogParser:
        """The configured parser; for `auto`, the task's `metadata.log_parser` (SWE-bench 5
        instances name theirs), else SWE-bench's for the task's repo, else `pytest`.

        Raises:
            InvalidInput: the parser the task names is not one this project has.
        """
        if self.parser != "auto":
            return get_parser(self.parser)
        named = task.metadata.get("log_parser")
        if isinstance(named, str) and named:
            return get_parser(named)
        return get_parser(SWEBENCH_REPO_PARSERS.get(task.repo or "", "pytest"))

    def eval_script(self, task: Task) -> str | None:
        """The shell script that runs the tests between the markers (None: nothing to run)."""
        if task.eval_script:
            if START_TEST_OUTPUT in task.eval_script:
                # A SWE-bench eval script prints its own markers.
                return record_test_exit_code(task.eval_script)
            return eval_test_section(task.eval_script)
        command = self.test_command or pytest_command(task)
        return eval_test_section(command) if command else None

    async def score(self, context: ScoringContext) -> ScoreResult:
        """Grades the submission's patch (see the module docstring).

        Raises:
            InvalidInput: the task names a log parser this project lacks, or an eval_type
                other than pass_and_fail (the runner records the trajectory's `error`).
            SandboxUnavailable: the instance is gone (the runner retries).
        """
        task = context.task
        patch = context.submission.patch
        if not patch or not patch.strip():
            return ScoreResult.unresolved("empty", "the submission has no patch; nothing was run")
        # Before anything runs: a task may ask for grading this scorer does not do.
        parser = self.parser_for(task)
        eval_type = task.metadata.get("eval_type") or "pass_and_fail"
        if eval_type != "pass_and_fail":
            raise InvalidInput(
                f"task {task.id}: eval_type {eval_type!r} is not supported (only pass_and_fail)"
            )
        script = self.eval_script(task)
        if script is None:
            return ScoreResult.unresolved(
                "no_tests",
                f"task {task.id} has no eval_script, the scorer no test_command, and its "
                "test ids name no files for pytest",
                outcome="error",
            )
        workspace = await context.sandbox.workspace()
        log: list[str] = []
        applied = await apply_patch(workspace, patch)
        log.append(applied.log)
        details: dict[str, Any] = {"patch_applied": applied.applied, "apply_command": None}
        if not applied.applied:
            grade = _grade("".join(log), task, parser, patch_applied=False)
            return await self._result(context, grade, log, details)
        details["apply_command"] = applied.command
        if task.test_patch:
            await restore_files(workspace, patched_files(task.test_patch))
            tests_applied = await apply_patch(workspace, task.test_patch, "test_patch.diff")
            log.append(tests_applied.log)
            if not tests_applied.applied:
                ref = await self._store_log(context, log)
                return ScoreResult.unresolved(
                    "test_patch_failed",
                    "the task's test_patch did not apply on top of the submission",
                    outcome="error",
                    details={**details, "log": ref},
                )
        timed_out = await self._run_tests(workspace, script, log)
        grade = _grade("".join(log), task, parser, patch_applied=True, timed_out=timed_out)
        return await self._result(context, grade, log, details)

    async def _run_tests(self, workspace: Workspace, script: str, log: list[str]) -> bool:
        """Runs the eval script, appending its output to `log`; True if it timed out."""
        path = f"{EVAL_DIR}/eval.sh"
        await workspace.write_file(path, script + "\n")
        result = await workspace.exec(
            f"bash {path} 2>&1", timeout=self.timeout_s, output_cap=self.output_cap
        )
        log.append(result.stdout + result.stderr)
        if result.stdout_truncated:
            log.append("\n[mcp-evalserver: the test output was truncated in the middle]\n")
        if result.timed_out:
            log.append(f"\n{TESTS_TIMEOUT} after {self.timeout_s:g}s\n")
        return result.timed_out

    async def _store_log(self, context: ScoringContext, log: list[str]) -> dict[str, Any]:
        return await context.store_artifact("".join(log).encode(errors="replace"), ".log")

    async def _result(
        self, context: ScoringContext, grade: Grade, log: list[str], details: dict[str, Any]
    ) -> ScoreResult:
        details = {
            **details,
            "eval_status": grade.status.value,
            "resolution": grade.resolution.value,
            "exit_code": grade.exit_code,
            "tests_status": grade.tests.to_swebench() if grade.tests else None,
            "log": await self._store_log(context, log),
        }
        if grade.resolved:
            return ScoreResult(
                resolved=True,
                score=1.0,
                status="resolved",
                explanation=grade.explanation,
                details=details,
            )
        status = "failed" if grade.status is EvalStatus.GRADED else grade.status.value
        return ScoreResult.unresolved(
            status,
            grade.explanation,
            outcome=_UNRESOLVED_OUTCOMES[grade.outcome],
            score=_share(grade),
            details=details,
        )


_UNRESOLVED_OUTCOMES: dict[str, Literal["failed", "error", "infra_error"]] = {
    "failed": "failed",
    "error": "error",
    "infra_error": "infra_error",
    "timeout": "infra_error",
}


def _grade(
    log: str, task: Task, parser: LogParser, *, patch_applied: bool, timed_out: bool = False
) -> Grade:
    return grade_log(
        log,
        parser=parser,
        fail_to_pass=task.FAIL_TO_PASS,
        pass_to_pass=task.PASS_TO_PASS,
        patch_applied=patch_applied,
        timed_out=timed_out,
    )


def _share(grade: Grade) -> float:
    if grade.tests is None or grade.status is not EvalStatus.GRADED:
        return 0.0
    groups = (grade.tests.fail_to_pass, grade.tests.pass_to_pass)
    passed = sum(len(g.success) for g in groups)
    total = passed + sum(len(g.failure) for g in groups)
    return passed / total if total else 0.0
