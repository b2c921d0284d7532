"""The instances of running Inspect tasks, each kept alive by a task of its own.

A backend's `async with` must be entered and left by one task, but Inspect calls
`task_init` and `task_cleanup` from wherever it likes and gives providers no task group.
So each (task, config) gets a host: a detached asyncio task that opens the backend,
provisions the instance, and waits until `task_cleanup` asks it to close them.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from dataclasses import dataclass, field

import anyio

from mcp_evalserver import errors
from mcp_evalserver.integrations.inspect.config import EvalServerSandboxConfig
from mcp_evalserver.sandbox.base import Backend, Instance, Workspace

log = logging.getLogger(__name__)


def make_backend(config: EvalServerSandboxConfig) -> Backend:
    """A fresh backend of the config's kind (imported here: docker stays optional)."""
    if config.backend == "local":
        from mcp_evalserver.sandbox.local import LocalBackend

        return LocalBackend()
    from mcp_evalserver.sandbox.docker import DockerBackend

    return DockerBackend()


@dataclass
class HostedInstance:
    """One task's instance and the detached task that owns its backend."""

    task_name: str
    config: EvalServerSandboxConfig
    ready: anyio.Event = field(default_factory=anyio.Event)
    stop: anyio.Event = field(default_factory=anyio.Event)
    instance: Instance | None = None
    backend_name: str = ""
    failure: BaseException | None = None
    runner: asyncio.Task[None] | None = None
    _names: itertools.count[int] = field(default_factory=itertools.count)

    async def _run(self) -> None:
        try:
            async with make_backend(self.config) as backend:
                self.backend_name = backend.name
                self.instance = await backend.instance(self.config)
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:  # reported to whoever waits on `ready`
            self.failure = exc
            if not isinstance(exc, errors.EvalServerError):
                log.exception("evalserver sandbox host of %s failed", self.task_name)
        finally:
            self.ready.set()

    async def workspace(self) -> Workspace:
        """A new workspace of the instance, named after the task and a counter.

        Raises:
            SandboxUnavailable: the instance could not be provisioned or is gone.
        """
        await self.ready.wait()
        if self.instance is None:
            raise errors.SandboxUnavailable(f"evalserver sandbox: {self.failure}")
        readable = re.sub(r"[^A-Za-z0-9_.-]", "_", self.task_name)[:48].lstrip(".") or "task"
        return await self.instance.workspace(f"{readable}-{next(self._names)}")

    async def close(self) -> None:
        """Closes the instance and its backend (every remaining workspace with them)."""
        self.stop.set()
        if self.runner is not None:
            with anyio.CancelScope(shield=True):
                await asyncio.wait({self.runner})


_hosted: dict[tuple[str, str], HostedInstance] = {}


async def host(task_name: str, config: EvalServerSandboxConfig) -> HostedInstance:
    """The task's instance, provisioned by a new host the first time (then shared).

    Raises:
        SandboxUnavailable: provisioning failed (the message says why), or not on asyncio.
        InvalidInput: the config cannot run on its backend.
    """
    key = (task_name, config.key)
    hosted = _hosted.get(key)
    if hosted is None or (hosted.runner is not None and hosted.runner.get_loop().is_closed()):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise errors.SandboxUnavailable(
                "the evalserver sandbox runs on asyncio; run Inspect with its default async "
                "backend (unset INSPECT_ASYNC_BACKEND=trio)"
            ) from None
        hosted = _hosted[key] = HostedInstance(task_name, config)
        hosted.runner = loop.create_task(hosted._run())
    await hosted.ready.wait()
    if hosted.instance is None:
        _hosted.pop(key, None)
        failure = hosted.failure
        if isinstance(failure, errors.EvalServerError):
            raise failure
        raise errors.SandboxUnavailable(f"evalserver sandbox: {failure!r}") from failure
    return hosted


async def release(task_name: str, config: EvalServerSandboxConfig) -> None:
    """Closes the task's instance, if it has one."""
    hosted = _hosted.pop((task_name, config.key), None)
    if hosted is not None:
        await hosted.close()
