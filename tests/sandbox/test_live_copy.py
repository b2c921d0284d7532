"""A checkpoint of a workspace whose commands run on copies its upper while they write
(layers.LayerStack.checkpoint with keep_upper): entries that go, or change kind, meanwhile
must not fail the checkpoint, and the copy holds each entry as it was at some moment.

The writer here is a thread that does what the busy workspace of test_forks did when a
checkpoint failed with ENOENT (`date > c.tmp; mv c.tmp clock.txt` in a loop), plus a
directory made and removed and a name that is now a file, now a directory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from mcp_evalserver.sandbox.supervisor.layers import copy_tree

COPIES = 300


@contextlib.contextmanager
def _changing(change: Callable[[], None]) -> Iterator[None]:
    """`change()` over and over in a thread of its own (a workspace's processes writing on),
    from its first whole pass until the block ends."""
    stop, started = threading.Event(), threading.Event()

    def keep_changing() -> None:
        while not stop.is_set():
            change()
            started.set()

    changer = threading.Thread(target=keep_changing, daemon=True)
    changer.start()
    try:
        assert started.wait(30), "the tree never changed"
        yield
    finally:
        stop.set()
        changer.join(timeout=30)


@pytest.fixture
def busy_tree(tmp_path: Path) -> Iterator[Path]:
    """A directory that a thread keeps changing until the test ends."""
    tree = tmp_path / "upper"
    (tree / "sub").mkdir(parents=True)
    (tree / "kept.txt").write_text("kept\n")
    for n in range(50):  # enough entries that the copy is still listing when one goes
        (tree / "sub" / f"f{n}").write_text(str(n))

    def write_on() -> None:
        (tree / "c.tmp").write_text(str(time.monotonic_ns()))
        os.replace(tree / "c.tmp", tree / "clock.txt")
        (tree / "d").mkdir()
        (tree / "d" / "x").write_text("x")
        (tree / "d" / "x").unlink()
        (tree / "d").rmdir()
        (tree / "sub" / "flip").write_text("file")
        (tree / "sub" / "flip").unlink()
        (tree / "sub" / "flip").mkdir()
        (tree / "sub" / "flip").rmdir()

    with _changing(write_on):
        yield tree


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


SECRET = "host secret\n"


@contextlib.contextmanager
def _alarm_after(seconds: int) -> Iterator[None]:
    """Raises TimeoutError in this (the main) thread after `seconds`, even in a blocking open
    (a FIFO's): the signal's handler raises, so the system call is not retried."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"the copy took over {seconds} s: blocked on a FIFO?")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def swapping_tree(tmp_path: Path) -> Iterator[Path]:
    """A tree whose owner (a cheating agent's processes, here a thread) keeps swapping a
    directory for a symlink to a directory outside it, a file for a symlink to a file outside
    it, and a file for a FIFO, each back again, while a checkpoint copies the tree."""
    outside = tmp_path / "host"
    outside.mkdir()
    (outside / "shadow").write_text(SECRET)
    tree = tmp_path / "upper"
    (tree / "dir").mkdir(parents=True)
    for n in range(20):
        (tree / "dir" / f"f{n}").write_text("mine\n")
    (tree / "file").write_text("mine\n")

    def swap() -> None:
        os.rename(tree / "dir", tree / "dir.real")
        os.symlink(outside, tree / "dir.link")
        os.rename(tree / "dir.link", tree / "dir")
        (tree / "file.link").symlink_to(outside / "shadow")
        os.rename(tree / "file.link", tree / "file")
        os.unlink(tree / "dir")
        os.rename(tree / "dir.real", tree / "dir")
        os.mkfifo(tree / "file.fifo")
        os.rename(tree / "file.fifo", tree / "file")
        (tree / "file.new").write_text("mine\n")
        os.rename(tree / "file.new", tree / "file")

    with _changing(swap):
        yield tree


def test_a_copy_of_a_tree_whose_owner_swaps_in_symlinks_and_fifos_never_leaves_it_or_hangs(
    swapping_tree: Path, tmp_path: Path
) -> None:
    # The attack: the supervisor copies a busy workspace's upper as root, on the host; a
    # symlink swapped in for a directory between its listing and its walk, or for a file
    # between its check and its read, would copy the host's files into the checkpoint, which
    # the agent then reads. A FIFO swapped in would hang the copy (and the supervisor).
    with _alarm_after(120):
        for n in range(COPIES):
            copy = tmp_path / f"copy{n}"
            copy_tree(str(swapping_tree), str(copy))
            copied = [p for p in copy.rglob("*") if p.is_file() and not p.is_symlink()]
            leaked = [p for p in copied if p.read_text() == SECRET]
            assert not leaked, f"copy {n} holds the host's file: {leaked}"
            for link in (p for p in copy.rglob("*") if p.is_symlink()):
                assert os.readlink(link).startswith(str(tmp_path / "host"))  # kept as a link
