"""One worker's `EvalService`: it drives campaigns while it holds the driver lease, and asks the
worker that does otherwise.

What goes to the driver (over `rpc.DriverLink`): every `EvalService.call` operation (start,
status, wait with its progress and events, ...), claims, the grant of a claim to this worker
(once), its lease's renewal (a few times per lease, never per call: a takeover comes back as a
`revoke` note that cancels the claim's calls here), and submissions. What does not: the
workspace work itself. The driver names the workspace and its supervisor; the
worker asks once per supervisor for a connection of its own (a socket the driver passes on)
and sends exec, read, write, diff and checkpoints straight to the supervisor. Where no socket
can be passed (instances on Ray nodes), the whole tool call runs in the driver instead.
"""

from __future__ import annotations

import asyncio
import collections.abc
import functools
import logging
import os
import socket
import time
import types
import typing
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

import anyio
import anyio.abc
from pydantic import TypeAdapter

from mcp_evalserver.errors import Conflict, EvalServerError, ExcInfo, InvalidInput
from mcp_evalserver.sandbox.client import SupervisorClient
from mcp_evalserver.sandbox.supervised import AttachedWorkspace, SupervisedWorkspace
from mcp_evalserver.server.campaign_queries import EventFn
from mcp_evalserver.server.events import CampaignEvent
from mcp_evalserver.server.front.lease import DriverLease, Holder, read_holder
from mcp_evalserver.server.front.rpc import (
    DriverLink,
    DriverLost,
    Peer,
    serve_driver,
    with_socket,
)
from mcp_evalserver.server.front.worker_config import WorkerConfig
from mcp_evalserver.server.models import ClaimedTrajectory, Submitted
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.trajectories import TOOLS, ExternalTrajectories
from mcp_evalserver.server.trajectory.tools import TrajectoryTools
from mcp_evalserver.server.trajectory.transcript import call_entry, note_result
from mcp_evalserver.spec.campaign import Task
from mcp_evalserver.spec.submission import Submission

logger = logging.getLogger(__name__)

#: Tools a worker runs in the driver whole: forking makes trajectories, which only it can.
_TOOLS = frozenset({"sandbox_exec", "read_file", "write_file", "edit_file", "search",
                    "list_files", "get_diff", "checkpoint", "restore", "fork_trajectory", "submit",
                    "report_usage"})  # fmt: skip


#: Why a claim ended when the process driving campaigns stopped (claims live in it).
_DRIVER_STOPPED = "the process driving campaigns stopped, and the claims it held with it"


def _driver_stopped(tool: str, context: _RemoteContext | None = None) -> str:
    """What a call on a claim answers when the driver stopped during it: `submitted`, the
    submission was handed in, and whether the dead driver recorded it is unknown."""
    if tool != "submit":
        return f"{_DRIVER_STOPPED}; claim again with claim_trajectory"
    if context is None:
        where = "read campaign_status"
    else:
        trajectory = f"campaign://{context.campaign_id}/trajectories/{context.trajectory_id}"
        where = f"read campaign_status or the resource {trajectory}"
    return (
        f"{_DRIVER_STOPPED} while it was recording this submission, which may or may not have "
        f"counted: {where} (phase `generated` or later: it counted; otherwise the trajectory "
        "runs again: claim it with claim_trajectory)"
    )


#: Claims a worker remembers (which trajectory each holds); older ones are asked again.
_CLAIMS_KEPT = 100_000


@functools.cache
def _adapter(hint: Any) -> TypeAdapter[Any]:
    return TypeAdapter(hint)


@functools.cache
def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    return typing.get_type_hints(function)


def _callback_parameters(hint: Any) -> list[Any]:
    """The parameter types of a callback's type (`ProgressFn`, `EventFn | None`)."""
    arms = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for arm in arms:
        if typing.get_origin(arm) is collections.abc.Callable:
            return list(typing.get_args(arm)[0])
    raise InvalidInput(f"{hint} is not a callback")


class _Grantee:
    """A worker granted a claim (it works on the workspace directly): when the claim is taken
    over or its trajectory ends, the worker hears why and stops its calls on it."""

    def __init__(self, peer: Peer, claim_id: str, service: FrontService) -> None:
        self.peer, self.claim_id, self.service = peer, claim_id, service

    def cancel(self) -> None:
        self.peer.grants.pop(self.claim_id, None)
        reason = self.service.claims.ended(self.claim_id) or "the claim ended"
        self.peer.post({"id": 0, "note": "revoke", "args": [self.claim_id, reason]})


