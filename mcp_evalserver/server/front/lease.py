"""The driver lease: which one process drives the campaigns of a state directory.

`<state_dir>/front/driver.lock` is `flock`ed by the driver for as long as it lives: the kernel
releases it the moment that process dies, however it dies (SIGKILL included), and never lets
two hold it. Every worker of `--workers N` tries to take it; the one that does drives, writes
where it listens (its pid and socket) into the file, and the others reach it there. When it
dies, another worker takes the lease within a poll and resumes what it drove. Each
campaign's ledger keeps its own lock besides (engine/ledger.py): even a process that is not
a driver cannot write a ledger another process writes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import anyio

#: How often a worker that does not drive tries the lease (the takeover delay at most).
POLL_S = 0.2
LEASE_FILE = "driver.lock"


@dataclass(frozen=True)
class Holder:
    """Who holds the lease: its pid, the socket it answers on, and the server it belongs to
    (the parent of its workers)."""

    pid: int
    socket: str
    server: str


def lease_path(state_dir: Path) -> Path:
    return state_dir / "front" / LEASE_FILE


def read_holder(state_dir: Path) -> Holder | None:
    """Who last took the lease (it may have died since: its socket then refuses)."""
    try:
        return Holder(**json.loads(lease_path(state_dir).read_text()))
    except (OSError, ValueError, TypeError):
        return None


class DriverLease:
    """The lease of one state directory, as one process contends for it."""

    def __init__(self, state_dir: Path) -> None:
        self.path = lease_path(state_dir)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_take(self, holder: Holder) -> Holder | None:
        """Takes the lease if nobody holds it: returns who held it before (None: nobody yet),
        or raises BlockingIOError while another process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise
        previous = None
        with contextlib.suppress(ValueError, TypeError):
            previous = Holder(**json.loads(os.pread(fd, 4096, 0) or b"null"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(asdict(holder)).encode(), 0)
        self._fd = fd
        return previous

    async def take(self, holder: Holder) -> Holder | None:
        """Waits until the lease is ours; returns who held it before (see `try_take`)."""
        while True:
            try:
                return self.try_take(holder)
            except BlockingIOError:
                await anyio.sleep(POLL_S)

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # the flock goes with the last descriptor
