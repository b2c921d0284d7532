"""The `tests` scorer: SWE-bench's evaluation of a patch, in a fresh workspace of the instance.

Steps: an empty patch is `failed` (status `empty`) without running anything; otherwise apply
the patch (SWE-bench 5.0.2's fallback chain, `patching`), put the files of the task's
`test_patch` back to the base commit and apply it, run the tests between SWE-bench's markers,
parse and grade the test run's output (`grading.grade_log`).

What is graded, and what is not (the submission is hostile, docs/design/isolation.md): only the eval
script's own output, sliced between the markers as SWE-bench 5.0.2 slices it; the apply steps'
output (which prints the names of the patch's files) is logged, never graded. The test exit
code is the eval script's exit status from the sandbox (the script ends with `exit` of the
test command's status), never a `>>>>> Test Exit Code` line a test can print. `details.log`
is the whole log (apply steps, then the tests), `details.test_output` the graded part, which a
run past the time limit ends with SWE-bench's own `Timeout error: N seconds exceeded.` line as
its harness ends `test_output.txt`.

Statuses: `resolved`, `failed` (graded, not resolved; `details.resolution` tells a partial
resolution apart), `empty`, `patch_apply_failed`, `timeout` (the tests ran past `timeout_s`;
outcome failed, counted like any other miss), `test_patch_failed`, `tests_errored`,
`exit_code_mismatch` (outcome error). The harness's own faults (the sandbox gone) raise, and
the runner records `infra_error`.

Score: the share of FAIL_TO_PASS and PASS_TO_PASS tests that pass (1.0 when both are empty and
the run is resolved); only a full resolution counts as resolved.

SWE-bench 5 instances carry their own `eval_script` (with the markers), `image` and
`log_parser`: the script runs as it is, its test exit code recorded as SWE-bench records it,
and parser `auto` takes the instance's `log_parser` (kept in the task's metadata).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mcp_evalserver.errors import Conflict, InvalidInput
from mcp_evalserver.runtime.sandboxes import InstanceCheck
from mcp_evalserver.sandbox.base import REPORT_FD, Workspace
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.scoring.swebench.doctests import doctest_kind
from mcp_evalserver.scoring.swebench.grading import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    TESTS_TIMEOUT,
    EvalStatus,
    Grade,
    eval_test_section,
    grade_log,
    timeout_error,
)
from mcp_evalserver.scoring.swebench.interpreters import interpreter_check
from mcp_evalserver.scoring.swebench.logparsers import LogParser, get_parser
from mcp_evalserver.scoring.swebench.patching import (
    EVAL_DIR,
    apply_patch,
    patched_files,
    restore_files,
)
from mcp_evalserver.scoring.swebench.runners import section_runners
from mcp_evalserver.scoring.swebench.strict import (
    DOCTESTS_FILE,
    doctest_references,
    doctests_file,
    files_named_by,
    git_dir_paths_in,
    git_dir_restore_script,
    git_dir_snapshot_script,
    grade_report,
    infrastructure_in_patch,
    infrastructure_restore_script,
    plugin_env,
    plugin_source,
)
from mcp_evalserver.scoring.swebench.test_plans import (
    TestPlan,
    parser_instance,
    plan_tests,
    task_eval_type,
)
from mcp_evalserver.spec.campaign import Task

#: The shell variable the eval script keeps the test command's exit status in.
EXIT_CODE_VAR = "MCP_EVALSERVER_TEST_EXIT_CODE"
#: Appended to every eval script: the process's exit status is the test command's, so the
#: scorer never has to believe a line of text. A script that never reached the end marker
#: exits 3 (its log has no test section to grade anyway).
EXIT_WITH_TEST_STATUS = f'exit "${{{EXIT_CODE_VAR}:-3}}"'
#: Every pytest run under the scorer prints without colour codes, whatever the project's
#: configuration says (`addopts = --color=yes` would hide every result from the parsers).
PYTEST_ENV = {"PYTEST_ADDOPTS": "--color=no"}
_RESTORE_TIMEOUT_S = 120.0
#: Where strict mode's pytest plugin is written in the workspace (nothing secret about it).
_PLUGIN_DIR = f"{EVAL_DIR}/strict-plugin"
_STATUS_SAVED = re.compile(r"^\s*(\w+)=\$\?\s*$")


def record_test_exit_code(script: str) -> str:
    """SWE-bench's `record_test_exit_code`: keep the test command's exit status (`$?` right
    before the end marker) and print it after the marker, unless the script already does."""
    if EXIT_CODE_VAR in script:
        return script
    lines = script.split("\n")
    for number, line in enumerate(lines):
        if END_TEST_OUTPUT in line:
            # A script SWE-bench already rewrote keeps `$?` in its own variable right here.
            kept = _STATUS_SAVED.match(lines[number - 1]) if number else None
            status = f"${kept.group(1)}" if kept else "$?"
            return "\n".join(
                [
                    *lines[:number],
                    f"{EXIT_CODE_VAR}={status}",
                    line,
                    f'echo "{TEST_EXIT_CODE}: ${EXIT_CODE_VAR}"',
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
        strict: bool = False,
        grade_empty: bool = False,
        ignore_tests: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """Checks the parser name now, so a typo fails the campaign before it starts.

        `grade_empty`: an empty submission runs the tests on the base too (a validation's
        no-op runs), instead of being `empty` with nothing run. `ignore_tests`: by task id,
        the tests graded neither way (a validation's flaky ones); each exclusion is named in
        the verdict's `details.ignored_tests`.

        Raises:
            InvalidInput: no log parser has that name.
        """
        if parser != "auto":
            get_parser(parser)
        self.parser = parser
        self.test_command = test_command
        self.timeout_s = timeout_s
        self.output_cap = output_cap
        self.strict = strict
        self.grade_empty = grade_empty
        self.ignore_tests = {task: frozenset(tests) for task, tests in (ignore_tests or {}).items()}

    def plan(self, task: Task) -> TestPlan:
        """What runs the task's tests and which parser reads them (`test_plans`): the task's
        eval_script, else the scorer's test_command, else SWE-bench's command for the repo,
        else one inferred from the test ids; the parser likewise."""
        return plan_tests(task, command=self.test_command, parser=self.parser)

    def check_tasks(self, tasks: Sequence[Task]) -> None:
        """Strict mode grades from the report of the one pytest the test section starts
        (`runners`): a task whose section starts another runner (Django's `runtests.py`,
        SymPy's `bin/test`, `tox`, unittest) or pytest more than once is refused up front.

        Raises:
            InvalidInput: strict mode and such tasks; the message names them and their
                runners, and what to do.
        """
        if not self.strict:
            return
        refused: list[str] = []
        for task in tasks:
            script = self.eval_script(task)
            if script is None:
                continue  # graded `no_tests`, which says what to give
            runners = section_runners(script)
            if runners.count("pytest") != 1:
                ran = ", ".join(f"`{r}`" for r in runners) or "no program"
                refused.append(f"{task.id} (its test section runs {ran})")
        if refused:
            shown = "; ".join(refused[:5]) + (
                f"; and {len(refused) - 5} more" if len(refused) > 5 else ""
            )
            raise InvalidInput(
                f"strict mode grades from the report of the one pytest run a task's test "
                f"section starts, and {len(refused)} task(s) do not start pytest exactly once: "
                f"{shown}. Grade these tasks without `strict` (SWE-bench's mode), or give them "
                "an `eval_script` (or the scorer a `test_command`) that runs pytest once"
            )

    def instance_check(self, task: Task) -> InstanceCheck | None:
        """Whether the programs the eval script starts resolve inside a workspace
        (`interpreters`, which follows the script): one hidden by the workspace view fails
        the instance for this task, not every evaluation."""
        return interpreter_check(task, self.eval_script(task))

    def parser_for(self, task: Task) -> LogParser:
        """The configured parser; for `auto`, the task's `metadata.log_parser` (SWE-bench 5
        instances name theirs), else SWE-bench's for the task's repo, else one the test ids
        call for (`pytest`, `pytest_verbose` for ids with spaces, `unittest`).

        Raises:
            InvalidInput: the parser the task names is not one this project has.
        """
        return get_parser(self.plan(task).parser, parser_instance(task))

    def eval_script(self, task: Task) -> str | None:
        """The shell script that runs the tests between the markers and exits with the test
        command's status (None: nothing to run)."""
        if task.eval_script:
            if START_TEST_OUTPUT in task.eval_script:
                # A SWE-bench eval script prints its own markers.
                script = record_test_exit_code(task.eval_script)
            else:
                script = eval_test_section(task.eval_script)
        else:
            plan = self.plan(task)
            if not plan.command:
                return None
            script = eval_test_section(plan.command)
            if plan.preamble:
                script = f"{plan.preamble}\n{script}"
        return f"{script}\n{EXIT_WITH_TEST_STATUS}"

    async def score(self, context: ScoringContext) -> ScoreResult:
        """Grades the submission's patch (see the module docstring).

        Raises:
            InvalidInput: the task names a log parser this project lacks, or an eval_type
                other than pass_and_fail, or strict mode runs where the sandbox has no report
                channel (the runner records the trajectory's `error`).
            SandboxUnavailable: the instance is gone (the runner retries).
        """
        task = context.task
        patch = context.submission.patch
        empty = not patch or not patch.strip()
        if empty and not self.grade_empty:
            return ScoreResult.unresolved("empty", "the submission has no patch; nothing was run")
        graded, ignored = self._graded_lists(task)
        # Before anything runs: a task may ask for grading this scorer does not do.
        plan = self.plan(task)
        parser = get_parser(plan.parser, parser_instance(task))
        eval_type = task_eval_type(task)
        script = self.eval_script(task)
        if script is None:
            return ScoreResult.unresolved(
                "no_tests",
                f"task {task.id} has no eval_script, the scorer no test_command, its repo "
                f"has no SWE-bench test command, and its test ids call for none ({plan.reason})"
                "; give the task an `eval_script` or the scorer a `test_command`",
                outcome="error",
            )
        workspace = await context.sandbox.workspace()
        # Processes outlive their commands: none of those already here (a workspace the agent
        # used) may take part in grading, nor any an apply step leaves (see _run_tests).
        await workspace.end_processes()
        # Everything, for people; only the test run's output is graded. The first line says
        # which command and parser were chosen, and why.
        log: list[str] = [f"mcp-evalserver: tests: {plan.reason}\n"]
        git_snapshot = None
        if self.strict and git_dir_paths_in(patch or ""):
            git_snapshot = f"{EVAL_DIR}/{secrets.token_hex(16)}"
            snapshot = git_dir_snapshot_script(git_dir_paths_in(patch or ""), git_snapshot)
            await workspace.exec(snapshot, timeout=_RESTORE_TIMEOUT_S)
        doctests: dict[str, str] = {}
        if self.strict:  # read before the patch goes in: the workspace is the base commit's
            doctests = await self._doctest_references(workspace, task, log)
        details: dict[str, Any] = {
            "patch_applied": True,
            "apply_command": None,
            "test_plan": plan.reason,
        }
        if ignored:
            details["ignored_tests"] = ignored
        if not empty:
            applied = await apply_patch(workspace, patch or "")
            log.append(applied.log)
            details["patch_applied"] = applied.applied
            if not applied.applied:
                grade = _grade("", graded, parser, eval_type, patch_applied=False)
                return await self._result(context, grade, log, details)
            details["apply_command"] = applied.command
        if self.strict:
            details["restored"] = await self._restore_infrastructure(
                workspace, task, patch or "", git_snapshot, log
            )
            await workspace.write_file(f"{_PLUGIN_DIR}/mcp_evalserver_report.py", plugin_source())
            await workspace.write_file(f"{_PLUGIN_DIR}/{DOCTESTS_FILE}", doctests_file(doctests))
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
        run = await self._run_tests(workspace, script)
        log.append(run.output)
        test_output = run.output
        if run.timed_out:
            # SWE-bench's own line ends its test_output.txt, and so ours (`report --swebench`).
            test_output += timeout_error(self.timeout_s)
            log.append(
                f"\n{TESTS_TIMEOUT} after {self.timeout_s:g}s{timeout_error(self.timeout_s)}"
            )
        if self.strict and run.exit_status is not None:
            grade = grade_report(
                run.report,
                writers=run.report_writers,
                fail_to_pass=graded.FAIL_TO_PASS,
                pass_to_pass=graded.PASS_TO_PASS,
                exit_status=run.exit_status,
                doctests=doctests.keys(),
            )
        else:
            grade = _grade(
                run.output,
                graded,
                parser,
                eval_type,
                patch_applied=True,
                timed_out=run.timed_out,
                exit_status=run.exit_status,
            )
        details["test_output"] = await context.store_artifact(
            test_output.encode(errors="replace"), ".log"
        )
        return await self._result(context, grade, log, details)

    def _graded_lists(self, task: Task) -> tuple[Task, list[str]]:
        """The task with its ignored tests taken out of FAIL_TO_PASS and PASS_TO_PASS, and
        the tests taken out (in list order)."""
        ignore = self.ignore_tests.get(task.id)
        if not ignore:
            return task, []
        lists = {name: getattr(task, name) for name in ("FAIL_TO_PASS", "PASS_TO_PASS")}
        ignored = [t for tests in lists.values() for t in tests if t in ignore]
        kept = {name: [t for t in tests if t not in ignore] for name, tests in lists.items()}
        return task.model_copy(update=kept), ignored

    async def _restore_infrastructure(
        self, workspace: Workspace, task: Task, patch: str, git_snapshot: str | None, log: list[str]
    ) -> list[str]:
        """Strict mode: the `.git` paths the patch wrote back as they were (first: git runs
        next), then test infrastructure and the files the test ids name back to the base."""
        paths = [
            *infrastructure_in_patch(patch),
            *files_named_by([*task.FAIL_TO_PASS, *task.PASS_TO_PASS]),
        ]
        script = infrastructure_restore_script(paths)
        if git_snapshot is not None:
            script = f"{git_dir_restore_script(git_dir_paths_in(patch), git_snapshot)}\n{script}"
        result = await workspace.exec(script, timeout=_RESTORE_TIMEOUT_S)
        restored = [line for line in result.stdout.splitlines() if line]
        log.append(f"strict: restored from the base commit: {restored or 'nothing'}\n")
        if result.exit_code != 0:
            log.append(f"strict: restoring exited {result.exit_code}: {result.stderr}\n")
        return restored

    async def _doctest_references(
        self, workspace: Workspace, task: Task, log: list[str]
    ) -> dict[str, str]:
        """Strict mode: the examples each doctest id of the task runs (`doctest_references`),
        from the base commit's files (read here, before the patch) and the task's patches."""
        test_ids = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
        bases: dict[str, str | None] = {}
        for test in test_ids:
            path = test.partition("::")[0]
            if doctest_kind(test) is None or path in bases:
                continue
            shown = await workspace.exec(
                ["git", "show", f"HEAD:{path}"], timeout=_RESTORE_TIMEOUT_S, output_cap=16 << 20
            )
            whole = shown.exit_code == 0 and not shown.stdout_truncated
            bases[path] = shown.stdout if whole else None
        if not bases:
            return {}
        references, account = doctest_references(
            bases, test_ids, gold=task.patch, test_patch=task.test_patch
        )
        log.append("".join(f"strict: doctest {line}\n" for line in account))
        return references

    async def _run_tests(self, workspace: Workspace, script: str) -> _TestRun:
        """Runs the eval script; its output (stderr folded into stdout) and exit status, and in
        strict mode what its report channel carried."""
        path = f"{EVAL_DIR}/eval.sh"
        await workspace.write_file(path, script + "\n")
        # What a step before ran (a probe of the interpreter, a git hook) may have left a
        # process that would rewrite the tests or their report while they run: none lasts.
        await workspace.end_processes()
        env = dict(PYTEST_ENV)
        if self.strict:
            strict = plugin_env(_PLUGIN_DIR, REPORT_FD)
            env = {
                **strict,
                "PYTEST_ADDOPTS": f"{env['PYTEST_ADDOPTS']} {strict['PYTEST_ADDOPTS']}",
            }
        # No shell in between: a script killed by a signal must show as one (-signum).
        try:
            result = await workspace.exec(
                ["bash", "-c", 'exec bash "$0" 2>&1', path],
                timeout=self.timeout_s,
                output_cap=self.output_cap,
                env=env,
                report=self.strict,
            )
        except Conflict as exc:  # no report channel on this backend: nothing can be graded
            raise InvalidInput(f"strict mode cannot grade here: {exc}") from exc
        output = result.stdout + result.stderr
        if result.stdout_truncated:
            output += "\n[mcp-evalserver: the test output was truncated in the middle]\n"
        exit_status = None if result.timed_out else result.exit_code
        return _TestRun(output, exit_status, result.timed_out, result.report, result.report_writers)

    async def _store_log(self, context: ScoringContext, log: list[str]) -> dict[str, Any]:
        return await context.store_artifact("".join(log).encode(errors="replace"), ".log")

    async def _result(
        self, context: ScoringContext, grade: Grade, log: list[str], details: dict[str, Any]
    ) -> ScoreResult:
        details = {
            **details,
            "mode": "strict" if self.strict else "swebench",
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


@dataclass(frozen=True)
class _TestRun:
    output: str
    exit_status: int | None  # None when it timed out
    timed_out: bool
    report: bytes | None = None  # strict mode: what the report channel carried
    report_writers: int = 0


_UNRESOLVED_OUTCOMES: dict[str, Literal["failed", "error", "infra_error"]] = {
    "failed": "failed",
    "error": "error",
    "infra_error": "infra_error",
    "timeout": "failed",
}


def _grade(
    output: str,
    task: Task,
    parser: LogParser,
    eval_type: str,
    *,
    patch_applied: bool,
    timed_out: bool = False,
    exit_status: int | None = None,
) -> Grade:
    return grade_log(
        output,
        parser=parser,
        fail_to_pass=task.FAIL_TO_PASS,
        pass_to_pass=task.PASS_TO_PASS,
        patch_applied=patch_applied,
        timed_out=timed_out,
        exit_status=exit_status,
        eval_type=eval_type,
    )


def _share(grade: Grade) -> float:
    if grade.tests is None or grade.status is not EvalStatus.GRADED:
        return 0.0
    groups = (grade.tests.fail_to_pass, grade.tests.pass_to_pass)
    passed = sum(len(g.success) for g in groups)
    total = passed + sum(len(g.failure) for g in groups)
    return passed / total if total else 0.0
