"""Where the engine meets the sandbox: tasks -> instances -> one workspace per trajectory step.

A `SandboxPool` belongs to one process (a CLI run, or the server's lifespan). It starts each
backend the first time a task needs it, in a host task of its own (a backend's `async with` must
be entered and left by the same task), and provisions instances under the campaign's
provisioning limit. A `TrajectorySandbox` hands an agent or a scorer its private workspace,
created on first use and destroyed when that step ends.

Self-healing lives here, for every backend alike: an instance that reports itself dead
(`Instance.dead`: its supervisor's stream ended, its container or engine went away, its node
died) fails the operations in flight on it as `SandboxUnavailable`, and the next use provisions
it again. Users of a dead instance queue on one lock per instance, so they all wait for the one
re-provisioning instead of each making their own.

Governance lives here too: a campaign's instance budget (`limits.instances`) bounds the
instances alive at once. A step holds a lease on its instance from its first use to its close;
an instance nobody leases is idle. A new instance that finds the budget reached closes the
least recently used idle one (waiting for one to become idle if none is), and an instance whose
tasks are all finished is closed as soon as it is idle (`release`). Both are pure runtime: an
instance is a cache of the task's frozen environment, the next use provisions it again (as
after a restart), and no trajectory's state depends on it, so the ledger records neither.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, Self

import anyio
import anyio.abc

from mcp_evalserver.errors import (
    Conflict,
    EvalServerError,
    ExcInfo,
    InvalidInput,
    SandboxUnavailable,
)
from mcp_evalserver.sandbox.base import Backend, Instance, InstanceSpec, Workspace
from mcp_evalserver.spec.campaign import RaySandboxConfig, SandboxConfig, Task
from mcp_evalserver.spec.harbor import harbor_of

BackendName = Literal["local", "docker", "ray"]

logger = logging.getLogger(__name__)


def instance_spec(task: Task) -> InstanceSpec:
    """The environment a task asks for.

    Raises:
        InvalidInput: the task names no environment (an answer-only task) or an invalid one.
    """
    if task.image is None and task.path is None:
        raise InvalidInput(
            f"task {task.id} has no environment: give it an `image` (docker) or a `path` (local)"
        )
    limits: dict[str, Any] = {}
    harbor = harbor_of(task.metadata)
    if harbor is not None:  # a Harbor task's own limits, where it gives them
        limits.update(
            build_context=harbor.build_context,
            build_context_hash=harbor.context_hash,
            build_timeout_s=harbor.build_timeout_s,
            cpus=harbor.cpus,
        )
        if harbor.memory_mb is not None:
            limits["memory_bytes"] = harbor.memory_mb << 20
        if harbor.storage_mb is not None:
            limits["disk_bytes"] = harbor.storage_mb << 20
    try:
        return InstanceSpec(
            image=task.image,
            path=task.path,
            workdir=task.workdir or "",
            setup=tuple(task.setup),
            paths=tuple(task.paths),
            network=task.network,
            # A Harbor task's commands expect what Docker gives the container Harbor uses.
            capabilities=task.capabilities or ("container" if harbor is not None else "none"),
            **limits,
        )
    except ValueError as exc:
        raise InvalidInput(f"task {task.id}: {exc}") from exc


def _harbor_needs_docker(task: Task, exc: Exception) -> str:
    return (
        f"task {task.id} is a Harbor task: its environment is an image, so it runs on the "
        "docker backend only (the local backend cannot stand in: the verifier needs /tests and "
        f"/logs/verifier in the task's own image), and docker cannot start here: {exc}"
    )


def backend_for(task: Task) -> BackendName:
    """An image runs on docker, a directory on the local backend."""
    return "docker" if task.image is not None else "local"


def workspace_name(campaign_id: str, trajectory_id: str, step: str) -> str:
    """A name unique per campaign, trajectory and step, safe for every backend."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", trajectory_id)[:48]
    digest = hashlib.sha256(f"{campaign_id}\0{trajectory_id}\0{step}".encode()).hexdigest()[:12]
    return f"{readable}-{step}-{digest}"


def make_backend(name: BackendName, ray_address: str = "auto") -> Backend:
    """A fresh backend of that kind (imported here so docker and ray stay optional)."""
    if name == "ray":
        from mcp_evalserver.sandbox.ray import RayBackend

        return RayBackend(ray_address)
    if name == "local":
        from mcp_evalserver.sandbox.local import LocalBackend

        return LocalBackend()
    from mcp_evalserver.sandbox.docker import DockerBackend

    return DockerBackend()


