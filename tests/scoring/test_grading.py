"""Grading rules, the eval-script convention and the patch-apply chain.

Agreement with SWE-bench's own grader is in test_swebench_differential.py; here are the parts
SWE-bench has no counterpart for and the rules stated as examples.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.scoring.swebench.grading import (
    PATCH_RESET_COMMANDS,
    EvalStatus,
    ResolutionStatus,
    eval_test_section,
    extract_test_output,
    grade_log,
    grade_tests,
    parse_test_exit_code,
    parse_test_list,
    patch_already_applied_check,
    patch_apply_attempts,
)
from mcp_evalserver.scoring.swebench.logparsers import TestStatus, parse_pytest
from testsupport.repos import make_git_repo

P, F, S, E, X = (
    TestStatus.PASSED,
    TestStatus.FAILED,
    TestStatus.SKIPPED,
    TestStatus.ERROR,
    TestStatus.XFAIL,
)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('["a", "b::c[1 2]"]', ["a", "b::c[1 2]"]),
        (["a"], ["a"]),
        (("a", "b"), ["a", "b"]),
        ("[]", []),
        ("", []),
        (None, []),
    ],
)
def test_test_lists_are_accepted_as_json_text_or_lists(
    value: str | list[str] | tuple[str, ...] | None, expected: list[str]
) -> None:
    assert parse_test_list(value) == expected


@pytest.mark.parametrize("value", ["not json", '{"a": 1}', "[1, 2]", '"a"'])
def test_malformed_test_lists_are_rejected_with_the_field_name(value: str) -> None:
    with pytest.raises(InvalidInput, match="FAIL_TO_PASS"):
        parse_test_list(value, "FAIL_TO_PASS")


@pytest.mark.parametrize(
    ("statuses", "f2p", "p2p", "resolution"),
    [
        ({"a": P, "b": X, "c": P}, ["a", "b"], ["c"], ResolutionStatus.FULL),
        ({"a": P, "b": F, "c": P}, ["a", "b"], ["c"], ResolutionStatus.PARTIAL),
        ({"a": P, "b": F, "c": F}, ["a", "b"], ["c"], ResolutionStatus.NO),
        ({"a": F, "c": P}, ["a"], ["c"], ResolutionStatus.NO),
        ({"a": S, "c": P}, ["a"], ["c"], ResolutionStatus.NO),
        ({"a": P, "c": S}, ["a"], ["c"], ResolutionStatus.FULL),
        ({"a": P, "c": E}, ["a"], ["c"], ResolutionStatus.NO),
        ({"a": P}, ["a"], ["missing"], ResolutionStatus.NO),
        ({"c": P}, [], ["c"], ResolutionStatus.FULL),
        ({}, [], [], ResolutionStatus.FULL),
        ({"t[log(photon)]": P}, ["t[log(photon"], [], ResolutionStatus.FULL),
        ({"t[log(x)]": P, "t[log(y)]": F}, ["t[log("], [], ResolutionStatus.NO),
    ],
)
def test_resolution_follows_swebench_rules(
    statuses: dict[str, TestStatus], f2p: list[str], p2p: list[str], resolution: ResolutionStatus
) -> None:
    assert grade_tests(statuses, f2p, p2p).resolution is resolution


def test_eval_test_section_brackets_a_real_command_and_records_its_exit_code() -> None:
    command = "echo 'PASSED t::a'; (exit 3)"
    script = f"echo setup\n{eval_test_section(command)}\necho teardown\n"
    log = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert extract_test_output(log) == "\nPASSED t::a\n"
    assert parse_test_exit_code(log) == 3
    assert "setup" not in (extract_test_output(log) or "")


def test_extract_test_output_is_none_without_both_markers() -> None:
    assert extract_test_output(">>>>> Start Test Output\nPASSED a\n") is None


def wrap(output: str, exit_code: int = 0) -> str:
    """A log as `eval_test_section` prints it."""
    return (
        ">>>>> Start Test Output\n"
        f"{output}"
        ">>>>> End Test Output\n"
        f">>>>> Test Exit Code: {exit_code}\n"
    )


def test_the_scorers_own_facts_override_a_clean_log() -> None:
    log = wrap("PASSED a\n")
    applied = grade_log(log, parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[])
    assert applied.resolved
    not_applied = grade_log(
        log, parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[], patch_applied=False
    )
    assert (not_applied.status, not_applied.resolved) == (EvalStatus.PATCH_APPLY_FAILED, False)
    late = grade_log(log, parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[], timed_out=True)
    assert (late.status, late.resolved) == (EvalStatus.TIMEOUT, False)


@pytest.mark.parametrize(
    ("output", "flags", "outcome"),
    [
        ("PASSED a\n", {}, "resolved"),
        ("FAILED a\n", {}, "failed"),
        ("PASSED a\n", {"patch_applied": False}, "failed"),
        ("PASSED a\n", {"timed_out": True}, "failed"),
        ("Traceback: boom\n", {}, "error"),
    ],
)
def test_each_grade_maps_to_whose_failure_it_is(
    output: str, flags: dict[str, Any], outcome: str
) -> None:
    grade = grade_log(
        wrap(output), parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[], **flags
    )
    assert grade.outcome == outcome


def test_a_non_zero_exit_without_a_parsed_failure_is_flagged_not_resolved() -> None:
    grade = grade_log(
        wrap("PASSED a\nPASSED b\n", exit_code=2),
        parser=parse_pytest,
        fail_to_pass=["a"],
        pass_to_pass=["b"],
    )
    assert grade.status is EvalStatus.EXIT_CODE_MISMATCH
    assert not grade.resolved
    assert "exited 2" in grade.explanation
    assert grade.tests is not None
    assert grade.tests.resolution is ResolutionStatus.FULL


def test_a_log_without_results_or_sign_of_a_run_is_tests_errored() -> None:
    grade = grade_log(
        wrap("ImportError: cannot import name 'x'\n", exit_code=4),
        parser=parse_pytest,
        fail_to_pass="[]",
        pass_to_pass="[]",
    )
    assert grade.status is EvalStatus.TESTS_ERRORED
    assert not grade.resolved


def test_the_explanation_names_counts_and_the_first_failing_test() -> None:
    grade = grade_log(
        wrap("PASSED a\nFAILED b - boom\nPASSED c\n", exit_code=1),
        parser=parse_pytest,
        fail_to_pass=["a", "b"],
        pass_to_pass=["c"],
    )
    assert grade.resolution is ResolutionStatus.PARTIAL
    assert not grade.resolved
    assert grade.explanation == ("FAIL_TO_PASS 1/2 pass, PASS_TO_PASS 1/1 pass; first failing: b")


def test_patch_apply_chain_is_swebench_5_0_2s_git_apply_cmds() -> None:
    assert patch_apply_attempts("/tmp/p.diff") == [
        ["git", "apply", "--verbose", "/tmp/p.diff"],
        ["git", "apply", "--verbose", "--3way", "/tmp/p.diff"],
        ["git", "apply", "--verbose", "--reject", "/tmp/p.diff"],
        ["patch", "--batch", "--forward", "--fuzz=5", "-p1", "-i", "/tmp/p.diff"],
    ]


def git_repo(root: Path, content: str) -> Path:
    return make_git_repo(root / "repo", {"f.txt": content})


def run(command: list[str] | tuple[str, ...], cwd: Path) -> int:
    return subprocess.run(command, cwd=cwd, capture_output=True).returncode


def test_patch_apply_chain_applies_a_patch_every_git_apply_refuses(tmp_path: Path) -> None:
    # One context line differs from the file: every `git apply` refuses, fuzzy `patch` applies.
    repo = git_repo(tmp_path, "".join(f"line {i}\n" for i in range(1, 21)))
    patch = tmp_path / "p.diff"
    patch.write_text(
        "--- a/f.txt\n+++ b/f.txt\n@@ -10,3 +10,3 @@\n line 10\n-line 11\n+LINE ELEVEN\n line 12x\n"
    )
    exits = []
    for attempt, command in enumerate(patch_apply_attempts(str(patch))):
        if attempt:
            for reset in PATCH_RESET_COMMANDS:
                assert run(reset, repo) == 0
        exits.append(run(command, repo))
        if exits[-1] == 0:
            break
    assert len(exits) == 4, exits
    assert 0 not in exits[:3], exits
    assert "LINE ELEVEN" in (repo / "f.txt").read_text()
    assert not list(repo.glob("*.rej")), "the reset should have removed --reject's leftovers"


def test_already_applied_check_tells_an_applied_patch_from_a_pending_one(tmp_path: Path) -> None:
    repo = git_repo(tmp_path, "a\nb\nc\n")
    patch = tmp_path / "p.diff"
    patch.write_text("--- a/f.txt\n+++ b/f.txt\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")
    check = patch_already_applied_check(str(patch))
    assert run(check, repo) != 0
    assert run(patch_apply_attempts(str(patch))[0], repo) == 0
    assert run(check, repo) == 0


def test_the_exit_status_from_the_process_overrides_every_exit_code_line_in_the_log() -> None:
    forged = wrap("PASSED a\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n", exit_code=1)
    believed = grade_log(forged, parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[])
    assert believed.resolved, "SWE-bench's rule, for logs graded offline: the first line wins"
    grade = grade_log(
        forged, parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[], exit_status=1
    )
    assert (grade.status, grade.exit_code) == (EvalStatus.EXIT_CODE_MISMATCH, 1)
    killed = grade_log(
        wrap("PASSED a\n"), parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[], exit_status=-9
    )
    assert killed.status is EvalStatus.TESTS_ERRORED
    assert "signal 9" in killed.explanation


def test_the_test_section_ends_at_the_next_start_marker_as_in_swebench() -> None:
    log = wrap("FAILED a\n>>>>> Start Test Output\nPASSED a\n", exit_code=1)
    assert extract_test_output(log) == "\nFAILED a\n"
    grade = grade_log(log, parser=parse_pytest, fail_to_pass=["a"], pass_to_pass=[])
    assert grade.statuses == {"a": TestStatus.FAILED}
