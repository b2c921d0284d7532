"""The `ray` backend: instances packed on the nodes of a Ray cluster, workspaces as actor calls.

The driver (this process) keeps the engine; only sandbox work moves. Each node that offers
`sandbox_slots` (how many instances it holds at once) gets one actor of ours, pinned to it
(`NodeHost`, see `ray_node.py`), that hosts every instance placed there by the node's own
`local` (a `path`) or `docker` (an `image`) backend. Every workspace of an instance is on that
node: one copy of the repository per node, shared by its workspaces, and one Ray worker
process per node however many instances it holds.

Placement: a new instance goes to the node with the most room, counted in instances: its free
slots, its available memory over `instance_memory_mb` and its free disk over
`instance_disk_mb` (the node reports them), the smallest of the three; ties go to the node
with more idle CPUs, then to the one with fewer instances. When no node has room, the least
recently used idle instance (no workspace) is released, and placed again if it is needed
again; with none idle, the placement waits for one. A node that joins adds its slots, and new
instances go there.

A `path` the node does not have is shipped once through the object store (`shipping.py`).

Faults: when a node dies, its actor dies with every instance on it; every call on them (in
flight or later) raises `SandboxUnavailable`, which the scheduler retries. Such an instance is
then `dead` and stays so; the pool asks the backend for it again and gets a new one, placed on
a node that is alive. The same happens to one instance when its own supervisor or container
dies under a live actor.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

import anyio

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import (
    Backend,
    ExecRequest,
    ExecResult,
    FileEntry,
    FindsElsewhere,
    Instance,
    InstanceSpec,
)
from mcp_evalserver.sandbox.ray_node import NodeHost, Reply
from mcp_evalserver.sandbox.shipping import Shipment, identity, pack

log = logging.getLogger(__name__)

SLOTS_RESOURCE = "sandbox_slots"
INSTALL_HINT = "install it with `pip install 'mcp-evalserver[ray]'`"
# How long an instance may wait for a free slot (and for its setup) before that is a fault.
PLACEMENT_TIMEOUT_S = 1800.0
STOP_TIMEOUT_S = 30.0
# Calls a node's actor runs at once, for all its instances (a thread each, made when the actor
# starts: with 64 an actor's PSS was 85 MB, with 256 it was 87.5); more wait in Ray's queue
# for a free one. A cancel never waits behind them: it has threads of its own.
OPS_AT_ONCE = 256
CONTROL = "control"
# What a node's actor holds of its node's slots (placement counts whole slots itself).
NODE_ACTOR_SLOTS = 0.01
# How long a node's actor may take to answer what it has free (its start included).
FIGURES_TIMEOUT_S = 120.0
# What a node must have free for one more instance, beyond its slot: memory for its
# supervisor and a few workspaces' commands, disk for its shipped directory and records.
INSTANCE_MEMORY_MB = 256
INSTANCE_DISK_MB = 256
MB = 1 << 20


def import_ray() -> ModuleType:
    """The `ray` module.

    Raises:
        InvalidInput: Ray is not installed; the message says how to install it.
    """
    try:
        import ray
    except ImportError as exc:
        raise errors.InvalidInput(
            f"the ray sandbox needs Ray, which is missing: {INSTALL_HINT}"
        ) from exc
    return ray


def connect(address: str) -> None:
    """Connects this process to the cluster at `address` (once; Ray allows one per process).

    Raises:
        InvalidInput: Ray is missing, or this process is connected to another cluster.
        SandboxUnavailable: the cluster cannot be reached.
    """
    ray = import_ray()
    if ray.is_initialized():
        if _connected.get("address") not in (None, address):
            raise errors.InvalidInput(
                f"this process is connected to the Ray cluster at {_connected['address']!r}; "
                f"one process can use one cluster, so {address!r} needs a server of its own"
            )
        return
    try:
        ray.init(
            address=address,
            namespace="mcp-evalserver",
            log_to_driver=False,
            logging_level=logging.WARNING,
        )
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise errors.SandboxUnavailable(
            f"cannot connect to the Ray cluster at {address!r}: {exc}; start one with "
            "`ray start --head --resources '{\"sandbox_slots\": 8}'` or give its address"
        ) from exc
    _connected["address"] = address


_connected: dict[str, str] = {}


@dataclass
class _Node:
    """A node's actor (`NodeHost`) and what the node last said it has free."""

    node_id: str
    handle: Any  # ray.actor.ActorHandle
    slots: int
    alive: bool = True
    figures: dict[str, float] = field(default_factory=dict)

    def room(self, instances: int, memory_mb: float, disk_mb: float) -> int:
        """How many more instances it holds: the fewest of its free slots, memory and disk."""
        figures = self.figures
        by_memory = figures.get("memory_available", 0) // (memory_mb * MB) if memory_mb else None
        by_disk = figures.get("disk_free", 0) // (disk_mb * MB) if disk_mb else None
        limits = [self.slots - instances, by_memory, by_disk]
        return int(min(limit for limit in limits if limit is not None))

    def idle_cpus(self) -> float:
        return max(0.0, self.figures.get("cpus", 0) - self.figures.get("load", 0))