def require_placement(placement: SandboxConfig | None, ray_address: str | None) -> None:
    """Checks now, before anything is recorded or run, that this process can place instances
    where a campaign asks (`placement`, else the process's `ray_address`).

    Raises:
        InvalidInput: Ray is chosen and not installed; the message says how to install it.
    """
    if placement is not None:
        ray_address = placement.address if isinstance(placement, RaySandboxConfig) else None
    if ray_address is not None:
        from mcp_evalserver.sandbox.ray import import_ray

        import_ray()


@dataclass(frozen=True)
class Reprovisioned:
    """An instance found dead and provisioned again (a health event)."""

    backend: BackendName
    instance_key: str
    task_id: str
    reason: str
    ts: float


@dataclass(frozen=True)
class Closed:
    """An idle instance the pool closed: `evicted` to make room under the budget, or
    `released` because every task using it had finished."""

    backend: BackendName
    instance_key: str
    why: Literal["evicted", "released"]
    ts: float


#: Told when a call re-provisioned a dead instance (the runner records it in its ledger).
ReprovisionObserver = Callable[[Reprovisioned], Awaitable[None]]


@dataclass(frozen=True)
class InstanceCheck:
    """Run on an instance before a trajectory of the task uses it (a scorer's: can the task's
    tests start there?); `run` raises `InvalidInput` to refuse the instance for that task.

    `key` names what is checked (say, a digest of the test script): the pool runs each key
    once per instance, whoever made the instance first, and remembers a refusal per key, so
    one task's refusal never refuses another task that shares the instance.
    """

    key: str
    run: Callable[[Instance], Awaitable[None]]

    async def __call__(self, instance: Instance) -> None:
        await self.run(instance)


