"""What the ported parsers import from `swebench` itself: its status words, the fields of its
TestSpec that they read, and its ANSI stripper, each as swebench 5.0.2 defines it."""

from __future__ import annotations

import re
from enum import Enum
from typing import Protocol


class TestStatus(Enum):
    """`swebench.harness.constants.TestStatus`: the parsers store `.value`."""

    __test__ = False  # not a pytest test class, despite the name

    FAILED = "FAILED"
    PASSED = "PASSED"
    SKIPPED = "SKIPPED"
    ERROR = "ERROR"
    XFAIL = "XFAIL"


class TestSpec(Protocol):
    """The fields of swebench's TestSpec a parser reads: a few choose their format by the
    instance (Next.js, Lighthouse, Ruby's Jekyll and Faker)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def version(self) -> str: ...


_ANSI = re.compile(r"\x1B(?:[@-Z\\-_]|\[[0-?]*[ -/]*[@-~])")


def ansi_escape(text: str) -> str:
    """`swebench.utils.ansi_escape`."""
    return _ANSI.sub("", text)
