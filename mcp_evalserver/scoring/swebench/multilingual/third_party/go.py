"""SWE-bench 5.0.2's log parsers for Go test runners, ported as they are
(`swebench/harness/log_parsers/go.py`, MIT licence, (c) the SWE-bench authors): only the
imports changed, so a log grades exactly as SWE-bench grades it (tests/scoring checks each
against swebench's own).
"""

from __future__ import annotations

import re

from mcp_evalserver.scoring.swebench.multilingual.third_party._shared import TestSpec, TestStatus


def parse_log_gotest(log: str, test_spec: TestSpec) -> dict[str, str]:
    """
    Parser for test logs generated with 'go test'

    Args:
        log (str): log content
        test_spec (TestSpec): test spec (unused)
    Returns:
        dict: test case to test status mapping
    """
    test_status_map = {}

    # Pattern to match test result lines
    pattern = r"^--- (PASS|FAIL|SKIP): (.+) \((.+)\)$"

    for line in log.split("\n"):
        match = re.match(pattern, line.strip())
        if match:
            status, test_name, _duration = match.groups()
            if status == "PASS":
                test_status_map[test_name] = TestStatus.PASSED.value
            elif status == "FAIL":
                test_status_map[test_name] = TestStatus.FAILED.value
            elif status == "SKIP":
                test_status_map[test_name] = TestStatus.SKIPPED.value

    return test_status_map


MAP_REPO_TO_PARSER_GO = {
    "caddyserver/caddy": parse_log_gotest,
    "hashicorp/terraform": parse_log_gotest,
    "prometheus/prometheus": parse_log_gotest,
    "gohugoio/hugo": parse_log_gotest,
    "gin-gonic/gin": parse_log_gotest,
}
