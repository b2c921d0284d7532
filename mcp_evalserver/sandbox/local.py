"""The `local` backend: the supervisor as a host subprocess, no daemon (the embedded default).

An instance is a host directory (a repo with its venv, say). Each workspace sees an allowlist
of the host (docs/design/isolation.md): that directory as a private copy-on-write
overlay at its own path, the system directories read-only, the task's declared paths, private
/tmp, /root, /dev and /proc; its own pid, net, ipc and uts namespaces, and no capabilities but
the file ones. Root is needed, or an unprivileged user where user namespaces are allowed (then
cgroup limits are not available: `instance.info["limits"]` says which are enforced).

A task that asks for network is refused: its trajectories would share the host's network.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import anyio
import anyio.abc

from mcp_evalserver import errors
from mcp_evalserver.sandbox import agent_paths
from mcp_evalserver.sandbox.base import Backend, InstanceSpec
from mcp_evalserver.sandbox.client import SUPERVISOR_SOURCE, SupervisorClient
from mcp_evalserver.sandbox.native import native_holder
from mcp_evalserver.sandbox.supervised import SupervisedInstance

log = logging.getLogger(__name__)


def userns_refusal() -> str | None:
    """Why this (non-root) process cannot use user namespaces, or None if it probably can."""
    checks = (
        ("/proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone is 0"),
        ("/proc/sys/user/max_user_namespaces", "user.max_user_namespaces is 0"),
    )
    for path, reason in checks:
        try:
            if Path(path).read_text().strip() == "0":
                return reason
        except OSError:
            continue
    return None


class LocalBackend(Backend):
    """Instances are host directories; one supervisor subprocess per instance.

    Use as `async with LocalBackend() as backend:`; instances live until the backend closes
    (or their own `aclose`).
    """

    name = "local"

    def __init__(
        self,
        *,
        python: str | None = None,
        store_root: str = "/run/mcp-evalserver",
        set_up: Iterable[str] = (),
        python_holder: bool = False,
    ):
        self._python = python or sys.executable
        self._store_root = store_root
        self._instances: dict[str, SupervisedInstance] = {}
        self._locks: dict[str, anyio.Lock] = collections.defaultdict(anyio.Lock)
        self._group: anyio.abc.TaskGroup | None = None
        # Keys whose setup ran: a directory keeps its changes (`set_up`: in another process).
        self._set_up: set[str] = set(set_up)
        self._python_holder = python_holder  # the fallback holder, not the compiled one

    async def __aenter__(self) -> LocalBackend:
        await anyio.to_thread.run_sync(sweep_leftovers, self._store_root)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    def mark_set_up(self, key: str) -> None:
        """Says the setup of instance `key` ran on its directory already (in another process:
        a directory keeps what its setup did), so its next provisioning skips it."""
        self._set_up.add(key)

    async def instance(self, spec: InstanceSpec) -> SupervisedInstance:
        if self._group is None:
            raise errors.Conflict("use the backend as `async with LocalBackend() as backend`")
        if spec.path is None:
            raise errors.InvalidInput("the local backend runs directories: give `path`")
        if spec.network:
            # Its trajectories would share the host's network namespace: its interfaces, and
            # every service listening on its loopback. Building a private one with a way out
            # needs a bridge and NAT (or a user-mode stack) that only the docker engine has.
            raise errors.InvalidInput(
                "the task asks for network, which the local backend cannot give without "
                "sharing the host's network: run it on the docker backend (give the task an "
                "`image`) with an engine that has a bridge network, or set `network` to false"
            )
        async with self._locks[spec.key]:
            existing = self._instances.get(spec.key)
            if existing is not None:
                if existing.dead is None:
                    return existing
                await existing.aclose()  # its supervisor died: reap it, then provision anew
            instance = await self._provision(spec, spec.path)
            self._instances[spec.key] = instance
            return instance

    async def _provision(self, spec: InstanceSpec, path: str) -> SupervisedInstance:
        assert self._group is not None
        root = Path(path)
        if not await anyio.Path(root).is_dir():
            raise errors.InvalidInput(f"instance path {path!r} is not a directory")
        workdir = Path(spec.workdir)
        if workdir != root and root not in workdir.parents:
            raise errors.InvalidInput(f"workdir {spec.workdir!r} must be inside {path!r}")
        if os.geteuid() != 0 and (why := userns_refusal()) is not None:
            raise errors.SandboxUnavailable(
                f"the local backend needs root or user namespaces, and {why}; run as root or "
                "use the docker backend"
            )
        # The supervisor mounts a private tmpfs here (in its own mount namespace); on the host
        # it stays an empty directory, removed on close or by the next start-up's sweep.
        store = f"{self._store_root}/{os.getpid()}-{spec.key}"
        if os.geteuid() != 0:
            runtime = os.environ.get("XDG_RUNTIME_DIR") or "/tmp"
            store = f"{runtime}/mcp-evalserver-{os.getpid()}-{spec.key}"
        # Requests go through pipes the client's event loop serves (client.py: over_pipes);
        # the channel takes the sockets that become more connections (open_connection).
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        their_stdin, requests = os.pipe()
        replies, their_stdout = os.pipe()
        try:
            with theirs:
                process = await anyio.open_process(
                    [self._python, "-I", "-S", str(SUPERVISOR_SOURCE),
                     "--connections", str(theirs.fileno())],
                    stdin=their_stdin,
                    stdout=their_stdout,
                    stderr=subprocess.PIPE,
                    pass_fds=[theirs.fileno()],
                )  # fmt: skip
        except BaseException as e:  # not ours to keep: no supervisor uses them
            for fd in (ours.detach(), requests, replies):
                os.close(fd)
            if isinstance(e, OSError):
                raise errors.SandboxUnavailable(f"cannot start the supervisor: {e}") from e
            raise
        finally:
            os.close(their_stdin)  # the supervisor's now: its ends, not ours
            os.close(their_stdout)
        stderr_tail: collections.deque[str] = collections.deque(maxlen=50)
        self._group.start_soon(_drain_stderr, process, stderr_tail, spec.key)
        client = SupervisorClient.over_pipes(replies, requests, ours)

        async def on_close() -> None:
            if closing is not None and self._instances.get(spec.key) is closing:
                del self._instances[spec.key]  # forgotten: provisioned anew next time
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(10):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                await process.aclose()
                await anyio.to_thread.run_sync(_remove_empty_dir, store)
                for cgroup in cgroup_dirs:  # left behind if the supervisor was killed
                    await anyio.to_thread.run_sync(_remove_cgroup_tree, cgroup, process.pid)

        cgroup_dirs: list[str] = []
        closing: SupervisedInstance | None = None
        try:
            # In here: a start that fails (cancelled while its pipes' transports are made)
            # closes its pipes, and the supervisor, its input ended, is waited for.
            await client.start(self._group)
            instance = closing = await SupervisedInstance.open(
                client,
                spec,
                mode="host",
                store=store,
                store_tmpfs=True,
                run_setup=spec.key not in self._set_up,
                on_close=on_close,
                # The CLI agents' runtime and model-bridge sockets, read-only in every view.
                extra_paths=await anyio.to_thread.run_sync(agent_paths.view_paths),
                holder=str(holder)
                if (holder := await native_holder(self._python_holder))
                else None,
            )
            self._set_up.add(spec.key)
            cgroup_dirs.extend(instance.info.get("cgroup_dirs") or [])
            return instance
        except BaseException as e:
            await client.aclose()
            await on_close()
            if isinstance(e, errors.SandboxUnavailable) and stderr_tail:
                raise errors.SandboxUnavailable(f"{e}; supervisor said: {stderr_tail[-1]}") from e
            raise

    async def aclose(self) -> None:
        instances, self._instances = list(self._instances.values()), {}
        for instance in instances:
            await instance.aclose()
        if self._group is not None:
            group, self._group = self._group, None
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)


async def _drain_stderr(process: anyio.abc.Process, tail: collections.deque[str], key: str) -> None:
    """Keeps the supervisor's last words (for errors) and logs them."""
    assert process.stderr is not None
    buffered = b""
    try:
        async for chunk in process.stderr:
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                tail.append(text)
                log.warning("supervisor %s: %s", key, text)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the process is gone; the client reports that


