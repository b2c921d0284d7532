"""The `docker` backend: one long-lived container per instance, the supervisor over one exec.

An instance is a container started from the task's image with `--cap-add SYS_ADMIN` (workspaces
are overlay mounts in their own namespaces), `--network none` unless the task asks for network
(then a bridge network of the engine's: never the host's), memory/pids/cpu limits, and a tmpfs
at `/trajs` for the workspaces' upper layers (an overlay upper cannot live on the container's
own overlayfs root). The supervisor is copied in with
`put_archive` (with the compiled holder, see native.py) and started by ONE `docker exec -i`;
every request of every workspace then goes through a unix socket in a directory shared with
the container, past dockerd (docker_side_door.py), or, with an engine that shares no directory
with us, through that exec's stdio. The setup runs once inside it, then the container's
filesystem is frozen.

Containers are keyed by the spec's key (image, setup, ...) and reused by every campaign and
trajectory until the backend closes. At start-up, containers and images left by a dead run are
removed (found by label). Images without python3 >= 3.8 cannot host the supervisor: they get one
container per trajectory instead (see `docker_fallback.py`), and the instance's `info` says so.
"""

from __future__ import annotations

import collections
import logging
from dataclasses import replace
from pathlib import Path

import anyio
import anyio.abc

from mcp_evalserver import errors
from mcp_evalserver.sandbox import agent_paths
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec
from mcp_evalserver.sandbox.client import SUPERVISOR_FILES, SupervisorClient
from mcp_evalserver.sandbox.docker_engine import ContainerLimits, DockerEngine, base_image_tag
from mcp_evalserver.sandbox.docker_fallback import NOTE as FALLBACK_NOTE
from mcp_evalserver.sandbox.docker_fallback import PerTrajectoryInstance
from mcp_evalserver.sandbox.docker_side_door import (
    IO_MOUNT,
    listen_argv,
    make_io_dir,
    open_side_door,
    remove_io_dir,
)
from mcp_evalserver.sandbox.docker_stream import open_exec_stream
from mcp_evalserver.sandbox.native import CONTAINER_PATH, native_holder
from mcp_evalserver.sandbox.supervised import SupervisedInstance
from mcp_evalserver.spec.harbor import tree_hash

__all__ = ["STORE", "SUPERVISOR_PATH", "DockerBackend", "base_image_tag"]

STORE = "/trajs"
SUPERVISOR_PATH = "/opt/mcp-evalserver/supervisor"  # the folder, run as `python3 -I -S DIR`
IO_ROOT = "/run/mcp-evalserver/docker-io"  # here: a directory per instance container
# Exit 0 only where the supervisor can run; `sh -c` so a missing python3 is exit 127, not an
# exec error that some engines report differently.
_PYTHON_CHECK = 'python3 -c "import sys; sys.exit(sys.version_info < (3, 8))"'

log = logging.getLogger(__name__)


async def _same_context(context: str, recorded: str | None) -> None:
    """Refuses a build context changed since its task was read: the image's tag names the
    recorded hash, and a build of other files under that tag would be a different task.

    Raises:
        InvalidInput: the context's files differ from those recorded.
    """
    now = await anyio.to_thread.run_sync(tree_hash, Path(context))
    if recorded is not None and now != recorded:
        raise errors.InvalidInput(
            f"{context} changed since the campaign read it (its files hash to {now[:16]}, "
            f"recorded {recorded[:16]}): put it back, or start a new campaign"
        )


