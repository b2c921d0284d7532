"""Answer matchers: tables of answers that must and must not match, with their reasons."""

from __future__ import annotations

from typing import Any, Literal

import pytest

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.spec.matchers import match_exact, match_json, match_regex, parse_json


@pytest.mark.parametrize(
    ("answer", "expected", "case_sensitive", "matched"),
    [
        ("42", "42", True, True),
        ("  42\n", "42", True, True),
        ("hello   world", "hello world", True, True),
        ("hello\t\n world", " hello world ", True, True),
        ("Hello World", "hello world", True, False),
        ("Hello World", "hello world", False, True),
        ("STRASSE", "straße", False, True),
        ("cafe\u0301", "caf\u00e9", True, True),
        ("42.0", "42", True, False),
        ("helloworld", "hello world", True, False),
        ("", "", True, True),
    ],
)
def test_exact_matches_after_stripping_collapsing_whitespace_and_optional_case_folding(
    answer: str, expected: str, case_sensitive: bool, matched: bool
) -> None:
    verdict = match_exact(answer, expected, case_sensitive=case_sensitive)
    assert verdict.matched is matched
    assert verdict.explanation


def test_exact_mismatch_explanation_shows_both_normalised_sides() -> None:
    verdict = match_exact("  Paris ", "London")
    assert verdict.explanation == "expected 'London', got 'Paris'"


def test_exact_mismatch_explanation_shortens_long_answers() -> None:
    verdict = match_exact("x" * 500, "y")
    assert len(verdict.explanation) < 120
    assert "..." in verdict.explanation


RegexMode = Literal["fullmatch", "search"]


@pytest.mark.parametrize(
    ("answer", "pattern", "mode", "ignore_case", "matched"),
    [
        ("42", r"\d+", "fullmatch", False, True),
        ("  42\n", r"\d+", "fullmatch", False, True),
        ("the answer is 42", r"\d+", "fullmatch", False, False),
        ("the answer is 42", r"\d+", "search", False, True),
        ("YES", r"yes", "fullmatch", False, False),
        ("YES", r"yes", "fullmatch", True, True),
        ("line one\nline two", r"line one.line two", "fullmatch", False, False),
        ("", r"", "fullmatch", False, True),
    ],
)
def test_regex_matches_the_stripped_answer_in_full_or_anywhere(
    answer: str, pattern: str, mode: RegexMode, ignore_case: bool, matched: bool
) -> None:
    verdict = match_regex(answer, pattern, mode=mode, ignore_case=ignore_case)
    assert verdict.matched is matched


def test_regex_dotall_lets_the_dot_cross_lines() -> None:
    assert match_regex("line one\nline two", r"line one.line two", dotall=True).matched


def test_regex_explanation_names_the_matched_text() -> None:
    verdict = match_regex("result: 17 apples", r"\d+", mode="search")
    assert verdict.explanation == r"pattern '\\d+' matched '17'"


def test_an_invalid_regex_is_a_configuration_error_not_a_verdict() -> None:
    with pytest.raises(InvalidInput, match="invalid regex"):
        match_regex("anything", "(unclosed")


@pytest.mark.parametrize(
    ("answer", "expected", "subset", "matched", "reason"),
    [
        ('{"a": 1, "b": [1, 2]}', {"b": [1, 2], "a": 1}, False, True, ""),
        ('{"a": 1.0}', {"a": 1}, False, True, ""),
        ("1e2", 100, False, True, ""),
        ("100000000000000000000", 1e20, False, True, ""),
        ('{"a": true}', {"a": 1}, False, False, "$.a: expected number 1, got boolean true"),
        ("0", False, False, False, "$: expected boolean false, got number 0"),
        ("[2, 1]", [1, 2], False, False, "$[0]: expected 1, got 2"),
        ("[1, 2, 3]", [1, 2], False, False, "$: expected 2 items, got 3"),
        ('{"a": 1, "b": 2}', {"a": 1}, False, False, "$: unexpected key 'b'"),
        ('{"a": 1, "b": 2}', {"a": 1}, True, True, ""),
        ('{"a": {"x": 1, "y": 2}}', {"a": {"x": 1}}, True, True, ""),
        ('{"a": {"x": 2, "y": 2}}', {"a": {"x": 1}}, True, False, "$.a.x: expected 1, got 2"),
        ('{"b": 2}', {"a": 1}, True, False, "$: missing key 'a'"),
        ('[{"a": 1, "z": 0}]', [{"a": 1}], True, True, ""),
        ('"1"', 1, False, False, '$: expected number 1, got string "1"'),
        ("null", None, False, True, ""),
        ('```json\n{"a": 1}\n```', {"a": 1}, False, True, ""),
        ("```\n[1]\n```", [1], False, True, ""),
        ("  [1]  ", (1,), False, True, ""),
        ("NaN", 0, False, False, "answer is not valid JSON"),
        ("{'a': 1}", {"a": 1}, False, False, "answer is not valid JSON"),
        ("", {}, False, False, "answer is not valid JSON"),
    ],
)
def test_json_compares_structurally_with_numbers_by_value_and_optional_key_subsets(
    answer: str, expected: Any, subset: bool, matched: bool, reason: str
) -> None:
    verdict = match_json(answer, expected, subset=subset)
    assert verdict.matched is matched, verdict.explanation
    assert reason in verdict.explanation


def test_parse_json_reads_expected_values_written_as_json_text() -> None:
    assert match_json('{"a": [1, 2]}', parse_json('{"a": [1.0, 2]}')).matched


def test_json_rejects_expected_values_json_cannot_express() -> None:
    with pytest.raises(InvalidInput, match="set"):
        match_json("[1]", {1})
