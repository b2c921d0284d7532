"""SWE-bench grading rules: a test log plus FAIL_TO_PASS / PASS_TO_PASS lists in, a grade out.

Rules (as in `swebench.harness.grading`, checked by a differential test against it):

- A test passes if its status is PASSED or XFAIL. A FAIL_TO_PASS test that is missing, FAILED,
  ERROR or SKIPPED is a failure. A PASS_TO_PASS test is maintained if it passes or is SKIPPED
  (a skip is not a regression), and a failure if missing, FAILED or ERROR.
- An expected id truncated inside a parametrization (more `[` than `]`) matches the ids it
  prefixes when they agree on pass versus fail (SWE-bench Verified ships 676 such ids).
- Each list's success rate is successes / (successes + failures), 1 for an empty list.
  FULL when both rates are 1; PARTIAL when FAIL_TO_PASS is strictly between 0 and 1 and
  PASS_TO_PASS is 1; otherwise NO. Only FULL counts as resolved.
- The log is graded only if the patch applied, the tests did not run past the time limit, the
  log has the test-output section and either parsed results or a sign the suite ran, and the
  exit code agrees with the results. Each other case is its own `EvalStatus`, never resolved.
- The log is read as SWE-bench 5.0.2 reads its `test_output.txt` (written, then read back with
  `open()`): universal newlines, so `\r\n` and a lone `\r` (progress output such as
  `50%\r100%\r`) end a line (`universal_newlines`).
- The test-output section is what SWE-bench 5.0.2 slices: from the first start marker to the
  next start marker or the first end marker, whichever comes first
  (`log.split(START)[1].split(END)[0]`).
- The parser reads that section without terminal escape sequences (`terminal_codes`), so a
  run coloured by `--color=yes` grades as the same run without colour would. SWE-bench 5.0.2's
  Python parsers (but `pytest_v2`) read coloured lines as no result at all.

The exit code: SWE-bench reads the first `>>>>> Test Exit Code: N` line of the log, text a test
can print itself. The `tests` scorer passes the eval script's exit status as the sandbox saw
it instead (`grade_log(exit_status=...)`); the text is read only for logs graded offline.

Eval-script convention (SWE-bench's markers, so its logs and ours read the same): the script
prints `>>>>> Start Test Output`, runs the test command, saves `$?`, prints
`>>>>> End Test Output` and then `>>>>> Test Exit Code: <n>`. `eval_test_section` writes
those lines around a command; `extract_test_output` reads the section back.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.stats.summary import Outcome
from mcp_evalserver.scoring.swebench.logparsers import LogParser, StatusMap, TestStatus
from mcp_evalserver.scoring.swebench.terminal_codes import strip_terminal_codes

START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"


def timeout_error(timeout_s: float) -> str:
    """What SWE-bench 5.0.2's harness appends to `test_output.txt` when the eval script runs
    past its time limit (`run_instance`, whose limit is whole seconds), so its failure
    classifier reads our files as it reads its own."""
    return f"\n\nTimeout error: {math.ceil(timeout_s)} seconds exceeded."


_EXIT_CODE = re.compile(rf"{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)")
# SWE-bench's evidence that a runner executed although it printed no per-test line; without
# it an empty status map (which a test list graded fail-only would read as all passing) from a
# suite that never started would look like a clean run.
_SUITE_RAN = re.compile(
    r"Executed [1-9]\d* of \d+"
    r"|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)"
    r"|[1-9]\d* passing"
    r"|Tests:\s+[1-9]\d*"
    r"|Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total"
    r"|^# tests [1-9]\d*"
    r"|[1-9]\d* specs?, \d+ failures?"
    r"|': ok$",
    re.M,
)
_PASSING = frozenset({TestStatus.PASSED, TestStatus.XFAIL})

#: SWE-bench 5.0.2's `GIT_APPLY_CMDS` (harness/run_evaluation.py), tried in order until one
#: exits 0; each is followed by the patch file's path. `--forward` matters: without it `patch
#: --batch` answers "Assuming -R" to a reversed diff and applies it backwards.
PATCH_APPLY_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("git", "apply", "--verbose"),
    ("git", "apply", "--verbose", "--3way"),
    ("git", "apply", "--verbose", "--reject"),
    ("patch", "--batch", "--forward", "--fuzz=5", "-p1", "-i"),
)
#: Run between two attempts: a failed `--reject` leaves partial hunks and `.rej` files behind.
PATCH_RESET_COMMANDS: tuple[tuple[str, ...], ...] = (
    ("git", "checkout", "--", "."),
    ("git", "clean", "-fd"),
)


def patch_apply_attempts(patch_path: str) -> list[list[str]]:
    """The commands to try, in order, to apply the patch at `patch_path` in the repo's root.

    The first that exits 0 wins; run `PATCH_RESET_COMMANDS` before every attempt but the
    first. If all fail, `patch_already_applied_check` exiting 0 means the tree already holds
    the patch (the chain can apply it and still exit non-zero); otherwise the apply failed.
    """
    return [[*command, patch_path] for command in PATCH_APPLY_COMMANDS]


def patch_already_applied_check(patch_path: str) -> list[str]:
    """A command that exits 0 exactly when the patch at `patch_path` is already applied."""
    return ["git", "apply", "--check", "--reverse", patch_path]


class ResolutionStatus(StrEnum):
    """SWE-bench's resolution levels; only FULL is resolved."""

    FULL = "RESOLVED_FULL"
    PARTIAL = "RESOLVED_PARTIAL"
    NO = "RESOLVED_NO"