@dataclass(eq=False)
class _Grant:
    """A claim this worker works on directly until the driver revokes it; `context` None: its
    workspace cannot be reached from here (its tools run in the driver)."""

    context: _RemoteContext | None
    lease_s: float
    renewed_at: float
    calls: set[anyio.CancelScope] = field(default_factory=set)
    revoked: str | None = None


@dataclass(frozen=True)
class _AttachedSource:
    available: bool
    attached: AttachedWorkspace | None

    async def workspace(self) -> AttachedWorkspace:
        if self.attached is None:
            raise InvalidInput("this trajectory's task has no workspace")
        return self.attached


@dataclass(frozen=True)
class _RemoteContext:
    campaign_id: str
    trajectory_id: str
    task: Task
    sandbox: _AttachedSource
    meter: None = None  # usage is recorded by the driver (`RemoteTrajectories.report_usage`)


class FrontService(EvalService):
    """The `EvalService` of one worker of `--workers N` (see the module's docstring)."""

    def __init__(self, state_dir: Path, *, worker: WorkerConfig, **options: Any) -> None:
        self._resume_at_start = bool(options.pop("resume_running", False))
        super().__init__(state_dir, **options)
        self.worker = worker
        self._lease = DriverLease(state_dir)
        self._socket = worker.run_dir / f"driver-{os.getpid()}.sock"
        self._front: AsyncExitStack | None = None
        self._front_group: anyio.abc.TaskGroup | None = None
        self._link: DriverLink | None = None
        # Worker side: our connections to supervisors, by the driver's key; claims we know.
        self._supervisors: dict[str, SupervisorClient] = {}
        self._connecting: dict[str, anyio.Lock] = {}
        self._grants: dict[str, _Grant] = {}
        self._tasks: dict[str, Task] = {}  # by campaign and task id: thousands share one
        # Driver side: the supervisors it hands connections to, by key.
        self._known: weakref.WeakValueDictionary[str, SupervisorClient] = (
            weakref.WeakValueDictionary()
        )

    @property
    def driving(self) -> bool:
        """Whether this process holds the driver lease (drives every campaign)."""
        return self._lease.held

    async def __aenter__(self) -> Self:
        await super().__aenter__()
        try:
            async with AsyncExitStack() as stack:
                group = await stack.enter_async_context(anyio.create_task_group())
                stack.push_async_callback(self._close_front)
                self._front_group = group
                self._link = DriverLink(self._driver_socket, group)
                self._link.on_note = self._heard
                await group.start(self._contend)
                self._front = stack.pop_all()
        except BaseException:
            await super().__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        front, self._front = self._front, None
        try:
            if front is not None:
                assert self._front_group is not None
                self._front_group.cancel_scope.cancel()
                await front.__aexit__(None, None, None)
        finally:
            # Campaigns stop (recorded as a shutdown) before another worker may take over.
            await super().__aexit__(*exc_info)
            self._lease.release()

    async def _close_front(self) -> None:
        if self._link is not None:
            await self._link.aclose()
        for client in self._supervisors.values():
            await client.aclose()
        self._socket.unlink(missing_ok=True)

    def _driver_socket(self) -> str | None:
        holder = read_holder(self.store.state_dir)
        return holder.socket if holder is not None else None

    async def _contend(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Listens, then waits for the lease; once held, drives (resuming what it should)."""
        assert self._front_group is not None
        handlers = {
            "call": self._serve_call,
            "events": self._serve_events,
            "claim": self._serve_claim,
            "grant": self._serve_grant,
            "renew": self._serve_renew,
            "noted": self._serve_noted,
            "submit": self._serve_submit,
            "tool": self._serve_tool,
            "connect": self._serve_connect,
        }
        await self._front_group.start(serve_driver, self._socket, handlers, self._peer_gone)
        me = Holder(pid=os.getpid(), socket=str(self._socket), server=self.worker.server)
        previous: Holder | None = None
        try:
            previous = self._lease.try_take(me)
        except BlockingIOError:
            task_status.started()
            previous = await self._lease.take(me)
        else:
            task_status.started()
        takeover = previous is not None and previous.server == me.server
        logger.info(
            "worker %d (pid %d) drives campaigns%s",
            self.worker.index,
            me.pid,
            f" (took over from pid {previous.pid})" if takeover and previous else "",
        )
        if takeover or self._resume_at_start:
            assert self._group is not None
            self._group.start_soon(self._resume_all)

    async def _resume_all(self) -> None:
        """Resumes every interrupted campaign whose ledger nobody writes (the driver before us
        died: its ledger locks died with it)."""
        for campaign_id in self.store.list_ids():
            try:
                if self.store.load(campaign_id).interrupted and campaign_id not in self._runs:
                    await self.call(EvalService.resume, campaign_id=campaign_id)
                    logger.info("resumed interrupted campaign %s", campaign_id)
            except EvalServerError as exc:
                logger.warning("could not resume campaign %s: %s", campaign_id, exc)

    # Worker side: what tools call.

    async def call(self, operation: Callable[..., Any], /, **arguments: Any) -> Any:
        if self.driving:
            return await super().call(operation, **arguments)
        hints = _hints(operation)
        sent: dict[str, Any] = {}
        callbacks: dict[str, Callable[..., Awaitable[None]]] = {}
        for name, value in arguments.items():
            if callable(value):
                callbacks[name] = value
            elif value is not None:
                sent[name] = _adapter(hints[name]).dump_python(
                    value, mode="json", exclude_unset=True
                )

        async def notes(name: str, values: list[Any]) -> None:
            parameters = _callback_parameters(hints[name])
            await callbacks[name](
                *(_adapter(t).validate_python(v) for t, v in zip(parameters, values, strict=True))
            )

        request = {"op": operation.__name__, "args": sent, "callbacks": list(callbacks)}
        result = await self._driver().call("call", request, notes)
        return _adapter(hints["return"]).validate_python(result)

    def forward_events(self, deliver: EventFn) -> Callable[[], None]:
        if self.driving or self._front_group is None:
            return super().forward_events(deliver)
        scope = anyio.CancelScope()

        async def follow() -> None:
            async def notes(name: str, values: list[Any]) -> None:
                await deliver(_adapter(CampaignEvent).validate_python(values[0]))

            with scope:
                try:
                    await self._driver().call("events", {}, notes)
                except EvalServerError as exc:
                    logger.warning("stopped following campaign events: %s", exc)

        self._front_group.start_soon(follow)
        return scope.cancel

    def trajectories(self) -> ExternalTrajectories:
        if self.driving:
            return super().trajectories()
        return RemoteTrajectories(self)

    def _driver(self) -> DriverLink:
        if self._link is None:
            raise Conflict("the server is not running (it is starting or stopping)")
        return self._link

    def _heard(self, name: str, values: list[Any]) -> None:
        """A note of the driver's own: a claim revoked (taken over, ended), or the driver gone
        (every claim went with it)."""
        if name == "revoke":
            self._revoke(str(values[0]), str(values[1]))
        elif name == "lost":
            for claim_id in list(self._grants):
                self._revoke(claim_id, _DRIVER_STOPPED)

    def _revoke(self, claim_id: str, reason: str) -> None:
        grant = self._grants.pop(claim_id, None)
        if grant is not None:
            grant.revoked = reason
            for scope in grant.calls:
                scope.cancel()

    async def run_claimed(
        self, claim_id: str, tool: str, run: Callable[[TrajectoryTools], Awaitable[Any]]
    ) -> Any:
        """Runs `run` on the claimed trajectory's tools here, its workspace reached directly.
        The claim is granted to this worker once (the driver revokes it when it is taken over
        or ends) and its lease renewed in the background, a few times per lease.

        Raises:
            _InDriver: the workspace cannot be reached from here: run `tool` in the driver.
            Conflict: the claim is no longer live, was taken over during the call, or the
                driver stopped during it (the message says what to do next).
            NotFound: no such claim.
        """
        try:
            grant = await self._grant(claim_id)
        except DriverLost as exc:
            raise Conflict(_driver_stopped("grant")) from exc
        if grant.context is None:
            raise _InDriver(tool)
        self._renew(claim_id, grant)
        with anyio.CancelScope() as scope:
            grant.calls.add(scope)
            holding = self._hold(claim_id, grant)
            try:
                result = await run(TrajectoryTools(grant.context))
            except DriverLost as exc:
                raise Conflict(_driver_stopped(tool, grant.context)) from exc
            finally:
                holding.cancel()
                grant.calls.discard(scope)
        if scope.cancelled_caught:
            if grant.revoked == _DRIVER_STOPPED:
                raise Conflict(_driver_stopped(tool, grant.context))
            raise Conflict(grant.revoked or f"claim {claim_id!r} was interrupted")
        if tool == "submit":
            self._grants.pop(claim_id, None)
        else:
            self._renew(claim_id, grant)
        return result

    def _hold(self, claim_id: str, grant: _Grant) -> _Holding:
        """Keeps renewing the claim's lease, a quarter of a lease apart, until what it returns
        is cancelled: a call running here holds its claim, as one in the driver does."""
        return _Holding(lambda: self._renew(claim_id, grant), grant.lease_s / 4)

    def _renew(self, claim_id: str, grant: _Grant) -> None:
        """Renews the claim's lease in the driver, once a quarter of a lease at most."""
        now = time.monotonic()
        if now - grant.renewed_at >= grant.lease_s / 4 and self._front_group is not None:
            grant.renewed_at = now
            self._front_group.start_soon(self._driver().tell, "renew", {"claim": claim_id})

    async def _grant(self, claim_id: str) -> _Grant:
        grant = self._grants.get(claim_id)
        if grant is not None:
            return grant
        begun = await self._driver().call("grant", {"claim": claim_id})
        task = Task.model_validate(begun["task"])
        task = self._tasks.setdefault(f"{begun['campaign_id']}/{task.id}", task)
        context: _RemoteContext | None = None
        attached: AttachedWorkspace | None = None
        where = begun.get("workspace")
        client = await self._supervisor(str(where["supervisor"])) if where else None
        if client is not None:
            attached = AttachedWorkspace(client, str(where["name"]))
        if attached is not None or not begun["available"]:
            source = _AttachedSource(bool(begun["available"]), attached)
            context = _RemoteContext(begun["campaign_id"], begun["trajectory_id"], task, source)
        grant = _Grant(context, float(begun["lease_s"]), time.monotonic())
        if len(self._grants) >= _CLAIMS_KEPT:  # claims submitted elsewhere, or lapsed
            del self._grants[next(iter(self._grants))]
        self._grants[claim_id] = grant
        return grant

    async def _supervisor(self, key: str) -> SupervisorClient | None:
        """Our own connection to the supervisor the driver calls `key` (None: it cannot be)."""
        client = self._supervisors.get(key)
        if client is not None and client.alive:
            return client
        async with self._connecting.setdefault(key, anyio.Lock()):
            client = self._supervisors.get(key)
            if client is not None and client.alive:
                return client
            try:
                _, fd = await self._driver().call("connect", {"supervisor": key}, with_socket=True)
            except EvalServerError as exc:
                logger.info("no connection of our own to supervisor %s: %s", key, exc)
                return None
            client = SupervisorClient.over_socket(socket.socket(fileno=fd))
            assert self._front_group is not None
            await client.start(self._front_group)
            for gone in [k for k, c in self._supervisors.items() if not c.alive]:
                await self._supervisors.pop(gone).aclose()  # instances the driver closed
            self._supervisors[key] = client
            return client

    # Driver side: what workers ask.

    async def _serve_call(self, peer: Peer, request_id: int, args: dict[str, Any]) -> Any:
        name = str(args.get("op"))
        if name not in EvalService.CALLS:
            raise InvalidInput(f"{name!r} is not an operation workers may ask for")
        operation = getattr(EvalService, name)
        hints = _hints(operation)
        arguments = {
            key: _adapter(hints[key]).validate_python(value)
            for key, value in dict(args.get("args") or {}).items()
        }
        for callback in args.get("callbacks") or []:
            arguments[str(callback)] = self._notes_to(peer, request_id, str(callback))
        result = await EvalService.call(self, operation, **arguments)
        return _adapter(hints["return"]).dump_python(result, mode="json")

    @staticmethod
    def _notes_to(peer: Peer, request_id: int, name: str) -> Callable[..., Awaitable[None]]:
        async def note(*values: Any) -> None:
            dumped = [asdict(v) if isinstance(v, CampaignEvent) else v for v in values]
            peer.note(request_id, name, *dumped)

        return note

    async def _serve_events(self, peer: Peer, request_id: int, args: dict[str, Any]) -> None:
        stop = EvalService.forward_events(self, self._notes_to(peer, request_id, "event"))
        try:
            await anyio.sleep_forever()
        finally:
            stop()

    async def _serve_claim(self, peer: Peer, request_id: int, args: dict[str, Any]) -> Any:
        claimed = await ExternalTrajectories(self.claims).claim(
            args.get("campaign_id"), float(args.get("wait_s") or 0)
        )
        return claimed.model_dump(mode="json")

    async def _serve_grant(self, peer: Peer, request_id: int, args: dict[str, Any]) -> Any:
        """Grants a claim to a worker: what it needs to work on the workspace itself."""
        claim_id = str(args["claim"])
        trajectory = self.claims.get(claim_id)
        context = trajectory.context
        begun: dict[str, Any] = {
            "available": context.sandbox.available,
            "lease_s": trajectory.lease_s,
            "campaign_id": context.campaign_id,
            "trajectory_id": context.trajectory_id,
            "task": context.task.model_dump(mode="json"),
        }
        if context.sandbox.available:
            # Its first use makes the workspace (seconds, where the instance is still being
            # set up): the call that asked holds the claim meanwhile, as a running call does.
            trajectory.running += 1
            try:
                workspace = await context.sandbox.workspace()
            finally:
                trajectory.running -= 1
            if isinstance(workspace, SupervisedWorkspace):
                key = f"{os.getpid()}-{id(workspace.client)}"
                self._known[key] = workspace.client
                begun["workspace"] = {"name": workspace.name, "supervisor": key}
        previous = peer.grants.pop(claim_id, None)
        if previous is not None:
            previous[1].calls.discard(previous[0])
        grantee = _Grantee(peer, claim_id, self)
        peer.grants[claim_id] = (grantee, self.claims.begin(claim_id, grantee))
        return begun

    async def _serve_renew(self, peer: Peer, request_id: int, args: dict[str, Any]) -> None:
        with suppress(EvalServerError):
            self.claims.renew(str(args["claim"]))

    async def _serve_noted(self, peer: Peer, request_id: int, args: dict[str, Any]) -> None:
        """A tool call a worker ran itself, for the trajectory's transcript."""
        with suppress(EvalServerError):
            self.claims.get(str(args["claim"])).transcript.append(dict(args["entry"]))

    async def _serve_submit(self, peer: Peer, request_id: int, args: dict[str, Any]) -> None:
        claim_id = str(args["claim"])
        granted = peer.grants.pop(claim_id, None)
        if granted is not None:
            granted[1].calls.discard(granted[0])
        submission = Submission.model_validate(args["submission"])
        with suppress(EvalServerError):  # kept as `ExternalTrajectories.submit` keeps it
            entry = call_entry(TOOLS["submit"], "claimed", {"answer": submission.answer})
            self.claims.get(claim_id).transcript.append(entry)
        trajectory = self.claims.submit(claim_id, submission)
        await trajectory.recorded()  # answered once durable, as in one process

    async def _serve_tool(self, peer: Peer, request_id: int, args: dict[str, Any]) -> Any:
        name = str(args.get("tool"))
        if name not in _TOOLS:
            raise InvalidInput(f"{name!r} is not a tool workers may run in the driver")
        method = getattr(ExternalTrajectories(self.claims), name)
        result = await method(str(args["claim"]), **dict(args.get("arguments") or {}))
        return result.model_dump(mode="json")

    async def _serve_connect(self, peer: Peer, request_id: int, args: dict[str, Any]) -> Any:
        client = self._known.get(str(args.get("supervisor")))
        if client is None:
            raise Conflict("that supervisor is gone: call the tool again")
        sock = await client.pass_connection()
        return with_socket(None, sock.detach())

    def _peer_gone(self, peer: Peer) -> None:
        """A worker died or left: the claims granted to it are not worked on there any more."""
        for grantee, trajectory in peer.grants.values():
            trajectory.calls.discard(grantee)
        peer.grants.clear()


class _Holding:
    """Calls `renew` every `period` seconds until cancelled, from the event loop's timers (the
    server runs on asyncio): almost every call ends long before its first renewal, and a task
    started and cancelled around each one cost it a tenth of its work (cProfile of a worker
    that does not drive, `read_file`: 2,403 function calls per call with the task, 2,127
    with timers)."""

    def __init__(self, renew: Callable[[], None], period: float) -> None:
        self._renew, self._period = renew, period
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(period, self._due)

    def _due(self) -> None:
        self._timer = self._loop.call_later(self._period, self._due)
        self._renew()

    def cancel(self) -> None:
        self._timer.cancel()


class _InDriver(Exception):
    """A tool call that must run in the driver whole (no workspace connection here)."""

    def __init__(self, tool: str) -> None:
        super().__init__(tool)
        self.tool = tool


def _on_claim_here(tool: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A `TrajectoryTools` method as a `RemoteTrajectories` one: run here on a workspace
    reached directly, or whole in the driver where it cannot be. A call run here is kept in
    the trajectory's transcript, in the driver, as one run there is (`_on_claim`); calls that
    overlap on one claim are kept in the order they end."""
    name = tool.__name__
    returns = _hints(getattr(ExternalTrajectories, name))["return"]

    @functools.wraps(getattr(ExternalTrajectories, name))
    async def on_claim(self: RemoteTrajectories, claim_id: str, /, **arguments: Any) -> Any:
        async def run_noted(tools: TrajectoryTools) -> Any:
            entry = call_entry(TOOLS[name], "claimed", arguments)
            try:
                result = await tool(tools, **arguments)
                note_result(entry, result)
                return result
            finally:
                await self.front._driver().tell("noted", {"claim": claim_id, "entry": entry})

        try:
            return await self.front.run_claimed(claim_id, name, run_noted)
        except _InDriver:
            return await self.in_driver(claim_id, name, arguments, returns)

    return on_claim


def _whole_in_driver(name: str) -> Callable[..., Awaitable[Any]]:
    """The `ExternalTrajectories` tool `name` as a `RemoteTrajectories` one run whole in the
    driver (what it needs is there, not here)."""
    tool = getattr(ExternalTrajectories, name)
    returns = _hints(tool)["return"]

    @functools.wraps(tool)
    async def in_driver(self: RemoteTrajectories, claim_id: str, /, **arguments: Any) -> Any:
        return await self.in_driver(claim_id, name, arguments, returns)

    return in_driver


class RemoteTrajectories(ExternalTrajectories):
    """`ExternalTrajectories` in a worker that does not drive: claims and submissions go to
    the driver, workspace calls straight to the supervisor (`FrontService.run_claimed`)."""

    def __init__(self, front: FrontService) -> None:
        super().__init__(front.claims)
        self.front = front

    async def claim(self, campaign_id: str | None, wait_s: float) -> ClaimedTrajectory:
        found = await self.front._driver().call(
            "claim", {"campaign_id": campaign_id, "wait_s": wait_s}
        )
        return ClaimedTrajectory.model_validate(found)

    async def in_driver(
        self, claim_id: str, name: str, arguments: dict[str, Any], returns: Any
    ) -> Any:
        """The tool `name` run whole in the driver.

        Raises:
            Conflict: the driver stopped during the call (the message says what to do next).
        """
        request = {"claim": claim_id, "tool": name, "arguments": arguments}
        try:
            result = await self.front._driver().call("tool", request)
        except DriverLost as exc:
            raise Conflict(_driver_stopped(name)) from exc
        return _adapter(returns).validate_python(result)

    sandbox_exec = _on_claim_here(TrajectoryTools.sandbox_exec)
    read_file = _on_claim_here(TrajectoryTools.read_file)
    write_file = _on_claim_here(TrajectoryTools.write_file)
    edit_file = _on_claim_here(TrajectoryTools.edit_file)
    search = _on_claim_here(TrajectoryTools.search)
    list_files = _on_claim_here(TrajectoryTools.list_files)
    get_diff = _on_claim_here(TrajectoryTools.get_diff)
    checkpoint = _on_claim_here(TrajectoryTools.checkpoint)
    restore = _on_claim_here(TrajectoryTools.restore)

    async def fork_trajectory(self, claim_id: str, n: int, wait_s: float = 60.0) -> Any:
        arguments = {"n": n, "wait_s": wait_s}
        returns = _hints(ExternalTrajectories.fork_trajectory)["return"]
        return await self.in_driver(claim_id, "fork_trajectory", arguments, returns)

    # Recorded by the driver: the ledger and the campaign's budget are there.
    report_usage = _whole_in_driver("report_usage")

    async def submit(self, claim_id: str, answer: str | None) -> Submitted:
        async def hand_in(tools: TrajectoryTools) -> Submitted:
            submission, submitted = await tools.prepare_submission(answer)
            request = {"claim": claim_id, "submission": submission.model_dump(mode="json")}
            await self.front._driver().call("submit", request)
            return submitted

        try:
            result: Submitted = await self.front.run_claimed(claim_id, "submit", hand_in)
            return result
        except _InDriver:
            submitted: Submitted = await self.in_driver(
                claim_id, "submit", {"answer": answer}, Submitted
            )
            return submitted