class DockerBackend(Backend):
    """Instances are containers on one Docker engine.

    Use as `async with DockerBackend() as backend:`. At most `provisioning` instances are
    provisioned at once: many parallel container starts and execs make dockerd stall.

    Args:
        base_url: the engine (default: `DOCKER_HOST`, else the local socket).
        provisioning: instances provisioned concurrently.
        limits: resource limits of each instance container.
        network: the engine network that containers of tasks with `network: true` join
            (default `$MCP_EVALSERVER_DOCKER_NETWORK`, else `bridge`); it must exist and
            isolate (not `host`), else such a task is refused.
        python_holder: workspaces keep the supervisor's Python holder (see native.py).
        side_door: requests reach the supervisor through a unix socket in a directory shared
            with the container, past dockerd (see docker_side_door.py); False, or an engine
            that shares no directory with us, keeps them on the `docker exec` stream.
    """

    name = "docker"

    def __init__(
        self,
        *,
        base_url: str | None = None,
        provisioning: int = 2,
        limits: ContainerLimits | None = None,
        network: str | None = None,
        python_holder: bool = False,
        side_door: bool = True,
    ) -> None:
        self._base_url = base_url
        self._python_holder = python_holder  # the fallback holder, not the compiled one
        self._side_door = side_door  # requests past dockerd where it can (docker_side_door)
        self._network = network
        self._limiter = anyio.CapacityLimiter(provisioning)
        self._limits = limits or ContainerLimits()
        self._instances: dict[str, Instance] = {}
        self._locks: dict[str, anyio.Lock] = collections.defaultdict(anyio.Lock)
        self._group: anyio.abc.TaskGroup | None = None
        self._engine: DockerEngine | None = None

    @property
    def engine(self) -> DockerEngine:
        if self._engine is None:
            raise errors.Conflict("use the backend as `async with DockerBackend() as backend`")
        return self._engine

    async def __aenter__(self) -> DockerBackend:
        """Connects to the engine and removes what dead runs left behind.

        Raises:
            SandboxUnavailable: no engine answers (the message says how to start one).
        """
        self._engine = await DockerEngine.connect(self._base_url)
        if self._network is not None:
            self._engine.task_network = self._network
        try:
            await self._engine.remove_leftovers()
        except BaseException:
            await self._engine.aclose()
            raise
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def instance(self, spec: InstanceSpec) -> Instance:
        self.engine  # noqa: B018 (raises Conflict outside `async with`)
        if spec.image is None:
            raise errors.InvalidInput(
                "the docker backend runs images: give the task an `image` (the base image is "
                f"{base_image_tag()!r}; see sandbox_images/README.md), or use the local backend"
            )
        if spec.paths:
            raise errors.InvalidInput(
                "declared `paths` are host paths for the local backend; an image holds its "
                "files itself: copy them into the image, or use the local backend"
            )
        async with self._locks[spec.key]:
            existing = self._instances.pop(spec.key, None)
            if existing is not None:
                if existing.dead is None:
                    self._instances[spec.key] = existing
                    return existing
                # Its supervisor, container or engine died: drop what is left before a new
                # one. An engine still restarting cannot remove it now; the label finds it at
                # close (or the next start-up) instead.
                with anyio.CancelScope(shield=True):
                    try:
                        await existing.aclose()
                    except errors.SandboxUnavailable as exc:
                        log.warning("instance %s: could not remove its remains: %s", spec.key, exc)
            async with self._limiter:
                instance = await self._provision(spec, spec.image)
            self._instances[spec.key] = instance
            return instance

    async def _instance_container(
        self, spec: InstanceSpec, image: str, *, supervised: bool, io_dir: str | None = None
    ) -> str:
        """Starts the instance's container: with the supervisor's store and SYS_ADMIN (its
        workspaces are mounted inside), or without (a container per trajectory); `io_dir` is
        bind-mounted at IO_MOUNT."""
        if spec.build_context is not None:
            await _same_context(spec.build_context, spec.build_context_hash)
            await self.engine.build_image(spec.build_context, image, limit_s=spec.build_timeout_s)
        await self.engine.ensure_image(image)
        return await self.engine.run_container(
            image,
            instance_key=spec.key,
            role="instance",
            limits=self._limits if spec.cpus is None else replace(self._limits, cpus=spec.cpus),
            network=spec.network,
            sys_admin=supervised,
            store=STORE if supervised else None,
            binds={io_dir: IO_MOUNT} if io_dir else None,
            # The CLI agents' runtime and bridge sockets: shown to workspaces by the supervisor.
            readonly={
                str(p["path"]): str(p["target"])
                for p in await anyio.to_thread.run_sync(agent_paths.view_paths)
            }
            if supervised
            else None,
        )

    async def _provision(self, spec: InstanceSpec, image: str) -> Instance:
        assert self._group is not None
        engine = self.engine
        io_dir = None
        if self._side_door and engine.url.startswith("unix://"):  # else it is not ours to share
            io_dir = await anyio.to_thread.run_sync(make_io_dir, IO_ROOT)
        try:
            container = await self._instance_container(spec, image, supervised=True, io_dir=io_dir)
        except BaseException:
            if io_dir:
                remove_io_dir(io_dir)
            raise

        async def on_close() -> None:
            with anyio.CancelScope(shield=True):
                try:
                    await engine.remove_container(container)
                finally:
                    if io_dir:
                        await anyio.to_thread.run_sync(remove_io_dir, io_dir)

        stream = None
        transport: anyio.abc.ByteStream | None = None
        try:
            await engine.require_shell(container, image)
            python = await engine.exec(container, ["/bin/sh", "-c", _PYTHON_CHECK])
            if python.exit_code != 0:
                log.warning("instance %s (%s): %s", spec.key, image, FALLBACK_NOTE)
                return await PerTrajectoryInstance.provision(engine, spec, container)
            sources = {
                f"{SUPERVISOR_PATH}/{f.name}": await anyio.Path(f).read_bytes()
                for f in SUPERVISOR_FILES
            }
            await engine.put_files(container, sources)
            holder = await native_holder(self._python_holder)
            if holder is not None:  # static: it runs whatever the image's C library
                binary = {CONTAINER_PATH: await anyio.Path(holder).read_bytes()}
                await engine.put_files(container, binary, mode=0o755)
            # The supervisor changes into the workdir before running setup; an image without
            # it (the bare base image) gets an empty one.
            await engine.exec(container, ["mkdir", "-p", spec.workdir])
            stream = await open_exec_stream(
                engine.api,
                container,
                ["python3", "-I", "-S", SUPERVISOR_PATH, *listen_argv(io_dir)],
                on_stderr=lambda data: log.warning(
                    "supervisor %s: %s", spec.key, data.decode("utf-8", "replace").rstrip()
                ),
            )
            transport = stream
            if io_dir:
                transport = await open_side_door(stream, io_dir, self._group)
            client = SupervisorClient(transport)
            await client.start(self._group)
            instance = await SupervisedInstance.open(
                client,
                spec,
                mode="container",
                store=STORE,
                on_close=on_close,
                holder=CONTAINER_PATH if holder is not None else None,
                extra_paths=await anyio.to_thread.run_sync(agent_paths.view_paths),
            )
        except BaseException as exc:
            tail = stream.stderr_tail.strip() if stream is not None else ""
            if stream is not None:
                with anyio.CancelScope(shield=True):
                    await (transport or stream).aclose()  # the side door closes its session
            await on_close()
            if isinstance(exc, errors.SandboxUnavailable) and tail:
                raise errors.SandboxUnavailable(f"{exc}; supervisor said: {tail[-2000:]}") from exc
            raise
        instance.info.update(mode="supervisor", container=container, image=image)
        instance.info["transport"] = "socket" if transport is not stream else "exec stream"
        instance.info["io_dir"] = io_dir  # on this machine, bind-mounted at IO_MOUNT
        return instance

    async def aclose(self) -> None:
        instances, self._instances = list(self._instances.values()), {}
        for instance in instances:
            with anyio.CancelScope(shield=True):
                await instance.aclose()
        if self._group is not None:
            group, self._group = self._group, None
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
        if self._engine is not None:
            engine, self._engine = self._engine, None
            with anyio.CancelScope(shield=True):
                # Whatever an interrupted provisioning left (probes, half-made instances).
                await engine.remove_leftovers(everything_of_ours=True)
                await engine.aclose()
