"""Faults a sandbox meets in the field, injected for real: a killed supervisor (OOM kill,
crash), a killed workspace holder, a container killed or removed under its instance, a Docker
engine restarted (a private one: the shared engine's other users must not notice).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO

import anyio

from mcp_evalserver.sandbox.base import Instance
from mcp_evalserver.sandbox.supervised import SupervisedInstance, SupervisedWorkspace

Fault = Callable[[SupervisedInstance], Awaitable[None]]


async def sigkill_supervisor(instance: Instance) -> None:
    """What an OOM kill or a crash does to an instance's supervisor (its container, if it has
    one, lives on: only the supervisor's stream ends). Any instance whose `info` names its
    supervisor's pid (and container) will do: a ray instance's is its node's instance's."""
    info = getattr(instance, "info", {})
    pid = int(info["pid"])  # in the supervisor's own pid namespace
    container = info.get("container")
    if container is None:
        os.kill(pid, signal.SIGKILL)
        return
    # The shell's builtin `kill`: the image need not have procps.
    await anyio.to_thread.run_sync(
        _docker, "exec", str(container), "/bin/sh", "-c", f"kill -KILL {pid}"
    )


def _docker(*args: str) -> None:
    subprocess.run(["docker", *args], check=True, capture_output=True, timeout=60)


async def docker_kill(instance: SupervisedInstance) -> None:
    await anyio.to_thread.run_sync(_docker, "kill", str(instance.info["container"]))


async def docker_rm_f(instance: SupervisedInstance) -> None:
    await anyio.to_thread.run_sync(_docker, "rm", "-f", str(instance.info["container"]))


def holder_of(workspace: SupervisedWorkspace) -> int:
    """The pid of a workspace's holder: the topmost process whose mounts show the workspace's
    view (its execs, below it, show them too; its parent, the supervisor, does not). Its
    `holder_pid` is of the supervisor's pid namespace, a container's on docker: not this one.
    """
    root = str(workspace.info["root"])
    # Every instance container has its views at the same paths: look in this one's only.
    container = workspace.instance.info.get("container")
    pid_ns = ""
    if container:
        done = subprocess.run(["docker", "inspect", "-f", "{{.State.Pid}}", str(container)],
                              check=True, capture_output=True, text=True, timeout=60)  # fmt: skip
        pid_ns = os.readlink(f"/proc/{done.stdout.strip()}/ns/pid")
    showing: set[int] = set()
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if pid_ns and os.readlink(entry / "ns" / "pid") != pid_ns:
                continue
            mounts = (entry / "mountinfo").read_text()
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if f" {root}/" in mounts:
            pid = int(entry.name)
            showing.add(pid)
            parents[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    tops = [pid for pid in showing if parents[pid] not in showing]
    assert len(tops) == 1, f"expected one holder of {root}, found {tops}"
    return tops[0]


async def kill_holder(workspace: SupervisedWorkspace) -> None:
    os.kill(holder_of(workspace), signal.SIGKILL)


#: What `scripts/ensure-docker.sh` gives the shared engine; a private engine gets the same.
DOCKERD_FLAGS = ("--bridge=none", "--iptables=false")


class PrivateEngine:
    """A Docker engine of this test's own (socket, data root, exec root, containerd), so it
    can be restarted without touching the engine everyone else's tests share.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.url = f"unix://{self.socket}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = root / "dockerd.log"
        self._drainer: threading.Thread | None = None

    async def start(self) -> None:
        """Starts dockerd and returns once its API listens (read from its log, no polling)."""
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [
            "dockerd", *DOCKERD_FLAGS, "-H", self.url,
            "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.root / "docker.pid"),
        ]  # fmt: skip
        # Popen returns at once; the engine runs in a session of its own, like ensure-docker's.
        self.process = subprocess.Popen(  # noqa: ASYNC220
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            start_new_session=True,
        )  # fmt: skip
        stderr = self.process.stderr
        assert stderr is not None

        def wait_until_listening() -> None:
            with open(self.log, "ab") as log:
                for line in stderr:
                    log.write(line)
                    if b"API listen on" in line:
                        return
            raise RuntimeError(f"dockerd exited before listening; see {self.log}")

        with anyio.fail_after(120):
            await anyio.to_thread.run_sync(wait_until_listening, abandon_on_cancel=True)
        # Its later lines go on being drained, so a full pipe never blocks the engine.
        self._drainer = threading.Thread(target=self._drain, args=(stderr,), daemon=True)
        self._drainer.start()

    def _drain(self, stream: IO[bytes]) -> None:
        with stream, open(self.log, "ab") as log:
            for line in stream:
                log.write(line)

    async def stop(self) -> None:
        """Stops dockerd the way a service manager does (SIGTERM), and waits for it."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            process.terminate()
            with anyio.fail_after(120):
                await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
                # The drainer closes the pipe at its end, which the engine's exit brings.
                if self._drainer is not None:
                    await anyio.to_thread.run_sync(self._drainer.join, abandon_on_cancel=True)

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def load_image(self, image: str) -> None:
        """Copies an image from the shared engine (no registry can be reached here)."""

        def copy() -> None:
            save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
            assert save.stdout is not None
            load = subprocess.run(
                ["docker", "-H", self.url, "load"], stdin=save.stdout, capture_output=True,
                timeout=300, check=False,
            )  # fmt: skip
            save.stdout.close()
            if save.wait(timeout=300) != 0 or load.returncode != 0:
                raise RuntimeError(f"could not copy {image}: {load.stderr.decode()[-2000:]}")

        await anyio.to_thread.run_sync(copy)

    async def aclose(self) -> None:
        """Stops the engine and removes everything it stored."""
        await self.stop()
        await anyio.to_thread.run_sync(shutil.rmtree, self.root, True)
