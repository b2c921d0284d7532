"""The supervisor's requests straight over a unix socket, past dockerd and the shim.

Through `docker exec -i` every request and reply passes dockerd and the container's shim, each
a process to wake and a copy to make, both ways. When the engine runs on this machine, the
instance container gets a directory of ours bind-mounted (`IO_MOUNT`); the supervisor, started
by the same `docker exec -i` with `--listen`, makes a socket there, accepts this process once,
removes the socket and serves that connection. The exec session stays: it carries the
supervisor's stderr, and its end still ends the supervisor.

Whether the directory really is shared (an engine behind a forwarded socket may be on another
machine) is not guessed: the directory holds a file named `here`, and the supervisor answers
"stdio" on the exec stream when it does not see it; the stream then carries the requests.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import anyio
import anyio.abc
from anyio.streams.buffered import BufferedByteReceiveStream

from mcp_evalserver import errors
from mcp_evalserver.sandbox.docker_stream import DockerExecStream

IO_MOUNT = "/run/mcp-evalserver-io"  # inside an instance container
SOCKET_NAME = "supervisor.sock"
HELLO_TIMEOUT_S = 60.0


def make_io_dir(root: str) -> str:
    """A fresh directory of ours (0700) under `root`, with the `here` marker."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    path = tempfile.mkdtemp(prefix="io-", dir=root)
    Path(path, "here").touch()
    return path


def remove_io_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def listen_argv(io_dir: str | None) -> list[str]:
    """The supervisor's extra arguments: where to listen, if a directory is shared."""
    return ["--listen", f"{IO_MOUNT}/{SOCKET_NAME}"] if io_dir else []


class SideDoorStream(anyio.abc.ByteStream):
    """The connection to the supervisor, owning the exec session that started it: the
    session's output is drained (its stderr logged by the exec stream) until it ends, and its
    end closes the connection, as the end of the exec stream itself did."""

    def __init__(self, sock: anyio.abc.UNIXSocketStream, session: DockerExecStream) -> None:
        self._sock = sock
        self._session = session
        self._draining = anyio.CancelScope()
        self._drained = anyio.Event()

    async def drain_session(self) -> None:
        gone = (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)
        try:
            with self._draining, contextlib.suppress(*gone):
                while True:
                    await self._session.receive()
            with anyio.CancelScope(shield=True):
                await self._sock.aclose()
        finally:
            self._drained.set()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._sock.receive(max_bytes)

    async def send(self, item: bytes) -> None:
        await self._sock.send(item)

    async def send_eof(self) -> None:
        await self._sock.send_eof()

    async def send_fds(self, message: bytes, fds: list[int]) -> None:
        """Passes sockets along with `message` (client.py: open_connection)."""
        await self._sock.send_fds(message, fds)

    async def aclose(self) -> None:
        # The session is closed only once nothing reads it: a stream closed under a reader
        # breaks asyncio's transport.
        self._draining.cancel()
        with anyio.CancelScope(shield=True):
            await self._drained.wait()
            await self._sock.aclose()
            await self._session.aclose()


async def open_side_door(
    session: DockerExecStream, io_dir: str, task_group: anyio.abc.TaskGroup
) -> anyio.abc.ByteStream:
    """The supervisor's first line on `session` says where it serves: the side door (then a
    connection to it, whose session `task_group` drains) or its stdio (then `session`).

    Raises:
        SandboxUnavailable: the supervisor said neither, or its socket refused us.
    """
    reader = BufferedByteReceiveStream(session)
    try:
        with anyio.fail_after(HELLO_TIMEOUT_S):
            hello = await reader.receive_until(b"\n", 64)
    except (TimeoutError, anyio.EndOfStream, anyio.IncompleteRead, anyio.DelimiterNotFound) as e:
        raise errors.SandboxUnavailable(
            f"the supervisor did not say where it serves ({e!r})"
        ) from e
    if reader.buffer:  # nothing may follow the hello before a request was sent
        raise errors.SandboxUnavailable(f"the supervisor said more than hello: {reader.buffer!r}")
    if hello == b"stdio":
        return session
    if hello != b"listening":
        raise errors.SandboxUnavailable(f"the supervisor said {hello!r} instead of hello")
    try:
        sock = await anyio.connect_unix(os.path.join(io_dir, SOCKET_NAME))
    except OSError as e:
        raise errors.SandboxUnavailable(f"the supervisor's socket refused us: {e}") from e
    door = SideDoorStream(sock, session)
    task_group.start_soon(door.drain_session)
    return door