class SandboxPool:
    """The backends and instances of one process. Use as `async with SandboxPool() as pool:`.

    With `ray_address`, instances run on that Ray cluster's nodes unless a campaign says
    otherwise; one process uses at most one cluster. `backends` makes a backend of a kind
    (given the Ray address); a test can wrap a real one.
    """

    def __init__(
        self,
        ray_address: str | None = None,
        *,
        backends: Callable[[BackendName, str], Backend] = make_backend,
        sharers: int = 1,
    ) -> None:
        """`sharers`: how many campaigns use the pool (an evaluation set's): an instance is
        released once each of them has released it."""
        require_placement(None, ray_address)
        self.ray_address = ray_address
        self.sharers = sharers
        self._released_by: dict[tuple[BackendName, str], set[str]] = {}
        self._make_backend = backends
        self._backends: dict[BackendName, Backend] = {}
        self._instances: dict[tuple[BackendName, str], Instance] = {}
        self._lock = anyio.Lock()
        self._instance_locks: dict[tuple[BackendName, str], anyio.Lock] = {}
        # Why an instance died, kept until it is provisioned again (which may take retries).
        self._lost: dict[tuple[BackendName, str], str] = {}
        # Instances whose check failed: every later use gets the same error, nothing reruns.
        # Per (backend, instance key, check key).
        self._refused: dict[tuple[BackendName, str, str], InvalidInput] = {}
        self._checked: set[tuple[BackendName, str, str]] = set()
        #: Every re-provisioning this pool did, oldest first.
        self.reprovisioned: list[Reprovisioned] = []
        # Governance: steps holding each instance, when each was last used, instances being
        # provisioned or closed (both count against the budget: a container being removed
        # still holds its memory), and those to close once idle.
        self._leases: dict[tuple[BackendName, str], int] = {}
        self._last_used: dict[tuple[BackendName, str], float] = {}
        self._coming: set[tuple[BackendName, str]] = set()
        self._going = 0
        self._finished: set[tuple[BackendName, str]] = set()
        self._budget_lock = anyio.Lock()
        self._idle = anyio.Event()  # set (and replaced) whenever an instance becomes idle
        #: Every instance this pool closed while it ran (evicted or released), oldest first.
        self.closed: list[Closed] = []
        self._closing = anyio.Event()
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> Self:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        self._closing.set()
        group, self._group = self._group, None
        if group is not None:
            await group.__aexit__(*exc_info)

    async def backend(self, name: BackendName, address: str = "auto") -> Backend:
        """The running backend of that kind, started on first use (`address`: Ray's).

        Raises:
            InvalidInput: ray without Ray installed, or a second Ray cluster.
            SandboxUnavailable: the backend cannot start (no engine, no privileges).
        """
        async with self._lock:
            backend = self._backends.get(name)
            if backend is None:
                if self._group is None:
                    raise Conflict("use the sandbox pool as `async with SandboxPool() as pool`")
                backend = await self._group.start(self._host, name, address)
                self._backends[name] = backend
            return backend

    def nodes(self) -> list[dict[str, Any]] | None:
        """Where sandbox work runs now, per node of a Ray cluster (None: on this machine)."""
        backend = self._backends.get("ray")
        return backend.nodes() if backend is not None else None

    async def _host(
        self, name: BackendName, address: str, *, task_status: anyio.abc.TaskStatus[Backend]
    ) -> None:
        # The whole life of a backend is shielded, entry and exit inside one scope: when a
        # campaign fails or is cancelled, its backends must still stop their supervisors and
        # remove their mounts. It ends when the pool closes (`_closing` is set first).
        with anyio.CancelScope(shield=True):
            async with self._make_backend(name, address) as backend:
                task_status.started(backend)
                await self._closing.wait()

    async def instance(
        self,
        task: Task,
        provisioning: anyio.CapacityLimiter,
        on_reprovisioned: ReprovisionObserver | None = None,
        placement: SandboxConfig | None = None,
        check: InstanceCheck | None = None,
        budget: int | None = None,
    ) -> Instance:
        """The task's instance, provisioned (bounded by `provisioning`) the first time and
        again whenever it is found dead; `on_reprovisioned` hears of the latter.

        The caller holds a lease on it until `unlease`. A new instance needs room under
        `budget` (instances alive at once): the least recently used idle instance is closed
        for it, or it waits until one is idle.

        `placement` is the campaign's choice; without one the pool's own (`ray_address`).
        `check` runs once per instance and check key, whether this call made the instance or
        found it made for another task; if it refuses, this and every later call with that
        check raise its error (an instance nothing else uses yet is closed).

        Raises:
            InvalidInput: the task has no (valid) environment, or `check` refused it.
            InfrastructureError: provisioning or setup failed.
            SandboxUnavailable: the backend cannot provision.
        """
        spec = instance_spec(task)
        name: BackendName = backend_for(task)
        address = self.ray_address
        if placement is not None:
            address = placement.address if isinstance(placement, RaySandboxConfig) else None
        if address is not None:
            name = "ray"
        key = (name, spec.key)
        lock = self._instance_locks.setdefault(key, anyio.Lock())
        async with lock:
            checked = None if check is None else (*key, check.key)
            if checked is not None and (refused := self._refused.get(checked)) is not None:
                raise refused
            instance = self._instances.get(key)
            if instance is not None:
                if (reason := instance.dead) is None:
                    # Leased first: no eviction may take it while its check runs.
                    self._lease(key)
                    try:
                        # Made for another task or campaign: this task's check may not have run.
                        await self._check(instance, check, checked, fresh=False)
                    except BaseException:
                        self._leases[key] -= 1
                        raise
                    return instance
                logger.warning("instance %s of task %s died: %s", spec.key, task.id, reason)
                self._lost[key] = reason
                del self._instances[key]
            try:
                backend = await self.backend(name, address or "auto")
            except SandboxUnavailable as exc:
                if name == "docker" and harbor_of(task.metadata) is not None:
                    raise SandboxUnavailable(_harbor_needs_docker(task, exc)) from exc
                raise
            await self._make_room(key, budget)
            try:
                async with provisioning:
                    # The backend reaps its dead instance (supervisor, container) first.
                    instance = await backend.instance(spec)
                await self._check(instance, check, checked, fresh=True)
                self._instances[key] = instance
            finally:
                self._coming.discard(key)
                self._set_idle()  # the room it held may be free again
            self._lease(key)
            reason = self._lost.pop(key, None)
            if reason is not None:
                event = Reprovisioned(name, spec.key, task.id, reason, time.time())
                self.reprovisioned.append(event)
                if on_reprovisioned is not None:
                    await on_reprovisioned(event)
            return instance

    def ready(self, task: Task, placement: SandboxConfig | None = None) -> bool:
        """Whether the task's instance is alive now (using it needs no provisioning)."""
        instance = self._instances.get(self._key(task, placement))
        return instance is not None and instance.dead is None

    def alive(self) -> int:
        """Instances alive now (and being provisioned or closed), as the budget counts them."""
        alive = sum(instance.dead is None for instance in self._instances.values())
        return alive + len(self._coming) + self._going

    def _lease(self, key: tuple[BackendName, str]) -> None:
        self._leases[key] = self._leases.get(key, 0) + 1
        self._last_used[key] = time.monotonic()
        self._finished.discard(key)  # wanted again (another campaign, a resumed one)

    def _set_idle(self) -> None:
        self._idle.set()
        self._idle = anyio.Event()

    async def _make_room(self, key: tuple[BackendName, str], budget: int | None) -> None:
        """Reserves room for `key` under `budget`, closing the least recently used idle
        instance while there is none, or waiting until an instance becomes idle."""
        while True:
            async with self._budget_lock:
                if budget is None or self.alive() < budget:
                    self._coming.add(key)
                    return
                idle = [
                    k
                    for k, instance in self._instances.items()
                    if instance.dead is None and not self._leases.get(k)
                ]
                if idle:
                    victim = min(idle, key=lambda k: self._last_used.get(k, 0.0))
                    await self._close(victim, "evicted")
                    continue
                waiting = self._idle
            await waiting.wait()

    async def unlease(self, task: Task, placement: SandboxConfig | None = None) -> None:
        """Ends a lease taken by `instance`; an idle instance whose tasks are finished closes."""
        key = self._key(task, placement)
        left = self._leases.get(key, 0) - 1
        self._leases[key] = max(left, 0)
        self._last_used[key] = time.monotonic()
        if left <= 0:
            if key in self._finished:
                await self._close(key, "released")
            self._set_idle()

    async def release(
        self, task: Task, placement: SandboxConfig | None = None, *, by: str = ""
    ) -> None:
        """Says every task using this task's instance (in the caller's campaign, `by`) is
        finished: once every sharer has said so, the instance closes now if idle, else when its
        last lease ends."""
        if task.image is None and task.path is None:
            return
        key = self._key(task, placement)
        # Counted even before the instance exists: a sharer may finish its trajectories of a
        # task (an agent that submits nothing) before another provisions its instance.
        released = self._released_by.setdefault(key, set())
        released.add(by)
        if key not in self._instances or len(released) < self.sharers:
            return
        if self._leases.get(key):
            self._finished.add(key)
            return
        await self._close(key, "released")
        self._set_idle()

    async def _close(
        self, key: tuple[BackendName, str], why: Literal["evicted", "released"]
    ) -> None:
        self._finished.discard(key)
        instance = self._instances.pop(key, None)
        if instance is None:
            return
        self._leases.pop(key, None)
        self._last_used.pop(key, None)
        self.closed.append(Closed(key[0], key[1], why, time.time()))
        logger.info("instance %s %s", key[1], why)
        self._going += 1
        with anyio.CancelScope(shield=True):
            try:
                await instance.aclose()
            except EvalServerError as exc:
                logger.warning("instance %s: could not close it: %s", key[1], exc)
            finally:
                self._going -= 1

    def _key(self, task: Task, placement: SandboxConfig | None) -> tuple[BackendName, str]:
        name: BackendName = backend_for(task)
        address = self.ray_address
        if placement is not None:
            address = placement.address if isinstance(placement, RaySandboxConfig) else None
        if address is not None:
            name = "ray"
        return (name, instance_spec(task).key)

    async def _check(
        self,
        instance: Instance,
        check: InstanceCheck | None,
        checked: tuple[BackendName, str, str] | None,
        *,
        fresh: bool,
    ) -> None:
        """Runs `check` on `instance` unless it ran there already; a refusal is remembered,
        and closes the instance if nothing else has it yet (`fresh`)."""
        if check is None or checked is None or checked in self._checked:
            return
        try:
            await check(instance)
        except InvalidInput as exc:
            self._refused[checked] = exc
            if fresh:
                with anyio.CancelScope(shield=True):
                    await instance.aclose()
            raise
        self._checked.add(checked)


