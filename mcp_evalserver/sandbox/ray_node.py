"""The node side of the `ray` backend: one Ray actor per node hosts every instance placed there.

`NodeHost` is the actor's class; the driver makes one per node (pinned to it) and places many
instances on it. Inside, the node's own `local` and `docker` backends (one of each, entered
once, the first time an instance needs it) provision the instances: the supervisor and
copy-on-write workspaces exactly as on one machine. So an instance costs the node its
supervisor and a few objects, not a Ray worker process of its own (85 MB each when every
instance had its own actor; bench/swebench_scale.py measures what one costs now).

Every operation names its instance by key. Errors cross back as `(type name, message)` pairs,
not pickled exceptions: the driver raises the same class from `errors.py`, and a traceback from
the node never has to unpickle.

It is a threaded actor, not an async one, for the sake of `exec`: Ray runs an async actor's
every call on its event loop, a hop from the thread that took the call to the loop's and back
(about 0.3-0.4 ms a call here, bench/scale.py). So an exec runs on the thread Ray called it on,
over a connection of its own to its instance's supervisor (`BlockingConnection`, from a pool
per instance: one per call in flight), and that thread waits for the reply itself. Everything
else (provisioning, files, diffs, checkpoints) runs on the actor's event loop, and its caller's
thread waits for it there. A call the driver gives up on is ended by `cancel`, with the token
the driver gave it: Ray does not interrupt a threaded actor's running call.

This module imports Ray only inside the actor: the driver wraps the class with `ray.remote`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import Backend, ExecRequest, Instance, InstanceSpec, Workspace
from mcp_evalserver.sandbox.client import BlockingConnection
from mcp_evalserver.sandbox.local import LocalBackend
from mcp_evalserver.sandbox.shipping import (
    Shipment,
    materialize,
    record_setup,
    registry,
    setup_ran,
)
from mcp_evalserver.sandbox.socket_relay import SocketRelay
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
        "search",
        "glob",
        "diff",
        "reset",
        "checkpoint",
        "restore",
        "end_processes",
        "export_checkpoint",
    }
)


def _error(exc: BaseException) -> Reply:
    name = type(exc).__name__ if isinstance(exc, errors.EvalServerError) else "InfrastructureError"
    return ("error", (name, str(exc) or type(exc).__name__))


def _unmark_for_oom_kill() -> None:
    """Gives this worker (and so the supervisors it starts) the OOM score of a plain process.

    Ray marks its workers first in line for the OOM killer (`oom_score_adj` 1000). The
    supervisor and its workspace holders inherit it, while commands reset theirs to 0, so a
    command's memory hog would have its workspace's holder killed instead of itself.
    """
    with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
        f.write("0")


def node_figures() -> dict[str, float]:
    """What this node has free for instances: memory, disk (where shipped instances and
    records go), CPUs and the load on them."""
    meminfo: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            meminfo[name] = int(rest.split()[0]) * 1024
    where = registry()
    while not where.exists() and where != where.parent:
        where = where.parent
    disk = shutil.disk_usage(where)
    return {
        "memory_available": meminfo.get("MemAvailable", 0),
        "memory_total": meminfo.get("MemTotal", 0),
        "disk_free": disk.free,
        "disk_total": disk.total,
        "cpus": len(os.sched_getaffinity(0)),
        "load": os.getloadavg()[0],
    }


class Hosted:
    """One instance on this node and its workspaces, used on the actor's event loop only
    (its connection pool, by any thread under the node's lock)."""

    def __init__(self, spec: InstanceSpec, backend: str, shipment: Shipment | None) -> None:
        self.spec = spec
        self.backend_name = backend
        self.shipment = shipment
        self.instance: Instance | None = None
        self.workspaces: dict[str, Workspace] = {}
        self.idle_connections: list[BlockingConnection] = []
        self.direct = True  # until the supervisor's stream turns out to carry no connection

    async def start(self, backends: NodeBackends) -> dict[str, Any]:
        if self.shipment is not None and self.spec.path is not None:
            await materialize(self.spec.path, self.shipment)
        backend = await backends.get(self.backend_name)
        spec = self.spec
        if spec.setup and spec.path is not None:
            # A directory keeps what its setup did: an earlier instance here ran it already.
            ran = await asyncio.to_thread(setup_ran, spec.path, spec.key)
            if ran and isinstance(backend, LocalBackend):
                backend.mark_set_up(spec.key)
        self.instance = await backend.instance(spec)
        if spec.setup and spec.path is not None:
            await asyncio.to_thread(record_setup, spec.path, spec.key)
        return {
            "base_commit": self.instance.base_commit,
            "info": dict(getattr(self.instance, "info", {})),
        }

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
        if op in ("exec", "search", "glob"):
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
        """Releases the instance: its supervisor and every workspace go with it."""
        self.workspaces.clear()
        instance, self.instance = self.instance, None
        if instance is not None:
            try:
                await instance.aclose()
            except Exception as exc:
                return _error(exc)
        return ("ok", None)


class NodeBackends:
    """The node's own backends, each entered once by a task of its own (a backend's `async
    with` must be entered and left by one task) and left when the actor stops."""

    def __init__(self) -> None:
        self._backends: dict[str, Backend] = {}
        self._starting: dict[str, asyncio.Future[Backend]] = {}
        self._closing = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def get(self, name: str) -> Backend:
        backend = self._backends.get(name)
        if backend is not None:
            return backend
        started = self._starting.get(name)
        if started is None:
            started = self._starting[name] = asyncio.get_running_loop().create_future()
            self._tasks.append(asyncio.create_task(self._host(name, started)))
        try:
            return await asyncio.shield(started)
        except BaseException:
            self._starting.pop(name, None)  # the next instance tries again
            raise

    async def _host(self, name: str, started: asyncio.Future[Backend]) -> None:
        try:
            backend: Backend
            if name == "docker":
                from mcp_evalserver.sandbox.docker import DockerBackend

                backend = DockerBackend()
            else:
                backend = LocalBackend()
            async with backend:
                self._backends[name] = backend
                started.set_result(backend)
                await self._closing.wait()
        except BaseException as exc:
            if not started.done():
                started.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._backends.pop(name, None)

    async def aclose(self) -> None:
        self._closing.set()
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await task


class NodeHost:
    """Every instance the driver placed on this node, hosted by the node's own backends.

    Only plain methods here: Ray makes a class with any coroutine method (private ones too) an
    async actor, and runs its plain methods one at a time on the loop.
    """

    def __init__(self, slots: int) -> None:
        _unmark_for_oom_kill()
        self._slots = slots
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="node-loop", daemon=True).start()
        self._backends = NodeBackends()
        self._lock = threading.Lock()
        self._hosted: dict[str, Hosted] = {}
        self._giving_up: dict[str, Callable[[], object]] = {}  # token -> how to end its call
        self._cancelled: OrderedDict[str, None] = OrderedDict()
        self._relays: dict[str, SocketRelay] = {}  # socket path -> its relay

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

    def _instance(self, key: str) -> Hosted | Reply:
        hosted = self._hosted.get(key)
        if hosted is None or hosted.instance is None:
            return ("error", ("SandboxUnavailable", f"instance {key} is not on this node"))
        return hosted

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

    def figures(self) -> dict[str, float]:
        """What the node has free (`node_figures`), its slots and the instances it hosts."""
        return {**node_figures(), "slots": self._slots, "instances": len(self._hosted)}

    def start(
        self, key: str, spec: dict[str, Any], backend: str, shipment: list[Shipment] | None = None
    ) -> Reply:
        """Provisions the instance `key`; answers where it runs and its base commit.

        The shipment arrives wrapped in a list so Ray passes its object reference as is: the
        archive is fetched only on a node that lacks the directory.
        """
        with self._lock:
            if key in self._hosted:
                return ("error", ("Conflict", f"instance {key} is on this node already"))
            if len(self._hosted) >= self._slots:
                return (
                    "error",
                    ("LimitExceeded", f"this node holds {self._slots} instance(s), all placed"),
                )
            hosted = self._hosted[key] = Hosted(
                InstanceSpec.model_validate(spec), backend, shipment[0] if shipment else None
            )

        async def started() -> Reply:
            try:
                where = await hosted.start(self._backends)
            except Exception as exc:
                await hosted.stop()
                return _error(exc)
            import ray

            node_id = ray.get_runtime_context().get_node_id()
            host = {"hostname": socket.gethostname(), "pid": os.getpid()}
            return ("ok", {"node_id": node_id, **host, **where})

        reply = self._on_loop(started())
        with self._lock:
            stopped = self._hosted.get(key) is not hosted  # `stop` came while it started
            if reply[0] != "ok" and not stopped:
                del self._hosted[key]
        if reply[0] == "ok" and stopped:
            self._on_loop(hosted.stop())
            return ("error", ("SandboxUnavailable", f"instance {key} was stopped as it started"))
        return reply

    def relay_open(self, key: str, host: str, port: int) -> Reply:
        """A socket in this node's bridges directory relaying to `host:port` (a CLI agent's
        model bridge on the driver): its path, and where the workspaces' views show it."""
        relay = SocketRelay(host, port)

        async def opened() -> Reply:
            try:
                shown = await relay.open()
            except OSError as exc:
                relay.close()
                return _error(exc)
            self._relays[str(relay.path)] = relay
            return ("ok", (str(relay.path), shown))

        return self._on_loop(opened())

    def relay_close(self, key: str, path: str) -> Reply:
        """Ends the relay `relay_open` made at `path`."""
        relay = self._relays.pop(path, None)
        if relay is not None:
            self._loop.call_soon_threadsafe(relay.close)
        return ("ok", None)

    def ping(self, key: str) -> Reply:
        """Answers at once: the cost of an actor call itself (benchmarks, health checks)."""
        return ("ok", None)

    def create(self, key: str, name: str, archive: bytes | None = None) -> Reply:
        """Creates the workspace `name` on instance `key` (from an exported checkpoint)."""
        hosted = self._instance(key)
        if not isinstance(hosted, Hosted):
            return hosted
        return self._on_loop(hosted.create(name, archive))

    def fork(self, key: str, parent: str, name: str, checkpoint: str | None) -> Reply:
        """Creates the workspace `name` as a fork of `parent` (at `checkpoint`, or now)."""
        hosted = self._instance(key)
        if not isinstance(hosted, Hosted):
            return hosted
        return self._on_loop(hosted.fork(parent, name, checkpoint))

    def call(
        self, key: str, name: str, op: str, kwargs: dict[str, Any], token: str | None = None
    ) -> Reply:
        """Runs one workspace operation (`exec`, `read_file`, ...) and answers its result;
        `cancel(token)` ends it."""
        hosted = self._instance(key)
        if not isinstance(hosted, Hosted):
            return hosted
        workspace = hosted.workspaces.get(name)
        if workspace is None:
            return ("error", ("NotFound", f"no workspace {name!r} on this instance"))
        if op not in WORKSPACE_OPS:
            return ("error", ("InvalidInput", f"unknown workspace operation {op!r}"))
        if op == "exec" and hosted.direct and isinstance(workspace, SupervisedWorkspace):
            return self._exec_direct(hosted, workspace, kwargs, token)
        return self._on_loop(hosted.call(workspace, op, kwargs), token)

    def _exec_direct(
        self,
        hosted: Hosted,
        workspace: SupervisedWorkspace,
        kwargs: dict[str, Any],
        token: str | None,
    ) -> Reply:
        """`exec` on this thread, over a connection of its own (see the module's docstring)."""
        try:
            connection = self._take_connection(hosted)
        except errors.InvalidInput:  # this supervisor's stream carries no other connection
            hosted.direct = False
            return self._on_loop(hosted.call(workspace, "exec", kwargs), token)
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
                result = workspace.exec_on(connection, ExecRequest(**kwargs))
        except Exception as exc:
            if given_up.is_set():
                return CANCELLED
            return _error(exc)
        finally:
            self._give_back(hosted, connection)
        return ("ok", result.model_dump())

    def _take_connection(self, hosted: Hosted) -> BlockingConnection:
        with self._lock:
            if hosted.idle_connections:
                return hosted.idle_connections.pop()
        return asyncio.run_coroutine_threadsafe(hosted.connect(), self._loop).result()

    def _give_back(self, hosted: Hosted, connection: BlockingConnection) -> None:
        with self._lock:
            # Cancelled, timed out or broken, or its instance stopped meanwhile: never reused.
            if connection.closed or self._hosted.get(hosted.spec.key) is not hosted:
                connection.close()
                return
            hosted.idle_connections.append(connection)

    def destroy(self, key: str, name: str) -> Reply:
        """Removes the workspace `name`; a no-op if it is gone."""
        hosted = self._instance(key)
        if not isinstance(hosted, Hosted):
            return ("ok", None)
        return self._on_loop(hosted.destroy(name))

    def stop(self, key: str) -> Reply:
        """Destroys every workspace of instance `key` and releases it (a no-op if it is gone)."""
        with self._lock:
            hosted = self._hosted.pop(key, None)
            if hosted is None:
                return ("ok", None)
            idle, hosted.idle_connections = hosted.idle_connections, []
        for connection in idle:
            connection.close()
        return self._on_loop(hosted.stop())

    def shutdown(self) -> Reply:
        """Releases every instance and the node's backends (the actor is killed after)."""
        for key in list(self._hosted):
            self.stop(key)

        async def closed() -> Reply:
            await self._backends.aclose()
            return ("ok", None)

        return self._on_loop(closed())
