"""A checkpoint of a workspace whose commands run on copies its upper while they write
(layers.LayerStack.checkpoint with keep_upper): entries that go, or change kind, meanwhile
must not fail the checkpoint, and the copy holds each entry as it was at some moment.

The writer here is a thread that does what the busy workspace of test_forks did when a
checkpoint failed with ENOENT (`date > c.tmp; mv c.tmp clock.txt` in a loop), plus a
directory made and removed and a name that is now a file, now a directory.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mcp_evalserver.sandbox.supervisor.layers import copy_tree

COPIES = 300


@pytest.fixture
def busy_tree(tmp_path: Path) -> Iterator[Path]:
    """A directory that a thread keeps changing until the test ends."""
    tree = tmp_path / "upper"
    (tree / "sub").mkdir(parents=True)
    (tree / "kept.txt").write_text("kept\n")
    for n in range(50):  # enough entries that the copy is still listing when one goes
        (tree / "sub" / f"f{n}").write_text(str(n))
    stop, started = threading.Event(), threading.Event()

    def write_on() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            (tree / "c.tmp").write_text(str(n))
            os.replace(tree / "c.tmp", tree / "clock.txt")
            started.set()
            (tree / "d").mkdir()
            (tree / "d" / "x").write_text("x")
            (tree / "d" / "x").unlink()
            (tree / "d").rmdir()
            (tree / "sub" / "flip").write_text("file")
            (tree / "sub" / "flip").unlink()
            (tree / "sub" / "flip").mkdir()
            (tree / "sub" / "flip").rmdir()

    writer = threading.Thread(target=write_on, daemon=True)
    writer.start()
    try:
        assert started.wait(30), "the writer never wrote"
        yield tree
    finally:
        stop.set()
        writer.join(timeout=30)


def test_a_tree_copied_while_it_changes_is_copied_without_what_went_meanwhile(
    busy_tree: Path, tmp_path: Path
) -> None:
    for n in range(COPIES):
        copy = tmp_path / f"copy{n}"
        copy_tree(str(busy_tree), str(copy))  # raised FileNotFoundError before
        assert (copy / "kept.txt").read_text() == "kept\n"
        assert sorted(p.name for p in (copy / "sub").iterdir() if p.name != "flip") == sorted(
            f"f{i}" for i in range(50)
        )
        # A file replaced whole (rename) is copied whole; one being written, as it was then.
        assert (copy / "clock.txt").read_text().isdigit()
        if (copy / "d").exists():
            assert {p.name for p in (copy / "d").iterdir()} <= {"x"}
