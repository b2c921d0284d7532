"""SWE-bench 5.0.2's log parsers for Ruby test runners, ported as they are
(`swebench/harness/log_parsers/ruby.py`, MIT licence, (c) the SWE-bench authors): only the
imports changed, so a log grades exactly as SWE-bench grades it (tests/scoring checks each
against swebench's own).
"""

from __future__ import annotations

import re

from mcp_evalserver.scoring.swebench.multilingual.third_party._shared import TestSpec, TestStatus


def parse_log_minitest(log: str, test_spec: TestSpec) -> dict[str, str]:
    """
    Args:
        log (str): log content
    Returns:
        dict: test case to test status mapping
    """
    test_status_map = {}

    pattern = r"^(.+)\. .*=.*(\.|F|E).*$"

    for line in log.split("\n"):
        match = re.match(pattern, line.strip())
        if match:
            test_name, outcome = match.groups()
            if outcome == ".":
                test_status_map[test_name] = TestStatus.PASSED.value
            elif outcome in ["F", "E"]:
                test_status_map[test_name] = TestStatus.FAILED.value

    return test_status_map


def parse_log_cucumber(log: str, test_spec: TestSpec) -> dict[str, str]:
    """
    Assumes --format progress is used.
    """
    test_status_map = {}

    pattern = r"^(.*) \.+(\.|F)"

    for line in log.split("\n"):
        match = re.match(pattern, line.strip())
        if match:
            test_name, outcome = match.groups()
            if outcome == ".":
                test_status_map[test_name] = TestStatus.PASSED.value
            elif outcome == "F":
                test_status_map[test_name] = TestStatus.FAILED.value

    return test_status_map


def parse_log_ruby_unit(log: str, test_spec: TestSpec) -> dict[str, str]:
    test_status_map = {}

    pattern = r"^\s*(?:test: )?(.+):\s+(\.|E\b|F\b|O\b)"

    for line in log.split("\n"):
        match = re.match(pattern, line.strip())
        if match:
            test_name, outcome = match.groups()
            if outcome == ".":
                test_status_map[test_name] = TestStatus.PASSED.value
            elif outcome in ["E", "F"]:
                test_status_map[test_name] = TestStatus.FAILED.value
            elif outcome == "O":
                test_status_map[test_name] = TestStatus.SKIPPED.value

    return test_status_map


def parse_log_rspec_transformed_json(log: str, test_spec: TestSpec) -> dict[str, str]:
    test_status_map = {}

    pattern = r"(.+) - (passed|failed)"

    for line in log.split("\n"):
        match = re.match(pattern, line.strip())
        if match:
            test_name, outcome = match.groups()
            if outcome == "passed":
                test_status_map[test_name] = TestStatus.PASSED.value
            elif outcome == "failed":
                test_status_map[test_name] = TestStatus.FAILED.value
            elif outcome == "pending":
                test_status_map[test_name] = TestStatus.SKIPPED.value
            else:
                raise ValueError(f"Unknown outcome: {outcome}")

    return test_status_map


def parse_log_jekyll(log: str, test_spec: TestSpec) -> dict[str, str]:
    """
    Different jekyll instances use different test runners and log formats.
    This function selects the appropriate log parser based on the instance id.
    """
    pr_number = test_spec.instance_id.split("-")[1]

    if pr_number in ["9141", "8047", "8167"]:
        return parse_log_minitest(log, test_spec)
    elif pr_number in ["8761", "8771"]:
        return parse_log_cucumber(log, test_spec)
    else:
        raise ValueError(f"Unknown instance id: {test_spec.instance_id}")


MAP_REPO_TO_PARSER_RUBY = {
    "jekyll/jekyll": parse_log_jekyll,
    "fluent/fluentd": parse_log_ruby_unit,
    "fastlane/fastlane": parse_log_rspec_transformed_json,
    "jordansissel/fpm": parse_log_rspec_transformed_json,
    "faker-ruby/faker": parse_log_ruby_unit,
    "rubocop/rubocop": parse_log_rspec_transformed_json,
}
