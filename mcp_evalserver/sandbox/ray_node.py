"""The node side of the `ray` backend: one Ray actor per instance, the node's own backend inside.

`InstanceHost` is the actor's class. On `start` it enters the node's `local` or `docker`
backend (the supervisor and copy-on-write workspaces exactly as on one machine) in a task of its
own, provisions the instance, and then answers workspace operations, each one actor call.
Errors cross back as `(type name, message)` pairs, not pickled exceptions: the driver raises the
same class from `errors.py`, and a traceback from the node never has to unpickle.

It is a threaded actor, not an async one, for the sake of `exec`: Ray runs an async actor's
every call on its event loop, a hop from the thread that took the call to the loop's and back
(about 0.3-0.4 ms a call here, bench/scale.py). So an exec runs on the thread Ray called it on,
over a connection of its own to the supervisor (`BlockingConnection`, from a pool: one per call
in flight), and that thread waits for the reply itself. Everything else (provisioning, files,
diffs, checkpoints) runs on an event loop of the actor's, as before, and its caller's thread
waits for it there. A call the driver gives up on is ended by `cancel`, with the token the
driver gave it: Ray does not interrupt a threaded actor's running call.

This module imports Ray only inside the actor: the driver wraps the class with `ray.remote`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec, Workspace
from mcp_evalserver.sandbox.client import BlockingConnection
from mcp_evalserver.sandbox.shipping import Shipment, materialize, record_setup, setup_ran
from mcp_evalserver.sandbox.supervised import SupervisedInstance, SupervisedWorkspace

# What an actor call answers: ("ok", value) or ("error", (error class name, message)).
Reply = tuple[str, Any]

# What a call the driver gave up on answers (the driver no longer reads it).
CANCELLED: Reply = ("error", ("InfrastructureError", "the call was cancelled"))
# Tokens of calls cancelled before they began, kept so a late start still sees it; bounded.
CANCELLED_KEPT = 4096

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


class Hosted:
    """The instance and its workspaces, used on the actor's event loop only."""

    def __init__(self, spec: InstanceSpec, backend: str, shipment: Shipment | None) -> None:
        self.spec = spec
        self.backend_name = backend
        self.shipment = shipment
        self.instance: Instance | None = None
        self.workspaces: dict[str, Workspace] = {}
        self._closing: asyncio.Event | None = None
        self._host_task: asyncio.Task[None] | None = None

    async def start(self) -> Reply:
        try:
            _unmark_for_oom_kill()
            if self.shipment is not None and self.spec.path is not None:
                await materialize(self.spec.path, self.shipment)
            loop = asyncio.get_running_loop()
            started: asyncio.Future[Instance] = loop.create_future()
            self._closing = asyncio.Event()
            # A backend's `async with` must be entered and left by one task, which lives as
            # long as the instance; each actor call is a task of its own.
            self._host_task = loop.create_task(self._host(started))
            self.instance = await started
        except Exception as exc:
            return _error(exc)
        import ray

        return (
            "ok",
            {
                "node_id": ray.get_runtime_context().get_node_id(),
                "base_commit": self.instance.base_commit,
                "info": dict(getattr(self.instance, "info", {})),
                "hostname": socket.gethostname(),
                "pid": os.getpid(),
            },
        )

    async def _host(self, started: asyncio.Future[Instance]) -> None:
        assert self._closing is not None
        try:
            backend: Backend
            if self.backend_name == "docker":
                from mcp_evalserver.sandbox.docker import DockerBackend

                backend = DockerBackend()
            else:
                from mcp_evalserver.sandbox.local import LocalBackend

                path = self.spec.path or ""
                key = self.spec.key
                ran = bool(self.spec.setup) and await asyncio.to_thread(setup_ran, path, key)
                backend = LocalBackend(set_up=[self.spec.key] if ran else [])
            async with backend:
                instance = await backend.instance(self.spec)
                if self.spec.setup and self.spec.path is not None:
                    await asyncio.to_thread(record_setup, self.spec.path, self.spec.key)
                started.set_result(instance)
                await self._closing.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise

    async def create(self, name: str, archive: bytes | None) -> Reply:
        if self.instance is None:
            return ("error", ("SandboxUnavailable", "the instance was not started"))
        try:
            if archive is not None:
                workspace = await self.instance.workspace_from_archive(name, archive)
            else:
                workspace = await self.instance.workspace(name)
            self.workspaces[name] = workspace
        except Exception as exc:
            return _error(exc)
        return ("ok", None)

    async def fork(self, parent: str, name: str, checkpoint: str | None) -> Reply:
        workspace = self.workspaces.get(parent)
        if workspace is None:
            return ("error", ("NotFound", f"no workspace {parent!r} on this instance"))
        try:
            self.workspaces[name] = await workspace.fork(name, checkpoint=checkpoint)
        except Exception as exc:
            return _error(exc)
        return ("ok", None)

    async def call(self, workspace: Workspace, op: str, kwargs: dict[str, Any]) -> Reply:
        try:
            result = await getattr(workspace, op)(**kwargs)
        except Exception as exc:
            return _error(exc)
        if op == "exec":
            return ("ok", result.model_dump())
        if op == "list":
            return ("ok", [entry.model_dump() for entry in result])
        return ("ok", result)

    async def connect(self) -> BlockingConnection:
        if not isinstance(self.instance, SupervisedInstance):
            raise errors.InvalidInput("this instance has no supervisor to connect to")
        return await self.instance.client.open_connection()

    async def destroy(self, name: str) -> Reply:
        workspace = self.workspaces.pop(name, None)
        if workspace is not None:
            try:
                await workspace.destroy()
            except Exception as exc:
                return _error(exc)
        return ("ok", None)

    async def stop(self) -> Reply:
        self.workspaces.clear()
        if self._closing is not None and self._host_task is not None:
            self._closing.set()
            with contextlib.suppress(Exception):
                await self._host_task
        return ("ok", None)


