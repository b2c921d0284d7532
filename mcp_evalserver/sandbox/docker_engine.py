"""The Docker engine as the docker backend needs it: async, labelled, errors translated.

Every blocking Docker SDK call runs in a worker thread (`anyio.to_thread`). Every container and
image this module makes carries labels naming the instance and the process that owns it, so a
later run can find what a dead one left behind and remove it, while leaving alone what a live
run on the same engine is using.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import logging
import os
import socket
import tarfile
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from mcp_evalserver.errors import InvalidInput, SandboxUnavailable

__all__ = [
    "BUILD_NETWORK_ENV",
    "LABEL_INSTANCE",
    "LABEL_OWNER",
    "NETWORK_ENV",
    "ContainerLimits",
    "DockerEngine",
    "ExecOutput",
    "base_image_tag",
]

LABEL_INSTANCE = "mcp-evalserver.instance"
LABEL_OWNER = "mcp-evalserver.owner"
LABEL_ROLE = "mcp-evalserver.role"
#: Names the engine's network that containers of `network: true` tasks join (default `bridge`).
NETWORK_ENV = "MCP_EVALSERVER_DOCKER_NETWORK"
#: The operator's choice for tasks that ask for network on an engine without one to give:
#: `none` in $MCP_EVALSERVER_DOCKER_NETWORK runs them offline, said in a warning per task.
OFFLINE = "none"
#: The network of image builds (`docker build --network`): `default` (the engine's, a bridge),
#: `host` (the machine's own, e.g. its package mirrors, on an engine started without a bridge)
#: or `none`. An operator's decision: a Dockerfile's RUN then reaches what that network does.
BUILD_NETWORK_ENV = "MCP_EVALSERVER_DOCKER_BUILD_NETWORK"
BUILD_NETWORKS = ("default", "host", "none")
# What the supervisor needs beyond a container's defaults: mounts and namespaces (SYS_ADMIN),
# each command's loopback brought up in its own network namespace (NET_ADMIN). A KubeRay
# worker pod needs the same (deploy/kuberay/raycluster.yaml; its test checks it against this).
SUPERVISOR_CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN")
# Drivers that give a container no namespace of its own (`host`) or no way out (`null`).
_NOT_ISOLATED_DRIVERS = frozenset({"host", "null"})

_REPO_ROOT = Path(__file__).resolve().parents[2]
_BUILD_BASE = _REPO_ROOT / "sandbox_images" / "build-base.sh"
_ENSURE_HINT = "start it with `bash scripts/ensure-docker.sh` as root"
# A shell loop rather than `sleep infinity`: busybox and older coreutils lack "infinity".
_KEEPALIVE = ["/bin/sh", "-c", "while :; do sleep 3600; done"]

_POOL_SIZE = 128

_log = logging.getLogger(__name__)
T = TypeVar("T")


def _image_name(listed: dict[str, Any]) -> str:
    """A listed image's tag, or its id once untagged (a later commit took its tag): the engine
    lists such an image as `<none>:<none>`, a name it then refuses to remove.
    """
    tags = [t for t in listed.get("RepoTags") or [] if t != "<none>:<none>"]
    return tags[0] if tags else str(listed["Id"])


def _release_frames(exc: BaseException) -> None:
    """Drops the locals of every finished frame in the tracebacks of `exc` and its causes."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # a running frame is skipped
        pending += [current.__cause__, current.__context__]


def base_image_tag() -> str:
    """The tag `sandbox_images/build-base.sh` gives the base image (a hash of the recipe)."""
    if _BUILD_BASE.is_file():
        return (
            "mcp-evalserver/base:bookworm-"
            + hashlib.sha256(_BUILD_BASE.read_bytes()).hexdigest()[:12]
        )
    return "mcp-evalserver/base:bookworm"


