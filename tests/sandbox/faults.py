"""Faults a sandbox meets in the field, injected for real: a killed supervisor (OOM kill,
crash), a killed workspace holder, a container killed or removed under its instance.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio

from mcp_evalserver.sandbox.supervised import SupervisedInstance, SupervisedWorkspace

Fault = Callable[[SupervisedInstance], Awaitable[None]]


async def sigkill_supervisor(instance: SupervisedInstance) -> None:
    """What an OOM kill or a crash does to a local instance's supervisor."""
    os.kill(int(instance.info["pid"]), signal.SIGKILL)


def _docker(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True, timeout=60)


async def docker_kill(instance: SupervisedInstance) -> None:
    await anyio.to_thread.run_sync(_docker, "kill", str(instance.info["container"]))


async def docker_rm_f(instance: SupervisedInstance) -> None:
    await anyio.to_thread.run_sync(_docker, "rm", "-f", str(instance.info["container"]))


def holder_of(workspace: str) -> int:
    """The pid of a workspace's holder: the topmost process whose mounts show the workspace
    (its execs, below it, show them too; its parent, the supervisor, does not).
    """
    showing: set[int] = set()
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            mounts = (entry / "mountinfo").read_text()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if f"/{workspace}/" in mounts:
            pid = int(entry.name)
            showing.add(pid)
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    tops = [pid for pid in showing if parents[pid] not in showing]
    assert len(tops) == 1, f"expected one holder of {workspace}, found {tops}"
    return tops[0]


async def kill_holder(workspace: SupervisedWorkspace) -> None:
    os.kill(holder_of(workspace.name), signal.SIGKILL)