def sweep_leftovers(store_root: str) -> None:
    """Removes empty stores and cgroups of supervisors that died without cleaning up.

    Both are named after the supervisor's pid; only those whose process is gone are touched.
    """
    candidates: list[tuple[Path, str]] = []
    if Path(store_root).is_dir():
        candidates += [(p, p.name.split("-", 1)[0]) for p in Path(store_root).iterdir()]
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, own = line.split(":", 2)
            for ctrl in controllers.split(",") if controllers else [""]:
                parent = Path("/sys/fs/cgroup", ctrl, own.lstrip("/"))
                with contextlib.suppress(OSError):
                    candidates += [
                        (p, p.name.rsplit("-", 1)[1])
                        for p in parent.iterdir()
                        if p.name.startswith("mcp-evalserver-")
                    ]
    for path, pid in candidates:
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        if path.is_relative_to("/sys/fs/cgroup"):
            _remove_cgroup_tree(str(path), int(pid))
        else:
            _remove_empty_dir(str(path))


def _remove_cgroup_tree(base: str, pid: int) -> None:
    if not base.endswith(f"/mcp-evalserver-{pid}"):
        return  # only ever the directories named after this supervisor
    with contextlib.suppress(OSError):
        for child in Path(base).iterdir():
            if child.is_dir():
                with contextlib.suppress(OSError):
                    child.rmdir()
        Path(base).rmdir()


def _remove_empty_dir(path: str) -> None:
    with contextlib.suppress(OSError):  # not empty: leave it for a person to look at
        os.rmdir(path)