class EvalStatus(StrEnum):
    """How far the evaluation got; only GRADED has a meaningful resolution."""

    GRADED = "graded"
    PATCH_APPLY_FAILED = "patch_apply_failed"
    #: The tests ran past the scorer's time limit: the submission's failure, like a test that
    #: fails (a hanging patch must not leave the pass rate's denominator).
    TIMEOUT = "timeout"
    #: The log says the tests errored, lacks the test-output section or shows no run at all.
    TESTS_ERRORED = "tests_errored"
    #: The test command exited non-zero yet no test failed: the log does not describe the run
    #: (a patch can print its own PASSED lines). SWE-bench discards such logs too.
    EXIT_CODE_MISMATCH = "exit_code_mismatch"


@dataclass(frozen=True)
class TestGroup:
    """The tests of one list (FAIL_TO_PASS or PASS_TO_PASS) split by outcome."""

    __test__ = False  # not a pytest test class, despite the name

    success: tuple[str, ...] = ()
    failure: tuple[str, ...] = ()

    @property
    def rate(self) -> float:
        """Share of successes; 1.0 for an empty list, which counts as passing."""
        total = len(self.success) + len(self.failure)
        return len(self.success) / total if total else 1.0


@dataclass(frozen=True)
class TestsReport:
    """FAIL_TO_PASS and PASS_TO_PASS outcomes and the resolution they imply."""

    __test__ = False

    fail_to_pass: TestGroup
    pass_to_pass: TestGroup

    @property
    def resolution(self) -> ResolutionStatus:
        """FULL, PARTIAL or NO by SWE-bench's rule (see the module docstring)."""
        f2p, p2p = self.fail_to_pass.rate, self.pass_to_pass.rate
        if f2p == 1 and p2p == 1:
            return ResolutionStatus.FULL
        if 0 < f2p < 1 and p2p == 1:
            return ResolutionStatus.PARTIAL
        return ResolutionStatus.NO

    def to_swebench(self) -> dict[str, dict[str, list[str]]]:
        """The `tests_status` object of SWE-bench's report.json (the *_TO_FAIL lists empty)."""
        empty: dict[str, list[str]] = {"success": [], "failure": []}
        return {
            "FAIL_TO_PASS": _group_dict(self.fail_to_pass),
            "PASS_TO_PASS": _group_dict(self.pass_to_pass),
            "FAIL_TO_FAIL": dict(empty),
            "PASS_TO_FAIL": dict(empty),
        }


def _group_dict(group: TestGroup) -> dict[str, list[str]]:
    return {"success": list(group.success), "failure": list(group.failure)}


@dataclass(frozen=True)
class Grade:
    """The result of grading one evaluation log."""

    status: EvalStatus
    resolution: ResolutionStatus
    explanation: str
    tests: TestsReport | None = None
    statuses: StatusMap = field(default_factory=dict)
    exit_code: int | None = None

    @property
    def resolved(self) -> bool:
        """Counted as resolved: graded and FULL."""
        return self.status is EvalStatus.GRADED and self.resolution is ResolutionStatus.FULL

    @property
    def outcome(self) -> Outcome:
        """The ledger/statistics outcome: whose failure this is.

        A patch that does not apply, tests that fail and tests that hang past the time limit
        are the submission's failures (docs/design/isolation.md); harness faults never get here
        (they raise, and the runner records `infra_error`).
        """
        if self.resolved:
            return "resolved"
        return _OUTCOMES[self.status]


