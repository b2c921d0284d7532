"""Terminal codes out of graded text: what goes, what stays, and that no line can be joined,
split, hidden or made up by it (the tests print the bytes; the grader must not be steered)."""

from __future__ import annotations

import random

from mcp_evalserver.scoring.swebench.grading import Grade, grade_log
from mcp_evalserver.scoring.swebench.logparsers import get_parser
from mcp_evalserver.scoring.swebench.terminal_codes import strip_terminal_codes
from tests.scoring.swebench_reference import ansi_escape

F2P = "tests/test_ops.py::test_mul"
# What pytest 8 prints under --color=yes (seen from a real run).
PYTEST_COLOURS = [
    "\x1b[0m",
    "\x1b[1m",
    "\x1b[31m",
    "\x1b[32m",
    "\x1b[33m",
    "\x1b[36m",
    "\x1b[1;31m",
]
PIECES = [
    *PYTEST_COLOURS,
    "\x1b[2K", "\x1b[1A", "\x1b[?25l", "\x1b[38;5;208m", "\x1b(B", "\x1b7", "\x1bc",
    "\x1b]0;title\x07", "\x1b]8;;http://x\x1b\\", "\x1bP1$r\x1b\\", "\x1b]0;open", "\x1b[", "\x1b",
    "\x07", "\x1b\\", "\n", "\n", "\r", "PASSED", "FAILED", " ", " ", "a::b", "[1m", "\t",
]  # fmt: skip


def _log(section: str) -> str:
    return f">>>>> Start Test Output\n{section}>>>>> End Test Output\n"


def _grade(section: str) -> Grade:
    """`section` graded as the test output of a task whose FAIL_TO_PASS is F2P alone."""
    return grade_log(
        _log(section), parser=get_parser("pytest"), fail_to_pass=[F2P], pass_to_pass=[]
    )


def _assert_the_real_failure_stands(section: str) -> None:
    grade = _grade(section)
    assert not grade.resolved
    assert grade.tests is not None
    assert grade.tests.fail_to_pass.failure == (F2P,)


def test_pytests_colours_go_as_swebenchs_own_ansi_escape_removes_them() -> None:
    line = "\x1b[32mPASSED\x1b[0m tests/test_ops.py::\x1b[1mtest_mul\x1b[0m"
    assert strip_terminal_codes(line) == f"PASSED {F2P}"
    assert strip_terminal_codes(line) == ansi_escape(line)


def test_every_csi_sequence_goes_as_swebenchs_ansi_escape_removes_it() -> None:
    rng = random.Random("csi")
    csi = [p for p in PIECES if p.startswith("\x1b[") and len(p) > 2]
    words = [*csi, "PASSED ", "x", "\n", "\t", "[1m"]
    for _ in range(500):
        text = "".join(rng.choice(words) for _ in range(rng.randint(0, 12)))
        assert strip_terminal_codes(text) == ansi_escape(text), repr(text)


def test_no_sequence_joins_splits_or_reaches_across_lines() -> None:
    rng = random.Random("lines")
    for _ in range(2000):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 20)))
        stripped = strip_terminal_codes(text)
        assert stripped.count("\n") == text.count("\n"), repr(text)
        # Each line is stripped as if it were alone: nothing carries from one to the next.
        assert stripped.split("\n") == [strip_terminal_codes(x) for x in text.split("\n")]


def test_an_escape_string_opened_before_the_real_failure_and_closed_after_hides_nothing() -> None:
    # The tests open an OSC string (a window title) before the runner's summary and close it
    # after: a stripper that let it span lines would swallow the real FAILED line, and the
    # forged PASSED line before it would stand.
    section = (
        f"PASSED {F2P}\n\x1b]0;\n"
        f"\x1b[31mFAILED\x1b[0m tests/test_ops.py::\x1b[1mtest_mul\x1b[0m - assert 6 == 5\n"
        "\x07\n"
    )
    _assert_the_real_failure_stands(section)


def test_an_end_marker_split_by_an_escape_code_cannot_cut_the_real_failures_off() -> None:
    # Markers are found before the codes go, as SWE-bench finds them: stripping first would
    # make this an end marker, and the section would end before the real FAILED line.
    section = (
        f"PASSED {F2P}\n>>>>> End\x1b[0m Test Output\n"
        f"\x1b[31mFAILED\x1b[0m tests/test_ops.py::\x1b[1mtest_mul\x1b[0m\n"
    )
    _assert_the_real_failure_stands(section)


def test_a_forged_line_in_codes_says_no_more_than_the_same_line_without_them() -> None:
    # Codes a terminal would not show (concealed text, a line erased and rewritten) are gone;
    # what is left is the plain line, which the tests could have printed as it is.
    for decorated in (f"\x1b[8mPASSED {F2P}\x1b[0m", f"\x1b[1A\x1b[2KPASSED {F2P}"):
        plain, coded = _grade(f"PASSED {F2P}\n"), _grade(f"{decorated}\n")
        assert (coded.status, coded.resolved, coded.statuses) == (
            plain.status,
            plain.resolved,
            plain.statuses,
        )


def test_an_unfinished_sequence_stays_and_the_line_it_starts_is_no_result() -> None:
    assert strip_terminal_codes("\x1b") == "\x1b"
    assert strip_terminal_codes(f"\x1b]0;PASSED {F2P}") == f"0;PASSED {F2P}"
    grade = _grade(f"\x1b]0;PASSED {F2P}\n1 passed\n")
    assert not grade.resolved
