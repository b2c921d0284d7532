"""mini-swe-agent's runs on our workspaces: `environment_class:
mcp_evalserver.integrations.minisweagent.EvalserverEnvironment` in its config.

Each environment gets a copy-on-write workspace of an instance shared by every environment of
the process with the same `path`/`image` (and setup), instead of a container each. The
instances live in one background event loop (a blocking portal) that this module starts on
first use; each is held by a task of its own there (a backend's `async with` is entered and
left by one task) until `close_shared()`, which runs at exit.
"""

from __future__ import annotations

import atexit
import itertools
import os
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
from anyio.from_thread import BlockingPortal, start_blocking_portal

from mcp_evalserver.agents.minisweagent.environment import (
    WorkspaceEnvironment,
    WorkspaceEnvironmentConfig,
    import_minisweagent,
)
from mcp_evalserver.runtime.sandboxes import make_backend
from mcp_evalserver.sandbox.base import Instance, InstanceSpec

__all__ = ["EvalserverEnvironment", "EvalserverEnvironmentConfig", "close_shared"]

_T = TypeVar("_T")


class EvalserverEnvironmentConfig(WorkspaceEnvironmentConfig):
    """The `environment` section: where the instance comes from, then LocalEnvironment's fields."""

    path: str | None = None
    image: str | None = None
    workdir: str = ""
    setup: list[str] = []
    network: bool = False
    backend: Literal["local", "docker"] | None = None


class _Shared:
    """The process's event loop thread and the instances held in it, one per spec."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._portal_cm: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._instances: dict[tuple[str, str], Instance] = {}
        self._names = itertools.count()

    def portal(self) -> BlockingPortal:
        with self._lock:
            if self._portal is None:
                self._portal_cm = start_blocking_portal()
                self._portal = self._portal_cm.__enter__()
                atexit.register(close_shared)
            return self._portal

    def call(self, func: Callable[..., Awaitable[_T]], /, *args: Any) -> _T:
        return self.portal().call(func, *args)

    def instance(self, spec: InstanceSpec, backend: Literal["local", "docker"]) -> Instance:
        portal = self.portal()
        with self._lock:  # one provisioning per spec; the others wait for it
            found = self._instances.get((backend, spec.key))
            if found is None or found.dead is not None:
                _, found = portal.start_task(_hold, spec, backend)
                self._instances[(backend, spec.key)] = found
            return found

    def name(self) -> str:
        return f"mswea-{os.getpid()}-{next(self._names)}"

    def close(self) -> None:
        with self._lock:
            portal, cm = self._portal, self._portal_cm
            self._portal = self._portal_cm = None
            self._instances.clear()
        if portal is not None and cm is not None:
            portal.call(portal.stop, True)  # cancels the holders: their instances close
            cm.__exit__(None, None, None)


async def _hold(
    spec: InstanceSpec,
    backend_name: Literal["local", "docker"],
    *,
    task_status: anyio.abc.TaskStatus[Instance],
) -> None:
    async with make_backend(backend_name) as backend, await backend.instance(spec) as instance:
        task_status.started(instance)
        await anyio.sleep_forever()


_SHARED = _Shared()


def close_shared() -> None:
    """Closes every shared instance and the background loop (also run at interpreter exit)."""
    _SHARED.close()


class EvalserverEnvironment(WorkspaceEnvironment):
    """mini-swe-agent's `Environment` on a fresh copy-on-write workspace of a shared instance.

    Raises (from the constructor):
        pydantic.ValidationError: the config is invalid (neither or both of `path`, `image`).
        SandboxUnavailable: the instance could not be provisioned.
    """

    def __init__(self, **kwargs: Any) -> None:
        import_minisweagent()
        config = EvalserverEnvironmentConfig(**kwargs)
        spec = InstanceSpec(
            image=config.image,
            path=config.path,
            workdir=config.workdir,
            setup=tuple(config.setup),
            network=config.network,
        )
        backend = config.backend or ("docker" if config.image is not None else "local")
        instance = _SHARED.instance(spec, backend)
        workspace = _SHARED.call(instance.workspace, _SHARED.name())
        super().__init__(workspace, _SHARED.call, config)

    def diff(self) -> str:
        """The workspace's changes against its instance, as a unified diff."""
        return _SHARED.call(self.workspace.diff)

    def close(self) -> None:
        """Destroys the workspace (the shared instance stays for the others)."""
        self.stopped.set()
        _SHARED.call(self.workspace.destroy)

    def __enter__(self) -> EvalserverEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