class Slot:
    """One step's token of a limiter it runs under (its trajectory or scoring slot), borrowed
    by this object rather than by a task: the step hands it back while it waits for its
    instance to be provisioned (`given_back`), whichever task asks for the workspace.

    Held through a wait for provisioning, the slots of an evaluation set went to steps whose
    instances were not made yet while steps whose instances were ready queued behind them
    (bench/eval_set.py: a fixer's scorings of provisioned tasks waited 9 s for oracle's).
    """

    def __init__(self, limiter: anyio.CapacityLimiter) -> None:
        self._limiter = limiter
        self._entered = False  # between the step's `async with` and its end
        self._held = False

    async def __aenter__(self) -> Self:
        await self._limiter.acquire_on_behalf_of(self)
        self._entered = self._held = True
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        self._entered = False
        self._release()

    def _release_if_ended(self) -> None:
        if not self._entered:
            self._release()

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._limiter.release_on_behalf_of(self)

    @asynccontextmanager
    async def given_back(self) -> AsyncIterator[None]:
        """Hands the token back for the block (if held) and takes it again after (shielded:
        the step's end releases what it holds)."""
        if not self._held:
            yield
            return
        self._release()
        try:
            yield
        finally:
            if self._entered:
                with anyio.CancelScope(shield=True):
                    await self._limiter.acquire_on_behalf_of(self)
                self._held = True
                self._release_if_ended()  # the step may have ended while this waited