@dataclass
class _Placement:
    """One instance on a node's actor: where it runs and what runs on it now."""

    node: _Node
    key: str
    hostname: str = ""
    pid: int = 0  # of the node's actor: the same for every instance on the node
    base_commit: str | None = None
    info: dict[str, Any] = field(default_factory=dict)
    own_alive: bool = True
    workspaces: set[str] = field(default_factory=set)
    commands: int = 0
    last_used: float = field(default_factory=time.monotonic)

    @property
    def node_id(self) -> str:
        return self.node.node_id

    @property
    def handle(self) -> Any:
        return self.node.handle

    @property
    def alive(self) -> bool:
        """False once it was released, its own instance died, or its node's actor did."""
        return self.own_alive and self.node.alive


class RayBackend(Backend):
    """Instances on the nodes of a Ray cluster. Use as `async with RayBackend(address):`."""

    name = "ray"

    def __init__(
        self,
        address: str = "auto",
        *,
        slots_resource: str = SLOTS_RESOURCE,
        placement_timeout_s: float = PLACEMENT_TIMEOUT_S,
        calls_at_once: int = OPS_AT_ONCE,
        instance_memory_mb: float = INSTANCE_MEMORY_MB,
        instance_disk_mb: float = INSTANCE_DISK_MB,
    ) -> None:
        self.address = address
        self.slots_resource = slots_resource
        self.placement_timeout_s = placement_timeout_s
        self.calls_at_once = calls_at_once  # per node's actor
        self.instance_memory_mb = instance_memory_mb
        self.instance_disk_mb = instance_disk_mb
        self._instances: dict[str, RayInstance] = {}
        self._placing = anyio.Lock()
        self._released = anyio.Event()
        self._shipments: dict[str, Shipment] = {}
        self._nodes: dict[str, dict[str, Any]] = {}  # alive nodes, as of the last placement
        self._hosts: dict[str, _Node] = {}  # node id -> its actor
        self._host_class: Any = None
        #: Idle instances released because no node had room for a new one.
        self.evictions = 0

    async def __aenter__(self) -> RayBackend:
        await anyio.to_thread.run_sync(connect, self.address)
        ray = import_ray()
        self._host_class = ray.remote(concurrency_groups={CONTROL: 2})(NodeHost)
        await self._refresh_nodes()
        return self

    async def instance(self, spec: InstanceSpec) -> RayInstance:
        if self._host_class is None:
            raise errors.Conflict("use the backend as `async with RayBackend(address) as backend`")
        instance = self._instances.get(spec.key)
        if instance is not None and instance.dead is not None:
            await instance.evict()  # a dead instance stays dead: its users get a new one
            instance = None
        if instance is None:
            instance = self._instances[spec.key] = RayInstance(self, spec)
        await instance.placement()
        return instance

    async def aclose(self) -> None:
        instances, self._instances = list(self._instances.values()), {}
        hosts, self._hosts = list(self._hosts.values()), {}
        ray = import_ray()
        with anyio.CancelScope(shield=True):
            for instance in instances:
                await instance.aclose()
            for host in hosts:
                if host.alive:
                    with anyio.move_on_after(STOP_TIMEOUT_S), contextlib.suppress(Exception):
                        await host.handle.shutdown.remote()
                with contextlib.suppress(Exception):
                    ray.kill(host.handle)

    def nodes(self) -> list[dict[str, Any]]:
        """Per node: its slots, and the instances, workspaces and commands in flight on it."""
        rows: dict[str, dict[str, Any]] = {}
        for node_id, node in self._nodes.items():
            rows[node_id] = {
                "node": node_id,
                "address": node.get("NodeManagerAddress", ""),
                "slots": int(node.get("Resources", {}).get(self.slots_resource, 0)),
                "instances": [],
                "workspaces": 0,
                "commands_in_flight": 0,
            }
        for key, instance in sorted(self._instances.items()):
            placed = instance.placed
            if placed is None or not placed.alive:
                continue
            row = rows.setdefault(
                placed.node_id,
                {"node": placed.node_id, "address": "", "slots": 0, "instances": []},
            )
            row["instances"].append(key)
            row["workspaces"] = row.get("workspaces", 0) + len(placed.workspaces)
            row["commands_in_flight"] = row.get("commands_in_flight", 0) + placed.commands
        return list(rows.values())

    def placed_on(self) -> dict[str, list[str]]:
        """Per node's actor (its id): the instances placed there now."""
        placed: dict[str, list[str]] = {}
        for key, instance in sorted(self._instances.items()):
            if instance.placed is not None and instance.placed.alive:
                placed.setdefault(instance.placed.node_id, []).append(key)
        return placed

    async def _refresh_nodes(self) -> int:
        """Reads which nodes are alive; marks actors on dead ones; returns the total slots."""
        ray = import_ray()
        listed = await anyio.to_thread.run_sync(ray.nodes)
        self._nodes = {n["NodeID"]: n for n in listed if n.get("Alive")}
        for node_id, host in self._hosts.items():
            if node_id not in self._nodes:
                host.alive = False
        return sum(self._slots(n) for n in self._nodes.values())

    def _slots(self, node: dict[str, Any]) -> int:
        return int(node.get("Resources", {}).get(self.slots_resource, 0))

    async def _with_room(self) -> _Node | None:
        """The node with the most room for one more instance (its actor made if it has none
        yet), or None if no node has room."""
        ray = import_ray()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        hosts: list[_Node] = []
        for node_id, node in self._nodes.items():
            slots = self._slots(node)
            host = self._hosts.get(node_id)
            if slots <= 0 or (host is not None and host.alive):
                if host is not None:
                    host.slots = slots
                    hosts.append(host)
                continue
            handle = self._host_class.options(
                num_cpus=0,
                # A sliver of a slot: an autoscaler must not take a node hosting instances
                # for an idle one (a node whose resources are all free is idle to it).
                resources={self.slots_resource: NODE_ACTOR_SLOTS},
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                max_restarts=0,
                max_concurrency=self.calls_at_once,
            ).remote(slots)
            host = self._hosts[node_id] = _Node(node_id, handle, slots)
            hosts.append(host)
        # On the actor's control threads: never behind the calls that fill its others.
        replies = [
            (host, host.handle.figures.options(concurrency_group=CONTROL).remote())
            for host in hosts
        ]
        counts: dict[str, int] = {}
        for instance in self._instances.values():
            if instance.placed is not None and instance.placed.alive:
                counts[instance.placed.node_id] = counts.get(instance.placed.node_id, 0) + 1
        best: tuple[tuple[float, ...], _Node] | None = None
        for host, ref in replies:
            try:
                with anyio.fail_after(FIGURES_TIMEOUT_S):  # its start included
                    figures = await ref
            except ray.exceptions.RayActorError as exc:
                log.warning("node %s: its actor is gone: %s", host.node_id[:12], exc)
                host.alive = False
                continue
            except (TimeoutError, ray.exceptions.RayError) as exc:
                log.warning("node %s: no figures from its actor: %s", host.node_id[:12], exc)
                continue  # no room there this time
            host.figures = figures
            ours = counts.get(host.node_id, 0)
            room = host.room(ours, self.instance_memory_mb, self.instance_disk_mb)
            if room <= 0:
                continue
            rank = (room, host.idle_cpus(), -ours)
            if best is None or rank > best[0]:
                best = (rank, host)
        return best[1] if best is not None else None

    async def _place(self, instance: RayInstance) -> _Placement:
        """`instance` on the node with the most room (releasing idle ones if none has any).

        Raises:
            SandboxUnavailable: the cluster offers no slots, or none freed in time.
        """
        node: _Node | None = None
        async with self._placing:
            with anyio.move_on_after(self.placement_timeout_s) as waited:
                while True:
                    if await self._refresh_nodes() == 0:
                        raise errors.SandboxUnavailable(
                            f"no node of the Ray cluster at {self.address!r} offers "
                            f"`{self.slots_resource}`; start workers with `ray start --address "
                            f"HEAD --resources '{{\"{self.slots_resource}\": 8}}'`"
                        )
                    node = await self._with_room()
                    if node is not None:
                        break
                    live = [i for i in self._instances.values() if i.placed and i.placed.alive]
                    idle = [i for i in live if i.placed and not i.placed.workspaces]
                    if idle:
                        await min(idle, key=lambda i: i.placed.last_used if i.placed else 0).evict()
                        self.evictions += 1
                        continue
                    self._released = anyio.Event()
                    # A joining node frees no workspace: look again now and then.
                    with anyio.move_on_after(2.0):
                        await self._released.wait()
            if waited.cancelled_caught:
                raise errors.SandboxUnavailable(
                    f"no node had room for instance {instance.spec.key} within "
                    f"{self.placement_timeout_s:g}s (room: a free `{self.slots_resource}` "
                    f"slot, {self.instance_memory_mb:g} MB of memory available and "
                    f"{self.instance_disk_mb:g} MB of disk free); add nodes or slots to the Ray "
                    "cluster, or lower the campaign's `limits.instances`"
                )
            assert node is not None
            shipment = await self._shipment(instance.spec)
            placed = _Placement(node, instance.spec.key)
            instance.placed = placed  # counted from now on, while its start is awaited
        try:
            with anyio.fail_after(self.placement_timeout_s + instance.spec.setup_timeout_s):
                started = await _call(
                    placed,
                    "start",
                    instance.spec.model_dump(mode="json"),
                    "docker" if instance.spec.image is not None else "local",
                    [shipment] if shipment is not None else None,
                )
        except BaseException:
            placed.own_alive = False
            with anyio.CancelScope(shield=True):
                await _stop(placed)
            self.release()
            raise
        placed.hostname = started["hostname"]
        placed.pid = started["pid"]
        placed.base_commit = started["base_commit"]
        placed.info = started["info"]
        return placed

    async def _shipment(self, spec: InstanceSpec) -> Shipment | None:
        """The packed `path` of a spec, put into the object store once per backend."""
        if spec.path is None:
            return None
        shipment = self._shipments.get(spec.path)
        if shipment is None:
            source = identity(spec.path)
            if source is None:
                raise errors.InvalidInput(f"instance path {spec.path!r} is not a directory")
            data, digest = await anyio.to_thread.run_sync(pack, spec.path)
            ray = import_ray()
            archive = await anyio.to_thread.run_sync(ray.put, data)
            shipment = Shipment(spec.path, digest, len(data), source, archive)
            self._shipments[spec.path] = shipment
        return shipment

    def release(self) -> None:
        """Wakes placements waiting for room (a workspace ended or an instance died)."""
        self._released.set()