_OUTCOMES: dict[EvalStatus, Outcome] = {
    EvalStatus.GRADED: "failed",
    EvalStatus.PATCH_APPLY_FAILED: "failed",
    EvalStatus.TIMEOUT: "failed",
    EvalStatus.TESTS_ERRORED: "error",
    EvalStatus.EXIT_CODE_MISMATCH: "error",
}


def parse_test_list(value: str | Sequence[str] | None, name: str = "test list") -> list[str]:
    """A FAIL_TO_PASS / PASS_TO_PASS value as SWE-bench ships it (JSON text) or as a list.

    None and "" mean an empty list.

    Raises:
        InvalidInput: the value is not a JSON array of strings (or a list of strings).
    """
    if value is None or value == "":
        return []
    items: Any = value
    if isinstance(value, str):
        try:
            items = json.loads(value)
        except ValueError as error:
            raise InvalidInput(f"{name} is not a JSON array: {error}") from error
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise InvalidInput(f"{name} must be a list of test ids (strings); got {value!r:.80}")
    return list(items)


def _resolve(test: str, statuses: StatusMap) -> str | None:
    """The status-map key for `test`, tolerating ids truncated inside a parametrization."""
    if test in statuses:
        return test
    if test.count("[") > test.count("]"):
        matches = [key for key in statuses if key.startswith(test)]
        if matches and len({statuses[key] in _PASSING for key in matches}) == 1:
            return matches[0]
    return None


def is_passing(test: str, statuses: StatusMap) -> bool:
    """PASSED or XFAIL."""
    key = _resolve(test, statuses)
    return key is not None and statuses[key] in _PASSING


def grade_tests(
    statuses: StatusMap,
    fail_to_pass: str | Sequence[str] | None,
    pass_to_pass: str | Sequence[str] | None,
    eval_type: str = "pass_and_fail",
) -> TestsReport:
    """Splits both lists into successes and failures against a status map. `fail_only`
    (SWE-bench's eval type for runners that report failures only): a test succeeds unless the
    map says, under its exact id, that it FAILED.

    Raises:
        InvalidInput: a list is neither a list of strings nor JSON text of one.
    """
    f2p = parse_test_list(fail_to_pass, "FAIL_TO_PASS")
    p2p = parse_test_list(pass_to_pass, "PASS_TO_PASS")
    if eval_type == "fail_only":
        f2p_ok = {t for t in f2p if statuses.get(t) is not TestStatus.FAILED}
        p2p_ok = {t for t in p2p if statuses.get(t) is not TestStatus.FAILED}
    else:
        f2p_ok = {t for t in f2p if is_passing(t, statuses)}
        p2p_ok = {t for t in p2p if is_passing(t, statuses) or _skipped(t, statuses)}
    return TestsReport(
        fail_to_pass=TestGroup(
            tuple(t for t in f2p if t in f2p_ok), tuple(t for t in f2p if t not in f2p_ok)
        ),
        pass_to_pass=TestGroup(
            tuple(t for t in p2p if t in p2p_ok), tuple(t for t in p2p if t not in p2p_ok)
        ),
    )


def _skipped(test: str, statuses: StatusMap) -> bool:
    key = _resolve(test, statuses)
    return key is not None and statuses[key] is TestStatus.SKIPPED


def universal_newlines(log: str) -> str:
    """`log` as Python's text mode reads it back from a file: `\\r\\n` and a lone `\\r` become
    `\\n`. SWE-bench grades the file it wrote, so a test's progress line `working...\\r ok` is
    two lines to it, and must be to us (its Django and pytest parsers match at line starts)."""
    return log.replace("\r\n", "\n").replace("\r", "\n")


def extract_test_output(log: str) -> str | None:
    """SWE-bench 5.0.2's slice: after the first start marker, up to the next start marker or
    the first end marker, whichever comes first; None without both markers.

    A test that prints a second start marker cannot append results of its own choosing.
    """
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return None
    return log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]


def parse_test_exit_code(log: str) -> int | None:
    """The exit code the eval script recorded after the end marker, if any."""
    match = _EXIT_CODE.search(log)
    return int(match.group(1)) if match else None


def eval_test_section(test_command: str) -> str:
    """Shell lines that run `test_command` between the markers and record its exit code.

    `test_command` is inserted as shell text (it may be a pipeline); quote its arguments.
    """
    return "\n".join(
        [
            f"echo {shlex.quote(START_TEST_OUTPUT)}",
            test_command,
            "MCP_EVALSERVER_TEST_EXIT_CODE=$?",
            f"echo {shlex.quote(END_TEST_OUTPUT)}",
            f'echo "{TEST_EXIT_CODE}: $MCP_EVALSERVER_TEST_EXIT_CODE"',
        ]
    )


