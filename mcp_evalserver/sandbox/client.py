"""`SupervisorClient`: the supervisor's JSON-lines protocol (`supervisor/protocol.py`) over any
anyio byte stream, or over pipes or a unix socket the event loop serves itself.

How a backend uses it (all the sandbox logic lives in the supervisor and `supervised.py`; a
backend only provisions something that runs `python3 -I -S supervisor` (the folder) and opens
a byte stream to its stdin/stdout):

    stream = ...                                  # anyio.abc.ByteStream to the supervisor's stdio
    client = SupervisorClient(stream)
    await client.start(task_group)                # reader and writer tasks in the backend's group
    instance = await SupervisedInstance.open(client, spec, mode="container", store="/trajs")
    ...
    await instance.aclose()                       # destroys workspaces, shuts down, closes stream

`SUPERVISOR_SOURCE` is the folder to run in an instance; `SUPERVISOR_FILES` are its files, to
copy into one folder there (docker: `put_archive`).
Standalone use: `async with SupervisorClient(stream) as client:` owns its own task group.

Where the supervisor is a process of this machine, its pipes (`SupervisorClient.over_pipes`: the
local backend) or a unix socket to it (`over_socket`: a worker of `--workers N`) are served by the
event loop's own transports: a reply is parsed in the loop's read callback as it arrives and the
requests of one turn of the loop leave in one write, with no reader or writer task to wake (an
anyio stream's two tasks cost the caller a fifth more CPU per request: 37 against 29 us for a
4 KB read, 8 in flight, medians of 12 rounds each).

Wire format (`supervisor/protocol.py` declares every operation's arguments and result), one
JSON object per line: requests `{"id", "op", "args"}`; replies `{"id", "ok": true, "result"}`
or `{"id", "ok": false, "error": {"type", "message"}}` where `type` names a class in
`mcp_evalserver.errors`. Replies may arrive in any order.

More connections to the same supervisor can be opened (`open_connection`) where a socket can
be passed to it: over its connection channel (the local backend's) or its request stream if
that is a unix socket (docker's side door). A `BlockingConnection` is for a thread that waits
on its reply itself, as a Ray actor's threads do (ray_node.py), one request at a time; ending
it cancels what it asked.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import functools
import itertools
import json
import math
import socket
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, Self, runtime_checkable

import anyio
import anyio.abc

from mcp_evalserver import errors
from mcp_evalserver.errors import ExcInfo
from mcp_evalserver.sandbox.supervisor.protocol import (
    CancelArgs,
    ErrorType,
    Op,
    Request,
    error_type,
    raw_size,
    result_of,
)

SUPERVISOR_SOURCE = Path(__file__).with_name("supervisor")
SUPERVISOR_FILES = tuple(sorted(SUPERVISOR_SOURCE.glob("*.py")))
MAX_LINE_BYTES = 512 << 20  # a diff travels base64 in one line; the most raw bytes after one

# protocol.ErrorType: the supervisor names these classes.
_ERROR_TYPES: dict[ErrorType, type[errors.EvalServerError]] = {
    "InvalidInput": errors.InvalidInput,
    "NotFound": errors.NotFound,
    "Conflict": errors.Conflict,
    "LimitExceeded": errors.LimitExceeded,
    "Timeout": errors.Timeout,
    "InfrastructureError": errors.InfrastructureError,
    "SandboxUnavailable": errors.SandboxUnavailable,
}


@runtime_checkable
class PassesSockets(Protocol):
    """A stream that can carry a socket along with bytes (anyio's `UNIXSocketStream`)."""

    async def send_fds(self, message: bytes, fds: list[int]) -> None: ...


def _error_of(err: Mapping[str, Any]) -> errors.EvalServerError:
    cls = _ERROR_TYPES[error_type(err.get("type"))]
    error = cls(str(err.get("message", "supervisor error")))
    if err.get("errno"):
        error.errno_name = str(err["errno"])
    return error


# Made once: `json.dumps` with any option builds an encoder per call, `json.loads` of bytes
# guesses their encoding first (UTF-8 here: the supervisor writes ASCII JSON).
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_DECODER = json.JSONDecoder()


def _encode(request: Request) -> str:
    return _ENCODER.encode(request)


class _ReplyParser:
    """Cuts what the supervisor writes into replies, a JSON line then the raw bytes its `raw`
    announces, from pieces of any size: a batch's replies come in one piece, a large file's
    bytes in many. `deliver(reply, raw)` gets each, in order."""

    __slots__ = ("_deliver", "_held", "_kept", "_most", "_raw", "_reply")

    def __init__(
        self, deliver: Callable[[dict[str, Any], bytes], None], most: int = MAX_LINE_BYTES
    ) -> None:
        self._deliver, self._most = deliver, most
        self._kept: list[bytes] = []  # what came of a line or of raw bytes not complete yet
        self._held = 0  # its length
        self._reply: dict[str, Any] | None = None  # the reply whose raw bytes are coming
        self._raw = 0  # how many

    def feed(self, data: bytes) -> None:
        """Delivers every reply that `data` completes.

        Raises:
            ValueError: a line that is not JSON, announces bad raw lengths, or runs past the
                most a line may have.
        """
        start, end = 0, len(data)
        while start < end:
            if self._reply is not None:
                wanted = self._raw - self._held
                if end - start < wanted:
                    break
                raw = self._whole(data[start : start + wanted])
                start += wanted
                reply, self._reply = self._reply, None
                self._deliver(reply, raw)
                continue
            newline = data.find(b"\n", start)
            if newline < 0:
                if self._held + end - start > self._most:
                    raise ValueError(f"a line over {self._most} bytes")
                break
            line = self._whole(data[start:newline])
            start = newline + 1
            reply = _DECODER.decode(line.decode())
            size = raw_size(reply, self._most)
            if size:
                self._reply, self._raw = reply, size
            else:
                self._deliver(reply, b"")
        if start < end:  # by index, not by slicing what is left after each reply
            self._kept.append(data[start:] if start else data)
            self._held += end - start

    def _whole(self, last: bytes) -> bytes:
        """What was kept, then `last`: one whole line, or one reply's raw bytes."""
        if not self._kept:
            return last
        kept, self._kept, self._held = self._kept, [], 0
        kept.append(last)
        return b"".join(kept)


class _Link(asyncio.Protocol):
    """A client's side of the pipes or socket the event loop serves (`over_pipes`,
    `over_socket`): replies are parsed in its read callback; the end of either direction
    ends the client, as the end of its stream does."""

    def __init__(self, client: SupervisorClient) -> None:
        self._client = client

    def data_received(self, data: bytes) -> None:
        try:
            self._client._parser.feed(data)
        except ValueError as e:
            self._client._end(f"supervisor sent garbage: {e}")
        except Exception as e:  # never into the loop's handler: the client says why it ended
            self._client._end(f"supervisor stream broken: {e!r}")

    def eof_received(self) -> None:
        return None  # the transport closes: connection_lost

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            self._client._end("supervisor closed its output")
        else:
            self._client._end(f"supervisor stream broken: {exc!r}")


#: Opens a link's transports for a `_Link`: the one requests are written to, and every one of
#: them (to close).
_Opener = Callable[[_Link], Awaitable[tuple[asyncio.WriteTransport, list[asyncio.BaseTransport]]]]


def _pipe(fd: int, mode: str) -> Any:
    """The file object of pipe end `fd` that a transport takes (and closes), unbuffered."""
    return open(fd, mode, buffering=0)  # the transport closes it


async def _open_pipes(
    replies: int, requests: int, link: _Link
) -> tuple[asyncio.WriteTransport, list[asyncio.BaseTransport]]:
    """Both pipes' transports; if either cannot be made (or the caller is cancelled
    meanwhile), both pipes are closed: the supervisor sees its input end."""
    loop = asyncio.get_running_loop()
    reading_file, writing_file = _pipe(replies, "rb"), _pipe(requests, "wb")
    reading: asyncio.BaseTransport | None = None
    try:
        reading, _ = await loop.connect_read_pipe(lambda: link, reading_file)
        writing, _ = await loop.connect_write_pipe(lambda: link, writing_file)
    except BaseException:
        if reading is not None:
            reading.close()  # off the loop first, then its file
        reading_file.close()
        writing_file.close()
        raise
    return writing, [writing, reading]


async def _open_socket(
    sock: socket.socket, link: _Link
) -> tuple[asyncio.WriteTransport, list[asyncio.BaseTransport]]:
    transport, _ = await asyncio.get_running_loop().create_unix_connection(lambda: link, sock=sock)
    return transport, [transport]


#: A request's reply: its result, or the error to raise. A bare future of the event loop,
#: not an `anyio.Event` with fields beside it: the server runs on asyncio only, and an
#: `anyio.Event` costs a lookup of the async library, a wrapper and an `asyncio.Event` per
#: request (the round trip is every workspace call's).
_Reply = asyncio.Future[dict[str, Any]]


class SupervisorClient:
    """Multiplexes concurrent requests to one supervisor by request id.

    When the stream ends or breaks, every pending and later request raises
    `SandboxUnavailable` naming the cause.
    """

    def __init__(
        self, stream: anyio.abc.ByteStream | None, channel: socket.socket | None = None
    ) -> None:
        self._stream: anyio.abc.ByteStream | None = stream  # None: a link (`_open`)
        self._channel = channel  # the supervisor's `--connections`, if it was given one
        self._parser = _ReplyParser(self._dispatch)
        self._open: _Opener | None = None
        self._transport: asyncio.WriteTransport | None = None  # a link's: requests go there
        self._transports: list[asyncio.BaseTransport] = []
        self._flush_due = False
        self._ids = itertools.count(1)
        self._pending: dict[int, _Reply] = {}
        # Requests waited for with a reply timeout: their deadline (the loop's clock), op and
        # timeout. One timer of the loop (`_watch`, due at `_watch_at`) looks at them when the
        # earliest may have passed, instead of a timer made and cancelled per request: each
        # was a handle left in the loop's heap until its time came (a minute later) or the
        # loop swept it.
        self._deadlines: dict[int, tuple[float, Op, float]] = {}
        self._watch: asyncio.TimerHandle | None = None
        self._watch_at = math.inf
        # Keeps the writer's lines and a passed socket's blank line from interleaving.
        self._send_lock = anyio.Lock(fast_acquire=True)
        # Requests' lines waiting for the writer task (`_write_requests`, made by `start`),
        # which waits on `_wake` while there are none; after `_outbox_closed` it writes what
        # is left and ends, and no line is taken any more.
        self._outbox: list[bytes] = []
        self._wake: asyncio.Future[None] | None = None
        self._started = False
        self._outbox_closed = False
        self._dead: str | None = None
        self._stopped = anyio.Event()
        self._own_group: anyio.abc.TaskGroup | None = None

    @classmethod
    def over_pipes(
        cls, replies: int, requests: int, channel: socket.socket | None = None
    ) -> SupervisorClient:
        """A client on a supervisor's stdout (`replies`) and stdin (`requests`), pipes it now
        owns, served by the event loop's transports (see the module's docstring)."""
        client = cls(None, channel)
        client._open = functools.partial(_open_pipes, replies, requests)
        return client

    @classmethod
    def over_socket(cls, sock: socket.socket) -> SupervisorClient:
        """A client on a unix socket to a supervisor (one it passed: `pass_connection`), which
        it now owns, served by the event loop's transport. It passes no sockets itself."""
        client = cls(None)
        client._open = functools.partial(_open_socket, sock)
        return client

    @property
    def alive(self) -> bool:
        return self._dead is None

    @property
    def dead(self) -> str | None:
        """Why the supervisor is gone (its stream ended or broke), or None while it answers."""
        return self._dead

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Starts reading replies and writing requests: a stream's in tasks of `task_group`
        (which must outlive this client), a link's in the event loop's transports."""
        if self._open is not None:
            self._transport, self._transports = await self._open(_Link(self))
            self._started = True
            return
        assert self._stream is not None
        self._started = True
        task_group.start_soon(self._read_replies)
        task_group.start_soon(self._write_requests)

    async def request(
        self, op: Op, reply_timeout: float | None = None, **args: Any
    ) -> dict[str, Any]:
        """Sends one request and waits for its reply.

        `reply_timeout` bounds the wait on this side (the supervisor enforces command timeouts
        itself); if it passes, or the caller is cancelled, the request is cancelled remotely.

        Raises:
            SandboxUnavailable: the supervisor is gone.
            Timeout: `reply_timeout` passed.
            EvalServerError: the supervisor's error, as its own class.
        """
        if self._dead is not None:
            raise errors.SandboxUnavailable(self._dead)
        req_id = next(self._ids)
        loop = asyncio.get_running_loop()
        reply: _Reply = loop.create_future()
        self._pending[req_id] = reply
        # A deadline the loop's one watch looks at, not a cancel scope: entering and leaving
        # one costs a request as much as the rest of its round trip, and almost every reply
        # comes long before.
        try:
            self._post(_encode({"id": req_id, "op": op, "args": args}))
            if reply_timeout is not None:
                deadline = loop.time() + reply_timeout
                self._deadlines[req_id] = (deadline, op, reply_timeout)
                if deadline < self._watch_at:
                    self._watch_from(loop, deadline)
            return await reply
        except asyncio.CancelledError:
            if reply.done() and not reply.cancelled():
                reply.exception()  # came as the caller was cancelled: not to be logged
            self._cancel_remote(req_id)
            raise
        finally:
            self._pending.pop(req_id, None)
            if reply_timeout is not None:
                self._deadlines.pop(req_id, None)

    def _watch_from(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Looks at the deadlines at `when` (the loop's clock), the earliest now."""
        if self._watch is not None:
            self._watch.cancel()
        self._watch_at = when
        self._watch = loop.call_at(when, self._time_out_passed, loop)

    def _time_out_passed(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every request whose deadline has passed is cancelled remotely and raises `Timeout`;
        the watch comes back at the earliest deadline left."""
        self._watch, self._watch_at = None, math.inf
        now, earliest = loop.time(), math.inf
        for req_id, (deadline, op, reply_timeout) in list(self._deadlines.items()):
            if deadline > now:
                earliest = min(earliest, deadline)
                continue
            del self._deadlines[req_id]
            reply = self._pending.get(req_id)
            if reply is not None and not reply.done():
                self._cancel_remote(req_id)
                msg = f"supervisor gave no answer to {op!r} in {reply_timeout}s"
                reply.set_exception(errors.Timeout(msg))
        if earliest < math.inf:
            self._watch_from(loop, earliest)

    async def open_connection(self) -> BlockingConnection:
        """Another connection to this supervisor, for a thread that blocks on its replies.

        Raises:
            InvalidInput: no socket can be passed to this supervisor.
            SandboxUnavailable: the supervisor is gone.
        """
        return BlockingConnection(await self.pass_connection())

    async def pass_connection(self) -> socket.socket:
        """Another connection to this supervisor, as a socket (for `open_connection`, or for
        another process to speak this protocol on: a worker of `--workers N`).

        Raises:
            InvalidInput: no socket can be passed to this supervisor.
            SandboxUnavailable: the supervisor is gone.
        """
        if self._dead is not None:
            raise errors.SandboxUnavailable(self._dead)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with theirs:
                rights = [
                    (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [theirs.fileno()]))
                ]
                if self._channel is not None:
                    self._channel.sendmsg([b"c"], rights)  # one byte: never blocks for long
                # (`is not None` first: mypy finds no ByteStream | None that passes sockets)
                elif self._stream is not None and isinstance(self._stream, PassesSockets):
                    async with self._send_lock:  # a blank line: nothing to the protocol
                        await self._stream.send_fds(b"\n", [theirs.fileno()])
                else:
                    raise errors.InvalidInput(
                        "this supervisor takes no other connection: it has no connection "
                        "channel and its stream is not a unix socket"
                    )
        except OSError as e:
            ours.close()
            why = f"cannot pass a connection to the supervisor: {e}"
            raise errors.SandboxUnavailable(why) from e
        except BaseException:
            ours.close()
            raise
        return ours

    async def aclose(self) -> None:
        """Closes the stream; pending requests fail with SandboxUnavailable."""
        self._fail_all("supervisor connection closed")
        self._close_outbox()
        if self._channel is not None:
            self._channel.close()
        if self._stream is None:
            self._flush()  # what was asked last goes (a cancel), then the pipes close
            for transport in self._transports:
                transport.close()
            return
        with anyio.CancelScope(shield=True):
            await self._stream.aclose()

    async def __aenter__(self) -> Self:
        self._own_group = anyio.create_task_group()
        await self._own_group.__aenter__()
        await self.start(self._own_group)
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        await self.aclose()
        assert self._own_group is not None
        await self._own_group.__aexit__(*exc_info)

    def _post(self, line: str) -> None:
        """Queues a request's line for the writer: the request's task never waits on the
        stream (a pass through the event loop with its whole chain of awaits), and the lines
        of requests made meanwhile go out in one write, which the supervisor reads at once.

        Raises:
            SandboxUnavailable: the supervisor is gone, or the client was never started.
        """
        if not self._started:
            raise errors.SandboxUnavailable("supervisor client not started")
        if self._outbox_closed:
            raise errors.SandboxUnavailable(self._dead or "supervisor gone")
        self._outbox.append(line.encode() + b"\n")
        if self._transport is None:
            self._wake_writer()
        elif not self._flush_due:  # the lines of this turn of the loop leave in one write
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """Writes a link's queued lines (the transport sends or buffers them: never waits)."""
        self._flush_due = False
        if self._outbox and self._transport is not None and not self._transport.is_closing():
            lines, self._outbox = self._outbox, []
            self._transport.write(b"".join(lines))

    def _end(self, reason: str) -> None:
        """A link ended (or broke, `reason` says how): every request fails, no line is taken,
        its transports close."""
        self._fail_all(reason)
        self._outbox_closed = True
        self._outbox.clear()
        for transport in self._transports:
            transport.close()
        self._stopped.set()

    def _wake_writer(self) -> None:
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(None)

    def _close_outbox(self) -> None:
        """No line is taken any more; the writer writes those it has, and ends."""
        self._outbox_closed = True
        self._wake_writer()

    async def _write_requests(self) -> None:
        """Writes the queued lines, all of those waiting in one send, until the client
        closes or its stream breaks."""
        assert self._stream is not None
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._outbox:
                    if self._outbox_closed:
                        return
                    self._wake = loop.create_future()
                    await self._wake
                    continue
                lines, self._outbox = self._outbox, []
                async with self._send_lock:
                    await self._stream.send(b"".join(lines))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as e:
            self._fail_all(f"supervisor stream broken: {e!r}")
        finally:
            self._outbox_closed = True  # nothing writes what would be queued now
            self._wake = None

    def _cancel_remote(self, req_id: int) -> None:
        if self._dead is None:
            cancel: CancelArgs = {"target": req_id}
            with contextlib.suppress(errors.SandboxUnavailable):
                self._post(_encode({"id": 0, "op": "cancel", "args": cancel}))

    async def _read_replies(self) -> None:
        assert self._stream is not None
        reason = "supervisor closed its output"
        try:
            while True:
                self._parser.feed(await self._stream.receive())
        except anyio.EndOfStream:
            pass
        except ValueError as e:
            reason = f"supervisor sent garbage: {e}"
        except Exception as e:  # never let one instance's stream fail the caller's task group
            reason = f"supervisor stream broken: {e!r}"
        finally:
            self._fail_all(reason)
            self._close_outbox()  # the writer ends with what it had
            self._stopped.set()

    def _dispatch(self, msg: dict[str, Any], raw: bytes) -> None:
        """Answers the request `msg` (a reply) is for; `raw`: the bytes that followed it."""
        reply = self._pending.get(int(msg.get("id", 0)))
        if reply is None or reply.done():
            return  # a cancelled request's late reply, or a cancel's acknowledgement
        if msg.get("ok"):
            reply.set_result(result_of(msg, raw))
        else:
            reply.set_exception(_error_of(msg.get("error") or {}))

    def _fail_all(self, reason: str) -> None:
        if self._dead is None:
            self._dead = reason
        if self._watch is not None:  # nothing left to time out
            self._watch.cancel()
            self._watch, self._watch_at = None, math.inf
        for reply in self._pending.values():
            if not reply.done():
                reply.set_exception(errors.SandboxUnavailable(self._dead))


class BlockingConnection:
    """A connection of its own to a supervisor: one request at a time, the caller's thread
    blocked on it (no event loop, so no other thread to wake for the reply).

    `close` from another thread is how a caller gives up: the supervisor cancels what the
    connection asked, and the blocked `request` raises `SandboxUnavailable`.
    """

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._ids = itertools.count(1)
        self._buffer = bytearray()
        self.closed = False

    def request(self, op: Op, reply_timeout: float | None = None, **args: Any) -> dict[str, Any]:
        """Sends one request and waits for its reply; after a timeout the connection is closed
        (which cancels the request).

        Raises:
            SandboxUnavailable: the supervisor is gone, or the connection was closed.
            Timeout: `reply_timeout` passed.
            EvalServerError: the supervisor's error, as its own class.
        """
        req_id = next(self._ids)
        line = _encode({"id": req_id, "op": op, "args": args})
        try:
            self._sock.settimeout(reply_timeout)
            self._sock.sendall(line.encode() + b"\n")
            reply = self._receive_line()
            msg = json.loads(reply)
            raw = self._receive_exactly(raw_size(msg, MAX_LINE_BYTES))
        except TimeoutError:
            self.close()
            raise errors.Timeout(
                f"supervisor gave no answer to {op!r} in {reply_timeout}s"
            ) from None
        except OSError as e:
            self.close()
            raise errors.SandboxUnavailable(f"supervisor connection broken: {e!r}") from e
        except ValueError as e:
            self.close()
            raise errors.SandboxUnavailable(f"supervisor sent garbage: {e}") from e
        if int(msg.get("id", 0)) != req_id:  # one request at a time: never another's reply
            self.close()
            raise errors.InfrastructureError(f"supervisor answered {msg.get('id')} for {req_id}")
        if not msg.get("ok"):
            raise _error_of(msg.get("error") or {})
        return result_of(msg, raw)

    def _receive_line(self) -> bytes:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise OSError(f"supervisor sent a line over {MAX_LINE_BYTES} bytes")
            self._receive_more()
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        return line

    def _receive_exactly(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._receive_more()
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def _receive_more(self) -> None:
        chunk = self._sock.recv(1 << 20)
        if not chunk:
            why = "connection closed" if self.closed else "supervisor closed the connection"
            raise OSError(why)
        self._buffer += chunk

    def close(self) -> None:
        """Ends the connection (from any thread): what it asked is cancelled."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
        self._sock.close()