class RayInstance(Instance):
    """An instance on a node's actor; placed again (elsewhere) if it dies."""

    def __init__(self, backend: RayBackend, spec: InstanceSpec) -> None:
        self.spec = spec
        self.backend = backend
        self.placed: _Placement | None = None
        self._lock = anyio.Lock()

    @property
    def base_commit(self) -> str | None:
        return self.placed.base_commit if self.placed else None

    @property
    def dead(self) -> str | None:
        """Why it is gone (its node or its supervisor died), or None; the backend places it
        again."""
        placed = self.placed
        if placed is None or placed.alive:
            return None  # released on purpose (idle) or alive: the next workspace places it
        return f"its instance on node {placed.node_id[:12] or '?'} is gone"

    @property
    def info(self) -> dict[str, Any]:
        """The node's instance's own `info` (supervisor pid, version, enforced limits)."""
        return dict(self.placed.info) if self.placed else {}

    async def placement(self) -> _Placement:
        """This instance's live placement, placed if it has none (never placed, or released
        while idle).

        Raises:
            SandboxUnavailable: it died (`dead`): ask the backend for a new instance.
        """
        async with self._lock:
            if self.placed is not None and not self.placed.alive:
                raise _gone(self.placed, "it died")
            if self.placed is None:
                self.placed = await self.backend._place(self)
            self.placed.last_used = time.monotonic()
            return self.placed

    async def ping(self) -> None:
        """One actor call that does nothing (what a workspace operation adds to it is ours)."""
        await _call(await self.placement(), "ping")

    async def workspace(self, name: str) -> RayWorkspace:
        return await self._create(name, None)

    async def workspace_from_archive(self, name: str, archive: bytes) -> RayWorkspace:
        return await self._create(name, archive)

    async def _create(self, name: str, archive: bytes | None) -> RayWorkspace:
        placed = await self.placement()
        if name in placed.workspaces:
            raise errors.Conflict(f"workspace {name!r} exists")
        placed.workspaces.add(name)
        try:
            await _call(placed, "create", name, archive)
        except BaseException:
            placed.workspaces.discard(name)
            self.backend.release()
            raise
        return RayWorkspace(self, placed, name)

    async def evict(self) -> None:
        """Releases the instance on its node; the next workspace places it again."""
        placed, self.placed = self.placed, None
        if placed is None:
            return
        with anyio.CancelScope(shield=True):
            await _stop(placed)
            placed.own_alive = False
        self.backend.release()

    async def aclose(self) -> None:
        await self.evict()


