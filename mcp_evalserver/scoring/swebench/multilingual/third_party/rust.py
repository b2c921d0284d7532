"""SWE-bench 5.0.2's log parsers for Rust test runners, ported as they are
(`swebench/harness/log_parsers/rust.py`, MIT licence, (c) the SWE-bench authors): only the
imports changed, so a log grades exactly as SWE-bench grades it (tests/scoring checks each
against swebench's own).
"""

from __future__ import annotations

import re

from mcp_evalserver.scoring.swebench.multilingual.third_party._shared import TestSpec, TestStatus


def parse_log_cargo(log: str, test_spec: TestSpec) -> dict[str, str]:
    """
    Args:
        log (str): log content
    Returns:
        dict: test case to test status mapping
    """
    test_status_map = {}

    pattern = r"^test\s+(\S+)\s+\.\.\.\s+(\w+)$"

    for line in log.split("\n"):
        match = re.match(pattern, line.strip())
        if match:
            test_name, outcome = match.groups()
            if outcome == "ok":
                test_status_map[test_name] = TestStatus.PASSED.value
            elif outcome == "FAILED":
                test_status_map[test_name] = TestStatus.FAILED.value

    return test_status_map


MAP_REPO_TO_PARSER_RUST = {
    "burntsushi/ripgrep": parse_log_cargo,
    "sharkdp/bat": parse_log_cargo,
    "astral-sh/ruff": parse_log_cargo,
    "tokio-rs/tokio": parse_log_cargo,
    "uutils/coreutils": parse_log_cargo,
    "nushell/nushell": parse_log_cargo,
    "tokio-rs/axum": parse_log_cargo,
}
