"""The host's view of a sandbox's processes: found by a unique argument, awaited until they
run or until they are gone."""

from __future__ import annotations

import os
import uuid

import anyio


def marker() -> str:
    """A unique `sleep` argument, so the host can find exactly this test's processes."""
    return f"{300 + uuid.uuid4().int % 10_000}.{uuid.uuid4().int % 1000:03d}"


def host_pids(argument: str) -> list[int]:
    """Host pids of live processes whose command line contains `argument` as a word."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                words = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if argument.encode() in words and state != "Z":
            found.append(int(entry))
    return found


async def wait_until_gone(argument: str) -> None:
    """Waits (bounded by the caller's fail_after) until no process carries `argument`.

    A SIGKILLed tree is reaped asynchronously, so each pid's exit is awaited on a pidfd.
    """
    while pids := host_pids(argument):
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue
            try:
                await anyio.wait_readable(fd)
            finally:
                os.close(fd)


async def wait_until_running(*arguments: str) -> None:
    """Waits (bounded by the caller's fail_after) until a process carries each of `arguments`.

    A process's start gives the host nothing to wait on, so /proc is looked at every 50 ms.
    """
    while not all(host_pids(argument) for argument in arguments):  # noqa: ASYNC110
        await anyio.sleep(0.05)
