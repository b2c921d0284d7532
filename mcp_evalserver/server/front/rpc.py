"""The workers' line to the driver: JSON lines over a unix socket, sockets passed alongside.

Messages, one JSON object per line:

- request `{"id": n, "call": NAME, "args": {...}}` (id 0: no reply wanted);
- reply `{"id": n, "ok": true, "result": ...}` or `{"id": n, "ok": false, "error": {"type",
  "message"}}`, `type` naming a class in `mcp_evalserver.errors`; a reply may carry a socket
  (SCM_RIGHTS), a connection of the worker's own to a supervisor;
- note `{"id": n, "note": NAME, "args": [...]}`: something the request `n` reports on its way
  (progress, a campaign event); with id 0, a note of the driver's own (`revoke`: a claim
  granted to the worker was taken over or ended);
- cancel `{"id": n, "cancel": true}`: the worker gave up on request `n`.

Both ends are this module: `DriverLink` is the worker's, `serve_driver` the driver's.
"""

from __future__ import annotations

import json
import logging
import math
import socket
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mcp_evalserver import errors
from mcp_evalserver.errors import EvalServerError

logger = logging.getLogger(__name__)

#: The longest line either end sends (a submission's patch travels in one).
MAX_LINE_BYTES = 512 << 20
#: Notes a request keeps for its caller to hand on before it loses some.
_NOTES = 1024
#: How long a worker waits for a driver to answer its connection (a takeover takes < 1 s).
DRIVER_WAIT_S = 30.0

NoteFn = Callable[[str, list[Any]], Awaitable[None]]
Handler = Callable[["Peer", int, dict[str, Any]], Awaitable[Any]]

_ERRORS: dict[str, type[EvalServerError]] = {
    cls.__name__: cls
    for cls in (
        errors.InvalidInput,
        errors.NotFound,
        errors.Conflict,
        errors.LedgerCorrupt,
        errors.LimitExceeded,
        errors.Timeout,
        errors.InfrastructureError,
        errors.SandboxUnavailable,
    )
}


class DriverLost(errors.InfrastructureError):
    """The process driving campaigns stopped while a call was in flight: what the call did
    there is unknown, and the claims that process held died with it."""


#: What a call that was in flight when its driver stopped answers (callers that know more,
#: such as a claim's, say more).
LOST_IN_FLIGHT = (
    "the process driving campaigns stopped while this call was in flight; another takes over: "
    "call again"
)