def _process_start_ticks(pid: int) -> str | None:
    """Start time of `pid` in clock ticks since boot: tells a live process from a reused pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    return stat.rsplit(")", 1)[1].split()[19]


def owner_id() -> str:
    """A new owner label: host, pid and start time of this process, and a token.

    The token tells apart two backends of one process, so closing one leaves the other's
    containers alone.
    """
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_process_start_ticks(pid)}:{os.urandom(4).hex()}"


def owner_is_alive(owner: str) -> bool:
    """False when the owner label names a process of this host that no longer runs."""
    host, pid, ticks, *_ = [*owner.split(":"), "", "", ""]
    if host != socket.gethostname() or not pid.isdigit():
        # Another host shares this engine (or the label is foreign): not ours to judge.
        return True
    return _process_start_ticks(int(pid)) == ticks


@dataclass(frozen=True)
class ContainerLimits:
    """Resource limits of an instance container (they protect the host, not one trajectory)."""

    # Workspace uppers on tmpfs count as the container's memory: leave room for them.
    memory: str = "8g"
    pids: int = 4096
    cpus: float | None = None
    store_size: str = "2g"


@dataclass(frozen=True)
class ExecOutput:
    """Exit code and combined output of a one-shot `docker exec`."""

    exit_code: int
    output: str


@dataclass
class DockerEngine:
    """An SDK client plus the facts about its engine the backend needs.

    Build with `await DockerEngine.connect()`. `task_network` is the engine network that
    containers of tasks with `network: true` join (`$MCP_EVALSERVER_DOCKER_NETWORK`, else
    `bridge`; `none`: such tasks run offline, the operator's decision). `build_network` is
    the network of image builds (`$MCP_EVALSERVER_DOCKER_BUILD_NETWORK`: default, host, none).
    """

    client: Any
    url: str
    apparmor: bool
    owner: str = field(default_factory=owner_id)
    task_network: str = field(default_factory=lambda: os.environ.get(NETWORK_ENV) or "bridge")
    build_network: str = field(
        default_factory=lambda: os.environ.get(BUILD_NETWORK_ENV) or "default"
    )

    def __post_init__(self) -> None:
        if self.build_network not in BUILD_NETWORKS:
            raise InvalidInput(
                f"${BUILD_NETWORK_ENV} is {self.build_network!r}; give one of "
                + ", ".join(BUILD_NETWORKS)
            )

    @classmethod
    async def connect(cls, base_url: str | None = None) -> DockerEngine:
        """Connects to the engine at `base_url` (default: `DOCKER_HOST` or the local socket).

        Raises:
            SandboxUnavailable: no engine answers; the message says how to start one.
            InvalidInput: $MCP_EVALSERVER_DOCKER_BUILD_NETWORK names no build network.
        """
        url = base_url or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"

        def connect_blocking() -> tuple[Any, bool]:
            import docker

            if url.startswith("unix://"):
                # Probe the socket ourselves: the SDK leaks the socket of a failed connect.
                with socket.socket(socket.AF_UNIX) as probe:
                    probe.settimeout(10)
                    probe.connect(url.removeprefix("unix://"))
            # urllib3 breaks ("pool is None" after queue.Full) when more threads than its pool
            # size share one client; anyio's thread pool is 40, the bench runs 64 at once.
            client = docker.DockerClient(base_url=url, timeout=300, max_pool_size=_POOL_SIZE)
            try:
                info = client.info()
            except BaseException:
                client.close()
                raise
            apparmor = any("apparmor" in opt for opt in info.get("SecurityOptions") or [])
            return client, apparmor

        try:
            client, apparmor = await anyio.to_thread.run_sync(connect_blocking)
        except Exception as exc:  # the SDK raises DockerException, requests or OS errors
            raise SandboxUnavailable(
                f"no Docker engine at {url} ({type(exc).__name__}: {exc}); {_ENSURE_HINT}, "
                "or use the local backend"
            ) from exc
        try:
            return cls(client=client, url=url, apparmor=apparmor)
        except InvalidInput:  # the operator's settings: say so, and leave no client open
            await anyio.to_thread.run_sync(client.close)
            raise

    @property
    def api(self) -> Any:
        """The low-level `docker.APIClient`."""
        return self.client.api

    async def call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Runs a blocking SDK call in a thread and translates its errors.

        Raises:
            SandboxUnavailable: the engine refused or is gone; the message names `what`.
        """
        import docker.errors

        try:
            return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
        except docker.errors.APIError as exc:
            raise SandboxUnavailable(
                f"Docker engine at {self.url} refused to {what}: {exc.explanation or exc}"
            ) from exc
        except (OSError, docker.errors.DockerException) as exc:
            # docker-py leaves the socket of a failed connect (engine down) in a frame of this
            # traceback: release it now, not at some later collection, or every retry while an
            # engine restarts holds a file descriptor.
            _release_frames(exc)
            raise SandboxUnavailable(
                f"lost the Docker engine at {self.url} while trying to {what}: {exc}; "
                f"check `docker info` ({_ENSURE_HINT})"
            ) from exc

    async def aclose(self) -> None:
        await anyio.to_thread.run_sync(self.client.close)

    # Images.

    async def ensure_image(self, image: str) -> None:
        """Makes `image` present, pulling it when the engine does not have it.

        Raises:
            InvalidInput: the image is neither present nor pullable.
        """
        import docker.errors

        def ensure_blocking() -> None:
            try:
                self.client.images.get(image)
                return
            except docker.errors.ImageNotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code == 400:  # not a valid reference at all
                    raise InvalidInput(f"{image!r} is not a valid image name: {exc}") from exc
                raise
            try:
                self.client.images.pull(image)
            except (docker.errors.APIError, OSError) as exc:
                raise InvalidInput(
                    f"image {image!r} is not on the Docker engine and could not be pulled "
                    f"({exc}); build it (see sandbox_images/README.md; the base image comes "
                    "from `bash sandbox_images/build-base.sh`) or fix the task's `image`"
                ) from exc

        await self.call(f"find image {image}", ensure_blocking)

    async def build_image(self, context: str, tag: str, *, limit_s: float = 1800.0) -> None:
        """Builds `tag` from the Dockerfile in the host directory `context`, unless the engine
        has it already (the tag names the context's hash, so a present tag is this build).

        Raises:
            InvalidInput: the build failed; the message holds the end of its log.
        """
        import docker.errors

        def build_blocking() -> None:
            try:
                self.client.images.get(tag)
                return
            except docker.errors.ImageNotFound:
                pass
            lines: list[str] = []
            network = None if self.build_network == "default" else self.build_network
            try:
                for chunk in self.api.build(
                    path=context,
                    tag=tag,
                    rm=True,
                    forcerm=True,
                    decode=True,
                    timeout=limit_s,
                    network_mode=network,
                ):
                    if "stream" in chunk:
                        lines.append(str(chunk["stream"]))
                    if "error" in chunk:
                        lines.append(str(chunk["error"]))
                        raise InvalidInput(
                            f"the image of {context}/Dockerfile did not build (build network "
                            f"{self.build_network!r}: ${BUILD_NETWORK_ENV} or --build-network "
                            "host lets its RUN reach this machine's network): "
                            + "".join(lines)[-3000:]
                        )
            except docker.errors.BuildError as exc:
                raise InvalidInput(
                    f"the image of {context}/Dockerfile did not build: {exc}"
                ) from exc
            except docker.errors.APIError as exc:
                if exc.status_code is not None and exc.status_code < 500:
                    raise InvalidInput(
                        f"the image of {context}/Dockerfile did not build: {exc.explanation}"
                    ) from exc
                raise

        await self.call(f"build image {tag} from {context}", build_blocking)

    # Containers.

    def labels(self, instance_key: str, role: str) -> dict[str, str]:
        return {LABEL_INSTANCE: instance_key, LABEL_OWNER: self.owner, LABEL_ROLE: role}

    async def run_container(
        self,
        image: str,
        *,
        instance_key: str,
        role: str,
        limits: ContainerLimits,
        network: bool,
        sys_admin: bool,
        store: str | None,
        binds: dict[str, str] | None = None,
        readonly: Mapping[str, str] | None = None,
    ) -> str:
        """Starts a detached container that idles until removed; returns its id. `binds`:
        host directory -> where the container sees it (read-write); `readonly`: the same,
        read-only."""
        host_config: dict[str, Any] = {
            "init": True,
            "mem_limit": limits.memory,
            "memswap_limit": limits.memory,
            "pids_limit": limits.pids,
        }
        if limits.cpus is not None:
            host_config["nano_cpus"] = int(limits.cpus * 1e9)
        if sys_admin:
            # Workspaces mount overlays and unshare namespaces; --privileged is refused here.
            host_config["cap_add"] = list(SUPERVISOR_CAPABILITIES)
            if self.apparmor:
                host_config["security_opt"] = ["apparmor=unconfined"]
        if store is not None:
            # Overlay uppers cannot live on the container's own overlayfs root.
            host_config["tmpfs"] = {store: f"size={limits.store_size},mode=0711"}
        volumes = {host: {"bind": inside, "mode": "rw"} for host, inside in (binds or {}).items()}
        shown = (readonly or {}).items()
        volumes.update({host: {"bind": inside, "mode": "ro"} for host, inside in shown})
        if volumes:
            host_config["volumes"] = volumes
        network_mode = await self._network_mode(network)
        if network and network_mode == "none":
            _log.warning(
                "instance %s asks for network; it runs offline: the operator set %s=%s",
                instance_key, NETWORK_ENV, OFFLINE,
            )  # fmt: skip
        name = f"mcp-evalserver-{role}-{instance_key[:12]}-{os.urandom(3).hex()}"
        container = await self.call(
            f"start a container from {image}",
            self.client.containers.run,
            image,
            entrypoint=_KEEPALIVE[:1],
            command=_KEEPALIVE[1:],
            detach=True,
            name=name,
            labels=self.labels(instance_key, role),
            network_mode=network_mode,
            **host_config,
        )
        container_id: str = container.id
        return container_id

    async def _network_mode(self, network: bool) -> str:
        """`none`, or for a task that asks for network the engine's `task_network`.

        Never the host's network namespace: a trajectory there sees the host's interfaces and
        reaches every service listening on its loopback.

        Raises:
            InvalidInput: the engine has no such network, or it is not an isolated one.
        """
        if not network:
            return "none"
        name = self.task_network
        if name == OFFLINE:
            return "none"

        def drivers_blocking() -> dict[str, str]:
            # The name filter matches substrings: keep the exact name only.
            listed = self.client.networks.list(names=[name])
            return {n.name: str(n.attrs.get("Driver")) for n in listed if n.name == name}

        driver = (await self.call("list networks", drivers_blocking)).get(name)
        if driver is None or driver in _NOT_ISOLATED_DRIVERS:
            problem = (
                f"has no network {name!r}"
                if driver is None
                else f"network {name!r} uses the {driver!r} driver, which isolates nothing"
            )
            raise InvalidInput(
                f"the task asks for network, and the Docker engine at {self.url} {problem}. "
                "A task with network gets a network namespace of its own, never the host's: "
                "start dockerd with its default bridge (not --bridge=none; "
                "MCP_EVALSERVER_DOCKERD_BRIDGE=default bash scripts/ensure-docker.sh), or create "
                "a bridge network (`docker network create --driver bridge NAME`) and name it in "
                f"${NETWORK_ENV}; or, the operator's decision, run such tasks offline with "
                f"{NETWORK_ENV}=none (--task-network none); or set the task's `network` to "
                "false (a Harbor task: allow_internet = false)"
            )
        return name

    async def require_shell(self, container_id: str, image: str) -> None:
        """Raises InvalidInput when the image has no `/bin/sh` (the container cannot idle).

        Asked of the filesystem, not by running it: a container whose shell is missing may
        still look alive for a moment after it started.

        Raises:
            InvalidInput: there is no /bin/sh in the image.
        """
        import docker.errors

        def exists_blocking() -> bool:
            try:
                chunks, _ = self.api.get_archive(container_id, _KEEPALIVE[0])
            except docker.errors.NotFound:
                return False
            for _ in chunks:  # a few KiB: read it so the connection goes back to the pool
                pass
            return True

        if not await self.call(f"look for {_KEEPALIVE[0]} in {image}", exists_blocking):
            raise InvalidInput(
                f"image {image!r} has no {_KEEPALIVE[0]}: the docker backend needs "
                f"{_KEEPALIVE[0]} in the image (and python3 >= 3.8 for fast workspaces)"
            )

    async def exec(
        self,
        container_id: str,
        cmd: Sequence[str],
        *,
        workdir: str | None = None,
        environment: Mapping[str, str] | None = None,
        user: str = "root",
    ) -> ExecOutput:
        """Runs one command to completion (`docker exec`); a non-zero exit is data."""

        def exec_blocking() -> ExecOutput:
            api = self.api
            exec_id = api.exec_create(
                container_id,
                list(cmd),
                workdir=workdir,
                environment=dict(environment or {}),
                user=user,
            )["Id"]
            output: bytes = api.exec_start(exec_id)
            code = api.exec_inspect(exec_id).get("ExitCode")
            return ExecOutput(
                int(code if code is not None else -1), output.decode("utf-8", "replace")
            )

        return await self.call(f"exec {cmd[0]!r} in {container_id[:12]}", exec_blocking)

    async def put_files(
        self, container_id: str, files: Mapping[str, bytes], mode: int = 0o644
    ) -> None:
        """Copies files (absolute path -> content) into a container."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path, content in files.items():
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size, info.mode = len(content), mode
                tar.addfile(info, io.BytesIO(content))
        await self.call(
            f"copy files into {container_id[:12]}",
            self.api.put_archive,
            container_id,
            "/",
            buffer.getvalue(),
        )

    async def commit(self, container_id: str, repository: str, instance_key: str) -> str:
        """Commits a container to `repository:latest`, labelled like the instance; returns it."""
        labels = self.labels(instance_key, "image")
        await self.call(
            f"commit {container_id[:12]}",
            self.api.commit,
            container_id,
            repository=repository,
            tag="latest",
            changes=[f"LABEL {key}={json.dumps(value)}" for key, value in labels.items()],
        )
        return f"{repository}:latest"

    async def remove_container(self, container_id: str) -> None:
        """Removes a container and its anonymous volumes; a container already gone is fine."""
        import docker.errors

        def remove_blocking() -> None:
            try:
                self.api.remove_container(container_id, force=True, v=True)
            except docker.errors.NotFound:
                pass
            except docker.errors.APIError as exc:
                if exc.status_code != 409:
                    raise
                # "Removal already in progress" (another run cleaning up): wait till it is done.
                with contextlib.suppress(docker.errors.NotFound):
                    self.api.wait(container_id, timeout=60, condition="removed")

        await self.call(f"remove container {container_id[:12]}", remove_blocking)

    async def remove_image(self, image: str) -> None:
        import docker.errors

        def remove_blocking() -> None:
            with contextlib.suppress(docker.errors.NotFound):
                self.client.images.remove(image, force=True)

        await self.call(f"remove image {image}", remove_blocking)

    async def remove_leftovers(self, *, everything_of_ours: bool = False) -> list[str]:
        """Removes containers and images whose owner process is dead; returns their names.

        With `everything_of_ours`, also what this process made (used at close).
        """

        def find_blocking() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
            containers = self.api.containers(all=True, filters={"label": LABEL_OWNER})
            images = self.api.images(filters={"label": LABEL_OWNER})
            return (
                [(c["Id"], (c.get("Labels") or {}).get(LABEL_OWNER, "")) for c in containers],
                [(_image_name(i), (i.get("Labels") or {}).get(LABEL_OWNER, "")) for i in images],
            )

        containers, images = await self.call("list labelled containers", find_blocking)

        def doomed(owner: str) -> bool:
            return (everything_of_ours and owner == self.owner) or not owner_is_alive(owner)

        removed: list[str] = []
        for container_id, owner in containers:
            if doomed(owner):
                await self.remove_container(container_id)
                removed.append(container_id)
        for image, owner in images:
            if doomed(owner):
                await self.remove_image(image)
                removed.append(image)
        if removed:
            _log.info("removed %d leftover containers/images: %s", len(removed), removed)
        return removed
