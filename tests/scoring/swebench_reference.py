"""SWE-bench's own functions, the reference the compatibility and differential tests compare with.

Importing this module (from any test folder) skips the importing test module when the pinned
`swebench` package is missing (fails it under CI, where the test extra is always installed).
"""

from __future__ import annotations

import os

import pytest

try:
    from swebench.harness import grading as swe_grading
    from swebench.harness import run_evaluation as swe_run
    from swebench.harness.constants import LOG_REPORT, LOG_TEST_OUTPUT, RUN_EVALUATION_LOG_DIR
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.reporting import make_run_report
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS
    from swebench.harness.utils import get_predictions_from_file, make_test_spec
    from swebench.task import repo as swe_repo
    from swebench.task.repo import load_task_repo
    from swebench.types import TestSpec as SwebenchTestSpec
    from swebench.utils import ansi_escape
except ImportError as error:  # pragma: no cover - depends on the environment
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(
        f"swebench is not importable ({error}); install the test extra: pip install -e '.[test]'",
        allow_module_level=True,
    )

__all__ = [
    "GIT_APPLY_CMDS",
    "LOG_REPORT",
    "LOG_TEST_OUTPUT",
    "PARSER_REGISTRY",
    "RUN_EVALUATION_LOG_DIR",
    "SwebenchTestSpec",
    "ansi_escape",
    "get_predictions_from_file",
    "load_task_repo",
    "make_run_report",
    "make_test_spec",
    "swe_grading",
    "swe_repo",
    "swe_run",
]