class InstanceHost:
    """One instance on this node, hosted by the node's own backend.

    Only plain methods here: Ray makes a class with any coroutine method (private ones too) an
    async actor, and runs its plain methods one at a time on the loop.
    """

    def __init__(
        self, spec: dict[str, Any], backend: str, shipment: list[Shipment] | None = None
    ) -> None:
        # The shipment arrives wrapped in a list so Ray passes its object reference as is:
        # the archive is fetched only on a node that lacks the directory.
        self._hosted = Hosted(
            InstanceSpec.model_validate(spec), backend, shipment[0] if shipment else None
        )
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="instance-loop", daemon=True).start()
        self._lock = threading.Lock()
        self._idle_connections: list[BlockingConnection] = []
        self._direct = True  # until the supervisor's stream turns out to carry no connection
        self._giving_up: dict[str, Callable[[], object]] = {}  # token -> how to end its call
        self._cancelled: OrderedDict[str, None] = OrderedDict()

    def _on_loop(self, coro: Coroutine[Any, Any, Reply], token: str | None = None) -> Reply:
        """Runs `coro` on the actor's loop and waits; `cancel(token)` cancels it (before it
        began: it never runs)."""
        given_up = threading.Event()
        running: list[concurrent.futures.Future[Reply]] = []

        def give_up() -> None:
            given_up.set()
            for future in running:
                future.cancel()

        with self._cancellable(token, give_up) as cancelled:
            if cancelled:
                coro.close()
                return CANCELLED
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
            running.append(future)
            if given_up.is_set():  # a cancel that came while it was being scheduled
                future.cancel()
            try:
                return future.result()
            except concurrent.futures.CancelledError:
                return CANCELLED

    @contextlib.contextmanager
    def _cancellable(self, token: str | None, give_up: Callable[[], object]) -> Iterator[bool]:
        """Registers how `cancel(token)` ends the call; yields whether it already was."""
        if token is None:
            yield False
            return
        with self._lock:
            cancelled = token in self._cancelled
            if cancelled:
                del self._cancelled[token]
            else:
                self._giving_up[token] = give_up
        try:
            yield cancelled
        finally:
            with self._lock:
                self._giving_up.pop(token, None)

    def cancel(self, token: str) -> Reply:
        """Ends the call `token` (the driver gave up on it): its command is killed."""
        with self._lock:
            give_up = self._giving_up.pop(token, None)
            if give_up is None:  # not begun yet (or over): a late start must see it
                self._cancelled[token] = None
                while len(self._cancelled) > CANCELLED_KEPT:
                    self._cancelled.popitem(last=False)
        if give_up is not None:
            give_up()
        return ("ok", None)

    def start(self) -> Reply:
        """Provisions the instance; answers where it runs and its base commit."""
        return self._on_loop(self._hosted.start())

    def ping(self) -> Reply:
        """Answers at once: the cost of an actor call itself (benchmarks, health checks)."""
        return ("ok", None)

    def create(self, name: str, archive: bytes | None = None) -> Reply:
        """Creates the workspace `name` on this instance (from an exported checkpoint)."""
        return self._on_loop(self._hosted.create(name, archive))

    def fork(self, parent: str, name: str, checkpoint: str | None) -> Reply:
        """Creates the workspace `name` as a fork of `parent` (at `checkpoint`, or now)."""
        return self._on_loop(self._hosted.fork(parent, name, checkpoint))

    def call(self, name: str, op: str, kwargs: dict[str, Any], token: str | None = None) -> Reply:
        """Runs one workspace operation (`exec`, `read_file`, ...) and answers its result;
        `cancel(token)` ends it."""
        workspace = self._hosted.workspaces.get(name)
        if workspace is None:
            return ("error", ("NotFound", f"no workspace {name!r} on this instance"))
        if op not in WORKSPACE_OPS:
            return ("error", ("InvalidInput", f"unknown workspace operation {op!r}"))
        if op == "exec" and self._direct and isinstance(workspace, SupervisedWorkspace):
            return self._exec_direct(workspace, kwargs, token)
        return self._on_loop(self._hosted.call(workspace, op, kwargs), token)

    def _exec_direct(
        self, workspace: SupervisedWorkspace, kwargs: dict[str, Any], token: str | None
    ) -> Reply:
        """`exec` on this thread, over a connection of its own (see the module's docstring)."""
        try:
            connection = self._take_connection()
        except errors.InvalidInput:  # this supervisor's stream carries no other connection
            self._direct = False
            return self._on_loop(self._hosted.call(workspace, "exec", kwargs), token)
        except Exception as exc:
            return _error(exc)
        given_up = threading.Event()

        def give_up() -> None:
            given_up.set()
            connection.close()  # the supervisor cancels what it asked: the command is killed

        try:
            with self._cancellable(token, give_up) as cancelled:
                if cancelled:
                    return CANCELLED
                result = workspace.exec_on(connection, **kwargs)
        except Exception as exc:
            if given_up.is_set():
                return CANCELLED
            return _error(exc)
        finally:
            self._give_back(connection)
        return ("ok", result.model_dump())

    def _take_connection(self) -> BlockingConnection:
        with self._lock:
            if self._idle_connections:
                return self._idle_connections.pop()
        return asyncio.run_coroutine_threadsafe(self._hosted.connect(), self._loop).result()

    def _give_back(self, connection: BlockingConnection) -> None:
        if connection.closed:  # cancelled, timed out or broken: never reused
            return
        with self._lock:
            self._idle_connections.append(connection)

    def destroy(self, name: str) -> Reply:
        """Removes the workspace `name`; a no-op if it is gone."""
        return self._on_loop(self._hosted.destroy(name))

    def stop(self) -> Reply:
        """Destroys every workspace and releases the instance (the actor is killed after)."""
        with self._lock:
            idle, self._idle_connections = self._idle_connections, []
        for connection in idle:
            connection.close()
        return self._on_loop(self._hosted.stop())