def grade_log(
    log: str,
    *,
    parser: LogParser,
    fail_to_pass: str | Sequence[str] | None,
    pass_to_pass: str | Sequence[str] | None,
    patch_applied: bool = True,
    timed_out: bool = False,
    exit_status: int | None = None,
    eval_type: str = "pass_and_fail",
) -> Grade:
    """Grades one evaluation log (the eval script's output, nothing else); `eval_type` as
    `grade_tests` takes it.

    `patch_applied`, `timed_out` and `exit_status` are what the scorer saw itself; SWE-bench's
    marker lines for the same facts in the log are honoured too, so its logs grade as it would
    grade them. `exit_status` is the test command's exit status from the process (the eval
    script exits with it); when given, a `>>>>> Test Exit Code` line in the log is ignored, and
    a negative status (the script was killed by a signal) means the log cannot be trusted.

    Raises:
        InvalidInput: a test list is malformed.
    """
    f2p = parse_test_list(fail_to_pass, "FAIL_TO_PASS")
    p2p = parse_test_list(pass_to_pass, "PASS_TO_PASS")
    log = universal_newlines(log)
    exit_code = parse_test_exit_code(log) if exit_status is None else exit_status
    if not patch_applied or APPLY_PATCH_FAIL in log:
        return ungraded(EvalStatus.PATCH_APPLY_FAILED, "the patch did not apply", exit_code)
    if timed_out or TESTS_TIMEOUT in log:
        return ungraded(EvalStatus.TIMEOUT, "the tests ran past the time limit", exit_code)
    if RESET_FAILED in log or TESTS_ERROR in log:
        return ungraded(EvalStatus.TESTS_ERRORED, "the harness reported an error", exit_code)
    if exit_code is not None and exit_code < 0:
        # Only a signal stops the eval script before its last line; what it printed so far
        # (perhaps a forged end marker) does not describe a finished run.
        return ungraded(
            EvalStatus.TESTS_ERRORED,
            f"the eval script was killed by signal {-exit_code} before it finished",
            exit_code,
        )
    section = extract_test_output(log)
    if section is None:
        return ungraded(
            EvalStatus.TESTS_ERRORED,
            "no test-output section: the eval script stopped before or during the tests",
            exit_code,
        )
    # Sliced first (a marker split by an escape code is no marker, as in SWE-bench), then
    # read without terminal codes: a run coloured by `--color=yes` grades as a plain one.
    # Some runners print results outside the markers (stream interleaving), so fall back to
    # the whole log rather than calling a run with results empty.
    statuses = parser(strip_terminal_codes(section))
    if not statuses:
        log = strip_terminal_codes(log)
        statuses = parser(log)
    if not statuses and not _SUITE_RAN.search(log):
        return ungraded(
            EvalStatus.TESTS_ERRORED,
            "no test results in the log and no sign the suite ran",
            exit_code,
        )
    report = grade_tests(statuses, f2p, p2p, eval_type)
    failing = {TestStatus.FAILED, TestStatus.ERROR}
    if exit_code not in (None, 0) and statuses and not failing & set(statuses.values()):
        return Grade(
            status=EvalStatus.EXIT_CODE_MISMATCH,
            resolution=ResolutionStatus.NO,
            explanation=f"tests exited {exit_code} but no parsed test failed or errored",
            tests=report,
            statuses=statuses,
            exit_code=exit_code,
        )
    resolution = report.resolution
    return Grade(
        status=EvalStatus.GRADED,
        resolution=resolution,
        explanation=_explain(report),
        tests=report,
        statuses=statuses,
        exit_code=exit_code,
    )


def ungraded(status: EvalStatus, explanation: str, exit_code: int | None) -> Grade:
    """A grade for a run that could not be graded (`status` says why); never resolved."""
    return Grade(
        status=status, resolution=ResolutionStatus.NO, explanation=explanation, exit_code=exit_code
    )


def _explain(report: TestsReport) -> str:
    f2p, p2p = report.fail_to_pass, report.pass_to_pass
    text = (
        f"FAIL_TO_PASS {len(f2p.success)}/{len(f2p.success) + len(f2p.failure)} pass, "
        f"PASS_TO_PASS {len(p2p.success)}/{len(p2p.success) + len(p2p.failure)} pass"
    )
    failing = [*f2p.failure, *p2p.failure]
    if failing:
        text += f"; first failing: {failing[0]}"
    return text