class RayWorkspace(FindsElsewhere):
    """A workspace on its instance's node; every operation is one actor call."""

    def __init__(self, instance: RayInstance, placed: _Placement, name: str) -> None:
        self.instance = instance
        self.name = name
        self.node = placed.node_id
        self._placed = placed

    async def _op(self, op: str, **kwargs: Any) -> Any:
        placed = self._placed
        placed.last_used = time.monotonic()
        if op == "exec":
            placed.commands += 1
        try:
            return await _call(placed, "call", self.name, op, kwargs, token=next(_tokens))
        finally:
            if op == "exec":
                placed.commands -= 1

    async def _exec(self, request: ExecRequest) -> ExecResult:
        # The node's workspace checks it again: `exec`'s own arguments travel.
        cmd = request.cmd if isinstance(request.cmd, str) else request.argv
        result = await self._op("exec", **{**asdict(request), "cmd": cmd, "env": request.variables})
        return ExecResult.model_validate(result)

    async def read_file(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        data: bytes = await self._op("read_file", path=path, max_bytes=max_bytes)
        return data

    @contextlib.asynccontextmanager
    async def relayed_socket(self, host: str, port: int) -> AsyncIterator[str]:
        """For the block, a unix socket on the workspace's node that relays each connection to
        `host:port` over TCP (`socket_relay.py`); yields where the workspace's view shows it.

        Raises:
            SandboxUnavailable: the instance (or its node) is gone.
            InfrastructureError: the node could not make the socket.
        """
        path, shown = await _call(self._placed, "relay_open", host, port)
        try:
            yield str(shown)
        finally:
            with anyio.CancelScope(shield=True), contextlib.suppress(errors.EvalServerError):
                await _call(self._placed, "relay_close", path)

    async def write_file(
        self, path: str, data: bytes | str, *, mode: int | None = None
    ) -> int | None:
        previous: int | None = await self._op("write_file", path=path, data=data, mode=mode)
        return previous

    async def list(self, path: str = ".") -> list[FileEntry]:
        entries = await self._op("list", path=path)
        return [FileEntry.model_validate(e) for e in entries]

    async def _find(self, op: str, **arguments: Any) -> Any:
        return await self._op(op, **arguments)

    async def diff(self) -> str:
        patch: str = await self._op("diff")
        return patch

    async def reset(self) -> None:
        await self._op("reset")

    async def checkpoint(self) -> str:
        checkpoint: str = await self._op("checkpoint")
        return checkpoint

    async def restore(self, checkpoint: str) -> None:
        await self._op("restore", checkpoint=checkpoint)

    async def end_processes(self) -> None:
        await self._op("end_processes")

    async def export_checkpoint(self, checkpoint: str, *, max_bytes: int = 256 << 20) -> bytes:
        archive: bytes = await self._op(
            "export_checkpoint", checkpoint=checkpoint, max_bytes=max_bytes
        )
        return archive

    async def fork(self, name: str, *, checkpoint: str | None = None) -> RayWorkspace:
        """A fork on the same node (its layers are there), counted like any workspace."""
        placed = self._placed
        if name in placed.workspaces:
            raise errors.Conflict(f"workspace {name!r} exists")
        placed.workspaces.add(name)
        try:
            await _call(placed, "fork", self.name, name, checkpoint)
        except BaseException:
            placed.workspaces.discard(name)
            self.instance.backend.release()
            raise
        return RayWorkspace(self.instance, placed, name)

    async def destroy(self) -> None:
        """Removes the workspace; a no-op if it or its node is already gone."""
        placed = self._placed
        if self.name not in placed.workspaces:
            return
        try:
            if placed.alive:
                with contextlib.suppress(errors.NotFound, errors.SandboxUnavailable):
                    await _call(placed, "destroy", self.name)
        finally:
            placed.workspaces.discard(self.name)
            self.instance.backend.release()


_tokens = (str(n) for n in itertools.count(1))  # names a `call` to cancel (ray_node.py)


async def _call(placed: _Placement, method: str, *args: Any, token: str | None = None) -> Any:
    """One call on `placed`'s instance: its value, or the error the node answered, raised here.

    A call given a `token` (the method takes it) can be ended: if the caller gives up, the node
    is told to end it (Ray does not interrupt a threaded actor's running call), which kills
    its command.

    Raises:
        SandboxUnavailable: the instance (or its node) is gone.
        EvalServerError: what the node's backend raised, same class.
    """
    ray = import_ray()
    if not placed.alive:
        raise _gone(placed, "it was released")
    named = {"token": token} if token is not None else {}
    ref = getattr(placed.handle, method).remote(placed.key, *args, **named)
    try:
        reply: Reply = await ref
    except anyio.get_cancelled_exc_class():
        # The caller gave up (a timeout, a cancelled trajectory): stop the work on the node
        # too, which kills the command's processes, as cancelling a local exec does.
        with contextlib.suppress(Exception):
            ray.cancel(ref)  # still queued on the node: it never starts
        if token is not None:
            with contextlib.suppress(Exception):
                cancel = placed.handle.cancel.options(concurrency_group=CONTROL)
                cancel.remote(token)  # running: the node ends it
        raise
    except ray.exceptions.RayActorError as exc:
        placed.node.alive = False  # the node's actor is gone, and every instance on it
        raise _gone(placed, f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    except ray.exceptions.RayError as exc:
        placed.own_alive = False
        await _stop(placed)
        raise _gone(placed, f"{type(exc).__name__}: {str(exc)[:300]}") from exc
    status, value = reply
    if status == "error":
        name, message = value
        error_class = getattr(errors, name, errors.InfrastructureError)
        if not (isinstance(error_class, type) and issubclass(error_class, errors.EvalServerError)):
            error_class = errors.InfrastructureError
        if issubclass(error_class, errors.SandboxUnavailable):
            # The node's own instance is gone (its supervisor or container died): so is this
            # placement. Its slot is freed; the pool asks the backend for a new instance.
            placed.own_alive = False
            await _stop(placed)
        raise error_class(message)
    return value


def driver_address() -> str:
    """The address the cluster's nodes reach this process's machine at (Ray's own choice)."""
    address: str = import_ray().util.get_node_ip_address()
    return address


async def _stop(placed: _Placement) -> None:
    """Releases `placed`'s instance on its node, if the node's actor is alive (bounded)."""
    if not placed.node.alive:
        return
    with (
        anyio.CancelScope(shield=True),
        anyio.move_on_after(STOP_TIMEOUT_S),
        contextlib.suppress(Exception),
    ):
        await placed.handle.stop.remote(placed.key)


def _gone(placed: _Placement, why: str) -> errors.SandboxUnavailable:
    return errors.SandboxUnavailable(
        f"instance {placed.key} on node {placed.node_id[:12]} is gone ({why}); its "
        "trajectories are retried and the instance is placed again on a node that is alive"
    )