def encode(message: Mapping[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def error_message(exc: EvalServerError) -> dict[str, str]:
    name = type(exc).__name__
    return {"type": name if name in _ERRORS else "InfrastructureError", "message": str(exc)}


def error_of(error: Mapping[str, Any]) -> EvalServerError:
    return _ERRORS.get(str(error.get("type")), errors.InfrastructureError)(
        str(error.get("message", "the driver failed"))
    )


class _Lines:
    """Complete lines out of a byte stream, with the sockets that came along (in order)."""

    def __init__(self, stream: anyio.abc.UNIXSocketStream) -> None:
        self._stream = stream
        self._buffer = bytearray()
        self.fds: list[int] = []

    async def receive(self) -> bytes:
        """Raises: anyio.EndOfStream once the peer is gone."""
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise anyio.EndOfStream
            chunk, fds = await self._stream.receive_fds(1 << 16, 4)
            self.fds.extend(fds)
            if not chunk:
                raise anyio.EndOfStream
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line


@dataclass(eq=False)
class _Pending:
    #: Where its notes wait for the request's own task to hand them on (never the reader's
    #: job: a slow client must not hold up the replies of every other call).
    notes: MemoryObjectSendStream[tuple[str, list[Any]]] | None
    done: anyio.Event = field(default_factory=anyio.Event)
    reply: dict[str, Any] = field(default_factory=dict)
    fd: int | None = None
    #: The connection the request went out on: only its end fails the request.
    stream: anyio.abc.UNIXSocketStream | None = None
    lost: bool = False


class DriverLink:
    """A worker's connection to whichever process drives campaigns now, made when first needed
    and again after that process died (`where` says where the driver listens, if one does)."""

    def __init__(self, where: Callable[[], str | None], group: anyio.abc.TaskGroup) -> None:
        self._where = where
        self._group = group
        self._stream: anyio.abc.UNIXSocketStream | None = None
        self._connecting = anyio.Lock()
        self._send_lock = anyio.Lock()
        self._pending: dict[int, _Pending] = {}
        self._ids = 0
        #: Hears the driver's notes that answer no request (name, values), and `lost` when
        #: the connection to a driver ends.
        self.on_note: Callable[[str, list[Any]], None] = lambda name, values: None

    async def call(
        self,
        name: str,
        args: Mapping[str, Any],
        notes: NoteFn | None = None,
        *,
        with_socket: bool = False,
    ) -> Any:
        """Sends a request and waits for its reply (cancelled: the driver is told).

        Raises:
            EvalServerError: the driver's error, as its own class.
            DriverLost: the driver died while the request was in flight (a new driver takes
                over: what the request did there is unknown).
            InfrastructureError: no driver answered within `DRIVER_WAIT_S`.
        """
        self._ids += 1
        request_id = self._ids
        send, receive = anyio.create_memory_object_stream[tuple[str, list[Any]]](_NOTES)
        pending = self._pending[request_id] = _Pending(send if notes is not None else None)

        async def hand_on() -> None:
            async with receive:
                async for name, values in receive:
                    assert notes is not None
                    await notes(name, values)

        try:
            async with anyio.create_task_group() as group, send:
                if notes is not None:
                    group.start_soon(hand_on)
                await self._deliver(pending, {"id": request_id, "call": name, "args": dict(args)})
                await pending.done.wait()
        except BaseException:
            if not pending.done.is_set() and pending.stream is not None:
                with anyio.CancelScope(shield=True), suppress(EvalServerError):
                    await self._send(pending.stream, {"id": request_id, "cancel": True})
            raise
        finally:
            self._pending.pop(request_id, None)
            receive.close()
        if pending.lost:
            raise DriverLost(LOST_IN_FLIGHT)
        reply = pending.reply
        if not reply.get("ok"):
            if pending.fd is not None:
                socket.close(pending.fd)
            raise error_of(reply.get("error") or {})
        if with_socket:
            if pending.fd is None:
                raise errors.InfrastructureError(f"the driver passed no socket with {name}")
            return reply.get("result"), pending.fd
        return reply.get("result")

    async def tell(self, name: str, args: Mapping[str, Any]) -> None:
        """Sends a request that wants no reply (lost if the driver is gone: nothing waits)."""
        with suppress(EvalServerError):
            await self._send(await self._connect(), {"id": 0, "call": name, "args": dict(args)})

    async def _deliver(self, pending: _Pending, message: dict[str, Any]) -> None:
        """Sends a request, again on a new connection where the one it found had broken (the
        driver died and `_read` has not heard yet): a line reaches the driver whole or not at
        all, so the first try did nothing there.

        Raises:
            DriverLost: the new connection broke too.
            InfrastructureError: no driver answered within `DRIVER_WAIT_S`.
        """
        pending.stream = stream = await self._connect()
        try:
            await self._send(stream, message)
        except DriverLost:
            # Undone, if its end got there first: this request was never delivered.
            pending.stream, pending.lost, pending.done = None, False, anyio.Event()
            if self._stream is stream:
                self._stream = None
            pending.stream = stream = await self._connect()
            await self._send(stream, message)

    def connected(self) -> anyio.abc.UNIXSocketStream | None:
        return self._stream

    async def aclose(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()

    async def _send(self, stream: anyio.abc.UNIXSocketStream, message: dict[str, Any]) -> None:
        try:
            async with self._send_lock:
                await stream.send(encode(message))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
            raise DriverLost(f"{LOST_IN_FLIGHT} ({exc!r})") from exc

    async def _connect(self) -> anyio.abc.UNIXSocketStream:
        if self._stream is not None:
            return self._stream
        async with self._connecting:
            if (current := self.connected()) is not None:
                return current  # another call connected while this one waited
            deadline = anyio.current_time() + DRIVER_WAIT_S
            while anyio.current_time() < deadline:
                path = self._where()
                if path is not None:
                    try:
                        stream = await anyio.connect_unix(path)
                    except OSError:
                        pass
                    else:
                        self._stream = stream
                        self._group.start_soon(self._read, stream)
                        return stream
                # The driver died and no worker holds its lease yet: one will within a lease
                # poll (front/lease.py).
                await anyio.sleep(0.05)
            raise errors.InfrastructureError(
                f"no process drives campaigns: none took the driver lease in {DRIVER_WAIT_S:g}s"
                " (the server is stopping, or its workers keep dying: see its log)"
            )

    async def _read(self, stream: anyio.abc.UNIXSocketStream) -> None:
        lines = _Lines(stream)
        try:
            while True:
                message = json.loads(await lines.receive())
                request_id = int(message.get("id", 0))
                pending = self._pending.get(request_id)
                if "note" in message:
                    if request_id == 0:
                        self.on_note(str(message["note"]), list(message.get("args", [])))
                    elif pending is not None and pending.notes is not None:
                        # A listener this far behind loses notes, as campaign events do.
                        with suppress(anyio.WouldBlock, anyio.BrokenResourceError,
                                      anyio.ClosedResourceError):  # fmt: skip
                            note = (str(message["note"]), list(message.get("args", [])))
                            pending.notes.send_nowait(note)
                    continue
                fd = lines.fds.pop(0) if message.get("socket") and lines.fds else None
                if pending is None:
                    if fd is not None:
                        socket.close(fd)
                    continue
                pending.reply, pending.fd = message, fd
                pending.done.set()
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            pass
        except ValueError as exc:
            logger.warning("the driver sent garbage: %s", exc)
        finally:
            if self._stream is stream:
                self._stream = None
            self.on_note("lost", [])
            with suppress(OSError, anyio.BrokenResourceError):
                await stream.aclose()
            for fd in lines.fds:
                socket.close(fd)
            for pending in self._pending.values():
                if pending.stream is stream and not pending.done.is_set():
                    pending.lost = True
                    pending.done.set()


class Peer:
    """One worker's connection, as the driver sees it: what it sends goes out in order."""

    def __init__(self, outbox: MemoryObjectSendStream[tuple[bytes, int | None]]) -> None:
        self._outbox = outbox
        self.grants: dict[str, Any] = {}  # claims granted to it (front/service.py)
        self.requests: dict[int, anyio.CancelScope] = {}

    def post(self, message: Mapping[str, Any], fd: int | None = None) -> None:
        """Queues a message (never blocks); lost if the worker is gone."""
        try:
            self._outbox.send_nowait((encode(message), fd))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            if fd is not None:
                socket.close(fd)

    def note(self, request_id: int, name: str, *args: Any) -> None:
        self.post({"id": request_id, "note": name, "args": list(args)})


async def serve_driver(
    path: Path,
    handlers: Mapping[str, Handler],
    on_gone: Callable[[Peer], None],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Listens on `path` (mode 0600) until cancelled; runs each request in its own task.

    A handler returns the reply's result, or `(result, fd)` with `with_socket` requests, whose
    socket is sent along and closed here; `on_gone` hears of each worker that went away.
    """
    path.unlink(missing_ok=True)  # noqa: ASYNC240 (a socket's name: no disk wait)
    listener = await anyio.create_unix_listener(path, mode=0o600)

    async def serve(stream: anyio.abc.UNIXSocketStream) -> None:
        send, receive = anyio.create_memory_object_stream[tuple[bytes, int | None]](math.inf)
        peer = Peer(send)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(_write, stream, receive)
                lines = _Lines(stream)
                while True:
                    try:
                        message = json.loads(await lines.receive())
                    except (anyio.EndOfStream, anyio.BrokenResourceError, OSError, ValueError):
                        break
                    request_id = int(message.get("id", 0))
                    if message.get("cancel"):
                        scope = peer.requests.get(request_id)
                        if scope is not None:
                            scope.cancel()
                        continue
                    group.start_soon(_answer, peer, handlers, request_id, message)
                group.cancel_scope.cancel()
        finally:
            send.close()
            on_gone(peer)
            with suppress(OSError, anyio.BrokenResourceError):
                await stream.aclose()

    async with listener:
        task_status.started()
        await listener.serve(serve)  # type: ignore[arg-type]


async def _answer(
    peer: Peer, handlers: Mapping[str, Handler], request_id: int, message: dict[str, Any]
) -> None:
    name = str(message.get("call"))
    handler = handlers.get(name)
    reply: dict[str, Any] = {"id": request_id}
    fd: int | None = None
    with anyio.CancelScope() as scope:
        peer.requests[request_id] = scope
        try:
            if handler is None:
                raise errors.InvalidInput(f"the driver has no call {name!r}")
            result = await handler(peer, request_id, dict(message.get("args") or {}))
            if isinstance(result, _WithSocket):
                result, fd = result.result, result.fd
                reply["socket"] = True
            reply |= {"ok": True, "result": result}
        except EvalServerError as exc:
            reply |= {"ok": False, "error": error_message(exc)}
        except Exception as exc:
            logger.exception("driver call %s failed", name)
            reply |= {
                "ok": False,
                "error": {"type": "InfrastructureError", "message": f"driver: {exc!r}"},
            }
        finally:
            peer.requests.pop(request_id, None)
    if scope.cancelled_caught or request_id == 0:
        if fd is not None:
            socket.close(fd)
        return
    peer.post(reply, fd)


@dataclass(frozen=True)
class _WithSocket:
    result: Any
    fd: int


def with_socket(result: Any, fd: int) -> Any:
    """A handler's result that carries a socket to the worker (closed here once sent)."""
    return _WithSocket(result, fd)


async def _write(
    stream: anyio.abc.UNIXSocketStream, outbox: MemoryObjectReceiveStream[tuple[bytes, int | None]]
) -> None:
    async with outbox:
        async for line, fd in outbox:
            try:
                if fd is None:
                    await stream.send(line)
                else:
                    await stream.send_fds(line, [fd])
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                return
            finally:
                if fd is not None:
                    socket.close(fd)
