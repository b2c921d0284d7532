"""Terminal control sequences out of a test log, so a coloured run grades as a plain one.

pytest given `--color=yes` (on the eval script's command line, or forced by a conftest.py,
either of which beats `PYTEST_ADDOPTS=--color=no`) prints `\\x1b[32mPASSED\\x1b[0m
path::\\x1b[1mtest\\x1b[0m`, a line none of SWE-bench's Python parsers read (only `pytest_v2`
drops SGR codes, `\\[(\\d+)m`, and control characters; its JavaScript parsers use
`swebench.utils.ansi_escape`). Graded text has its sequences removed first.

Why this cannot forge or hide a line (the submission is an adversary, docs/design/isolation.md):

- No sequence spans a line break: every byte class below excludes `\\n`, so stripping never
  joins two lines, never splits one, and cannot swallow the runner's own lines between an
  opener a test prints and a terminator it prints later.
- What is removed is a complete escape sequence (ECMA-48: CSI, OSC/DCS/SOS/PM/APC strings
  ended on the same line, other ESC sequences); what is not recognised stays, and a stray
  byte at the start of a line only stops that line from parsing.
- A line that parses after stripping is text the submission could have printed without any
  escape code, so stripping gives its code no power it lacks on plain text (where a forged
  `PASSED` line is SWE-bench's own weakness; strict mode grades from a report instead).
"""

from __future__ import annotations

import re

_TERMINAL_CODES = re.compile(
    # OSC, DCS, SOS, PM, APC strings, ended by BEL or ST on the same line.
    r"\x1b[\]PX^_][^\x07\x1b\n]*(?:\x07|\x1b\\)"
    # CSI: parameter bytes, intermediate bytes, one final byte (SWE-bench's `ansi_escape`).
    r"|\x1b\[[0-?]*[ -/]*[@-~]"
    # Every other escape: intermediate bytes and one final byte (`ESC ( B`, `ESC 7`, `ESC ]`
    # of a string left open: its text stays, as a terminal that gave up on it would show).
    r"|\x1b[ -/]*[0-~]"
)


def strip_terminal_codes(text: str) -> str:
    """`text` without terminal escape sequences (see the module docstring for what is
    removed, and why no line can be joined, split, hidden or made up by it)."""
    if "\x1b" not in text:
        return text
    return _TERMINAL_CODES.sub("", text)
