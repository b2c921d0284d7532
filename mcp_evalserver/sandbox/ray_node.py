"""The node side of the `ray` backend: one Ray actor per instance, the node's own backend inside.

`InstanceHost` is the actor's class. On `start` it enters the node's `local` or `docker`
backend (the supervisor and copy-on-write workspaces exactly as on one machine) in a task of its
own, provisions the instance, and then answers workspace operations, each one actor call.
Errors cross back as `(type name, message)` pairs, not pickled exceptions: the driver raises the
same class from `errors.py`, and a traceback from the node never has to unpickle.

This module imports Ray only inside the actor: the driver wraps the class with `ray.remote`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Any

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec, Workspace
from mcp_evalserver.sandbox.shipping import Shipment, materialize, record_setup, setup_ran

# What an actor call answers: ("ok", value) or ("error", (error class name, message)).
Reply = tuple[str, Any]

WORKSPACE_OPS = frozenset(
    {
        "exec",
        "read_file",
        "write_file",
        "list",
        "diff",
        "reset",
        "checkpoint",
        "restore",
        "export_checkpoint",
    }
)


def _error(exc: BaseException) -> Reply:
    name = type(exc).__name__ if isinstance(exc, errors.EvalServerError) else "InfrastructureError"
    return ("error", (name, str(exc) or type(exc).__name__))


def _unmark_for_oom_kill() -> None:
    """Gives this worker (and so the supervisor it starts) the OOM score of a plain process.

    Ray marks its workers first in line for the OOM killer (`oom_score_adj` 1000). The
    supervisor and its workspace holders inherit it, while commands reset theirs to 0, so a
    command's memory hog would have its workspace's holder killed instead of itself.
    """
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")


class InstanceHost:
    """One instance on this node, hosted by the node's own backend."""

    def __init__(
        self, spec: dict[str, Any], backend: str, shipment: list[Shipment] | None = None
    ) -> None:
        # The shipment arrives wrapped in a list so Ray passes its object reference as is:
        # the archive is fetched only on a node that lacks the directory.
        self._spec = InstanceSpec.model_validate(spec)
        self._backend_name = backend
        self._shipment = shipment[0] if shipment else None
        self._instance: Instance | None = None
        self._workspaces: dict[str, Workspace] = {}
        self._closing: asyncio.Event | None = None
        self._host_task: asyncio.Task[None] | None = None

    async def start(self) -> Reply:
        """Provisions the instance; answers where it runs and its base commit."""
        try:
            _unmark_for_oom_kill()
            if self._shipment is not None and self._spec.path is not None:
                await materialize(self._spec.path, self._shipment)
            loop = asyncio.get_running_loop()
            started: asyncio.Future[Instance] = loop.create_future()
            self._closing = asyncio.Event()
            # A backend's `async with` must be entered and left by one task, which lives as
            # long as the instance; each actor call is a task of its own.
            self._host_task = loop.create_task(self._host(started))
            self._instance = await started
        except Exception as exc:
            return _error(exc)
        import ray

        return (
            "ok",
            {
                "node_id": ray.get_runtime_context().get_node_id(),
                "base_commit": self._instance.base_commit,
                "info": dict(getattr(self._instance, "info", {})),
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
            },
        )

    async def _host(self, started: asyncio.Future[Instance]) -> None:
        assert self._closing is not None
        try:
            backend: Backend
            if self._backend_name == "docker":
                from mcp_evalserver.sandbox.docker import DockerBackend

                backend = DockerBackend()
            else:
                from mcp_evalserver.sandbox.local import LocalBackend

                path = self._spec.path or ""
                key = self._spec.key
                ran = bool(self._spec.setup) and await asyncio.to_thread(setup_ran, path, key)
                backend = LocalBackend(set_up=[self._spec.key] if ran else [])
            async with backend:
                instance = await backend.instance(self._spec)
                if self._spec.setup and self._spec.path is not None:
                    await asyncio.to_thread(record_setup, self._spec.path, self._spec.key)
                started.set_result(instance)
                await self._closing.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    async def ping(self) -> Reply:
        """Answers at once: the cost of an actor call itself (benchmarks, health checks)."""
        return ("ok", None)

    async def create(self, name: str, archive: bytes | None = None) -> Reply:
        """Creates the workspace `name` on this instance (from an exported checkpoint)."""
        if self._instance is None:
            return ("error", ("SandboxUnavailable", "the instance was not started"))
        try:
            if archive is not None:
                workspace = await self._instance.workspace_from_archive(name, archive)
            else:
                workspace = await self._instance.workspace(name)
            self._workspaces[name] = workspace
        except Exception as exc:
            return _error(exc)
        return ("ok", None)

    async def fork(self, parent: str, name: str, checkpoint: str | None) -> Reply:
        """Creates the workspace `name` as a fork of `parent` (at `checkpoint`, or now)."""
        workspace = self._workspaces.get(parent)
        if workspace is None:
            return ("error", ("NotFound", f"no workspace {parent!r} on this instance"))
        try:
            self._workspaces[name] = await workspace.fork(name, checkpoint=checkpoint)
        except Exception as exc:
            return _error(exc)
        return ("ok", None)

    async def call(self, name: str, op: str, kwargs: dict[str, Any]) -> Reply:
        """Runs one workspace operation (`exec`, `read_file`, ...) and answers its result."""
        workspace = self._workspaces.get(name)
        if workspace is None:
            return ("error", ("NotFound", f"no workspace {name!r} on this instance"))
        if op not in WORKSPACE_OPS:
            return ("error", ("InvalidInput", f"unknown workspace operation {op!r}"))
        try:
            result = await getattr(workspace, op)(**kwargs)
        except Exception as exc:
            return _error(exc)
        if op == "exec":
            return ("ok", result.model_dump())
        if op == "list":
            return ("ok", [entry.model_dump() for entry in result])
        return ("ok", result)

    async def destroy(self, name: str) -> Reply:
        """Removes the workspace `name`; a no-op if it is gone."""
        workspace = self._workspaces.pop(name, None)
        if workspace is not None:
            try:
                await workspace.destroy()
            except Exception as exc:
                return _error(exc)
        return ("ok", None)

    async def stop(self) -> Reply:
        """Destroys every workspace and releases the instance (the actor is killed after)."""
        self._workspaces.clear()
        if self._closing is not None and self._host_task is not None:
            self._closing.set()
            with contextlib.suppress(Exception):
                await self._host_task
        return ("ok", None)
