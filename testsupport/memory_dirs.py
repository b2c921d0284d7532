"""Directories in memory (tmpfs) for tests whose subject is not the disk.

A ledger fsyncs every group of records it appends. On this VM's disk an fsync takes
milliseconds, so a test that runs thousands of scripted trajectories spends most of its time
waiting for the disk (adaptive sampling over eight seeds: 8 s of CPU in a 42 s run). On tmpfs
the same fsync calls run and return at once; what a test proves about replay, resume or crashes
does not depend on the platter (a killed process's writes survive it in the page cache either
way).

Not for sandbox instances: a local view refuses an instance path under /dev, where the usual
tmpfs, /dev/shm, lives.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The tmpfs every Linux machine mounts; used only where /proc/mounts says it is one.
SHARED_MEMORY = Path("/dev/shm")


def is_tmpfs(path: Path) -> bool:
    """Whether `path` is the mount point of a tmpfs (by /proc/mounts)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    return any(
        fields[1] == str(path) and fields[2] == "tmpfs"
        for fields in (line.split() for line in mounts)
        if len(fields) >= 3
    )


@contextmanager
def memory_dir(fallback: Path) -> Iterator[Path]:
    """A fresh directory on /dev/shm, removed afterwards; `fallback` where there is no tmpfs."""
    if not is_tmpfs(SHARED_MEMORY):
        yield fallback
        return
    with tempfile.TemporaryDirectory(prefix="evs-test-", dir=SHARED_MEMORY) as directory:
        yield Path(directory)
