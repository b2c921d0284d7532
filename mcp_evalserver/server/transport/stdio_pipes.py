"""MCP over stdio without a thread per line: the wire's pipes read and written on the event loop.

The SDK's stdio transport wraps stdin and stdout in `anyio.wrap_file`, which hands every line
read, every write and every flush to a worker thread: three thread hand-offs per tool call, each
a wake-up that a busy machine's scheduler may delay. When stdin and stdout are pipes or sockets
(as an MCP client starts a server), `PipeReader` and `PipeWriter` do the same work with
non-blocking system calls on the event loop. They are `anyio.AsyncFile`s, the type the SDK's
`stdio_server` takes as explicit streams.

With explicit streams the SDK leaves fd 0 and 1 alone, so `claim_stdio` does what its own claim
does: the wire moves to private descriptors, fd 0 reads /dev/null and fd 1 writes to stderr
while serving, so a child process or a stray print cannot corrupt the protocol.
"""

from __future__ import annotations

import codecs
import contextlib
import os
import signal
import stat
import sys
from collections import deque
from collections.abc import Iterator
from typing import IO, cast

import anyio
from anyio import AsyncFile

_CHUNK = 1 << 16


def _is_pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class PipeReader(AsyncFile[str]):
    """UTF-8 lines from a non-blocking pipe, read when the event loop says it is readable."""

    def __init__(self, fd: int) -> None:
        super().__init__(cast(IO[str], None))
        self._fd = fd
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lines: deque[str] = deque()  # complete lines, newline included
        self._partial: list[str] = []  # the line being read: pieces without a newline
        self._eof = False
        self._waiting: anyio.CancelScope | None = None  # while waiting for the pipe

    def end(self) -> None:
        """Ends the input here, as if the client had closed it: what was read is still read,
        then ''."""
        self._eof = True
        if self._waiting is not None:
            self._waiting.cancel()

    async def readline(self) -> str:
        """The next line with its newline; at end of input the rest, then ''."""
        while not self._lines:
            if self._eof:
                rest, self._partial = "".join(self._partial), []
                return rest
            try:
                data = os.read(self._fd, _CHUNK)
            except BlockingIOError:
                with anyio.CancelScope() as self._waiting:
                    await anyio.wait_readable(self._fd)
                self._waiting = None
                continue
            self._eof = not data
            self._take(self._decoder.decode(data, final=self._eof))
        return self._lines.popleft()

    def _take(self, text: str) -> None:
        # Only the new text is searched and each piece is joined once: a 16 MB line arriving
        # in 64 KB reads costs linear time, not a rescan of the whole line per read.
        *ends, tail = text.split("\n")
        if ends:
            self._partial.append(ends[0])
            self._lines.append("".join(self._partial) + "\n")
            self._lines.extend(line + "\n" for line in ends[1:])
            self._partial = []
        if tail:
            self._partial.append(tail)

    async def aclose(self) -> None:
        """Nothing to close: the descriptor belongs to `claim_stdio`."""


class PipeWriter(AsyncFile[str]):
    """UTF-8 text to a non-blocking pipe; `write` returns once the pipe took all of it."""

    def __init__(self, fd: int) -> None:
        super().__init__(cast(IO[str], None))
        self._fd = fd

    async def write(self, b: str) -> int:
        view = memoryview(b.encode())
        while view:
            try:
                view = view[os.write(self._fd, view) :]
            except BlockingIOError:
                await anyio.wait_writable(self._fd)
        return len(b)

    async def flush(self) -> None:
        """Nothing is buffered: `write` wrote it all."""

    async def aclose(self) -> None:
        """Nothing to close: the descriptor belongs to `claim_stdio`."""


@contextlib.contextmanager
def claim_stdio() -> Iterator[tuple[PipeReader, PipeWriter] | None]:
    """The wire's reader and writer over private duplicates of fd 0 and 1, non-blocking.

    Meanwhile fd 0 reads /dev/null and fd 1 writes to stderr; both are restored on exit.
    Yields None (nothing changed) when stdin or stdout is not a pipe or socket, or on Windows:
    the caller then serves through the SDK's own transport.
    """
    # Windows: anyio waits on sockets only there, and its pipes cannot be made non-blocking.
    if sys.platform == "win32" or not (_is_pipe_or_socket(0) and _is_pipe_or_socket(1)):
        yield None
        return
    sys.stdout.flush()
    wire_in = os.dup(0)
    wire_out = os.dup(1)
    saved = [os.get_blocking(fd) for fd in (wire_in, wire_out)]
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        for fd in (wire_in, wire_out):  # os.dup's copies are not inherited by children
            os.set_blocking(fd, False)
        yield PipeReader(wire_in), PipeWriter(wire_out)
    finally:
        os.close(null)
        for fd, blocking in zip((wire_in, wire_out), saved, strict=True):
            with contextlib.suppress(OSError):
                os.set_blocking(fd, blocking)
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        os.close(wire_in)
        os.close(wire_out)


async def end_input_on_signal(reader: PipeReader) -> None:
    """Ends `reader`'s input at the first SIGINT or SIGTERM (how Claude Code ends a server),
    so that a signal stops the server as cleanly as stdin's end: the requests in flight are
    answered and the lifespan closes the campaigns. A second signal acts as Python's default
    (the handlers are gone by then)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            reader.end()
            return