class TrajectorySandbox:
    """One step's access to its private workspace (created on first use, destroyed at close)."""

    def __init__(
        self,
        pool: SandboxPool | None,
        task: Task,
        name: str,
        provisioning: anyio.CapacityLimiter,
        on_reprovisioned: ReprovisionObserver | None = None,
        placement: SandboxConfig | None = None,
        check: InstanceCheck | None = None,
        budget: int | None = None,
        slot: Slot | None = None,
    ) -> None:
        """`slot`: the step's slot, handed back while its instance is being provisioned."""
        self._pool = pool
        self._slot = slot
        self._budget = budget
        self._leased = False  # whether this step holds a lease on its instance
        self._placement = placement
        self._check = check
        self.node: str | None = None  # where the workspace runs, on a backend of many nodes
        self._task = task
        self._name = name
        self._provisioning = provisioning
        self._on_reprovisioned = on_reprovisioned
        self._workspace: Workspace | None = None
        self._lock = anyio.Lock()

    def part(self, number: int) -> TrajectorySandbox:
        """A sandbox of its own for part `number` of this step (a combined scorer's parts must
        not share a workspace: each applies the patch afresh). The caller closes it."""
        name = f"{self._name}-p{number}"
        return TrajectorySandbox(
            self._pool, self._task, name, self._provisioning, self._on_reprovisioned,
            self._placement, self._check, self._budget, self._slot,
        )  # fmt: skip

    @property
    def available(self) -> bool:
        """Whether this step can have a workspace (the task names an environment)."""
        return self._pool is not None and (
            self._task.image is not None or self._task.path is not None
        )

    async def workspace(self) -> Workspace:
        """The step's workspace: a fresh copy-on-write view of the task's instance.

        Raises:
            InvalidInput: the task has no environment.
            SandboxUnavailable: the instance or its backend is gone.
        """
        if self._workspace is not None:  # made already: no lock (a pass through the loop)
            return self._workspace
        async with self._lock:
            if self._workspace is None:
                instance = await self._instance()
                self._workspace = await instance.workspace(self._name)
                self.node = self._workspace.node
            return self._workspace

    async def start_at(self, archive: bytes) -> None:
        """Makes the step's workspace from an exported checkpoint (`export_checkpoint`).

        Raises:
            InvalidInput: not such an archive, or the task has no environment.
            Conflict: the step already has a workspace, or the backend cannot checkpoint.
            SandboxUnavailable: the instance or its backend is gone.
        """
        async with self._lock:
            if self._workspace is not None:
                raise Conflict(f"step {self._name} already has its workspace")
            instance = await self._instance()
            self._workspace = await instance.workspace_from_archive(self._name, archive)
            self.node = self._workspace.node

    async def _instance(self) -> Instance:
        if self._pool is None:
            raise InvalidInput("this run has no sandbox pool; tasks cannot use workspaces")
        waiting = self._slot is not None and not self._pool.ready(self._task, self._placement)
        async with self._slot.given_back() if waiting and self._slot else nullcontext():
            instance = await self._pool.instance(
                self._task, self._provisioning, self._on_reprovisioned, self._placement,
                self._check, self._budget,
            )  # fmt: skip
        self._leased = True
        return instance

    @property
    def made(self) -> Workspace | None:
        """The step's workspace if it made one (None: the step never used it)."""
        return self._workspace

    def adopt(self, workspace: Workspace) -> None:
        """Makes `workspace` (a fork made for this step) the step's workspace; closed with it."""
        self._workspace = workspace
        self.node = workspace.node

    async def aclose(self) -> None:
        """Destroys the workspace if one was made and ends the step's lease on its instance
        (shielded: cleanup survives cancellation)."""
        workspace, self._workspace = self._workspace, None
        with anyio.CancelScope(shield=True):
            if workspace is not None:
                try:
                    await workspace.destroy()
                except EvalServerError as exc:
                    # The step's result is already recorded; a workspace that cannot be
                    # removed (its instance died) must not fail the campaign.
                    logger.warning("could not destroy workspace %s: %s", self._name, exc)
            if self._leased and self._pool is not None:
                self._leased = False
                await self._pool.unlease(self._task, self._placement)
