"""Files as the file tools page and show them (agents/file_text.py), without a workspace.

The edits themselves run against real workspaces in tests/server/test_toolbox.py.
"""

from __future__ import annotations

import pytest

from mcp_evalserver.agents.file_text import (
    numbered,
    outside_workdir,
    read_lines,
    split_lines,
)
from mcp_evalserver.errors import InvalidInput


def test_only_a_newline_ends_a_line_as_cat_n_counts_them() -> None:
    assert split_lines("a\fb\r\nc\x85d\n\ne") == ["a\fb\r\n", "c\x85d\n", "\n", "e"]
    assert split_lines("") == []
    assert numbered(["a\r\n", "b\n"], 9) == "     9\ta\n    10\tb"


def test_a_read_stops_before_its_byte_budget_but_shows_one_line_however_long() -> None:
    data = b"x" * 50 + b"\nshort\n"
    first = read_lines(data, "f", 1, 10, max_bytes=10)
    assert (first.text, first.count, first.next_offset) == ("x" * 50 + "\n", 1, 2)
    rest = read_lines(data, "f", 2, 10, max_bytes=10)
    assert (rest.text, rest.next_offset, rest.total) == ("short\n", None, 2)
    numbered_cost = read_lines(b"a\nb\nc\n", "f", 1, 10, max_bytes=16, per_line=7)
    assert numbered_cost.count == 1  # 2 bytes of line + 7 of number: a second would pass 16


def test_binary_text_and_an_offset_past_the_end_are_refused_with_the_next_step() -> None:
    with pytest.raises(InvalidInput, match=r"f is a binary file \(3 bytes; not UTF-8 text\)"):
        read_lines(b"\xff\xfe\x00", "f", 1, 10, max_bytes=100)
    with pytest.raises(InvalidInput, match=r"read from offset=1"):
        read_lines(b"a\n", "f", 5, 10, max_bytes=100)
    assert read_lines(b"", "f", 1, 10, max_bytes=100).shown("f") == "(f is empty)"


def test_only_relative_paths_that_climb_out_of_the_workdir_are_caught() -> None:
    assert outside_workdir("../outside.txt", "/testbed") == "/outside.txt"
    assert outside_workdir("a/../../b", "/w/repo") == "/w/b"
    assert outside_workdir("a/../b", "/testbed") is None
    assert outside_workdir("/etc/hosts", "/testbed") is None  # an absolute path is as meant
    assert outside_workdir("../x", None) is None
