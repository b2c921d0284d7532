"""Connections besides the first: sockets passed to the supervisor, each answered on itself."""

from __future__ import annotations

import os
import socket
import stat
from typing import Any

# Request ids of other connections are renumbered from here: far past any first connection's.
CONNECTION_IDS = 1 << 48
MAX_PASSED = 16  # sockets taken with one read (of the request socket or the channel)


class Connection:
    """A client connection besides the first, passed to us (client.py: open_connection).

    A caller that blocks on its own connection (a Ray actor's thread) gets its reply with no
    other thread to wake. Its requests are renumbered here (ids of its own may repeat the first
    connection's) and answered on it; when it ends, what it asked and has not had answered is
    cancelled, so closing it is how its client gives up on a command.
    """

    def __init__(self, sock: socket.socket, routes: dict[int, tuple[Connection, int]]) -> None:
        self.sock = sock
        self.inbuf = bytearray()
        self.asked: set[int] = set()  # our ids of its requests not answered yet
        self.routes = routes  # the supervisor's: our id -> (connection, its id)

    def our_id(self, their_id: Any) -> int:
        """Our id of a request it asked and we did not answer yet, or -1."""
        for our_id in self.asked:
            if self.routes[our_id][1] == their_id:
                return our_id
        return -1


def complete_lines(buffer: bytearray, chunk: memoryview) -> list[bytes]:
    """Adds `chunk` (a view of the bytes just read) to a connection's `buffer`; takes out and
    returns the lines it completed (blank ones dropped), leaving the unfinished rest."""
    buffer += chunk
    if buffer.find(b"\n", len(buffer) - len(chunk)) < 0:
        return []  # a large request (a file to write) is still arriving: no rescans
    *lines, rest = bytes(buffer).split(b"\n")
    buffer[:] = rest
    return [line for line in lines if line.strip()]


def as_unix_socket(fd: int) -> socket.socket | None:
    """A socket object on `fd` (a duplicate) if it is a unix stream socket, else None."""
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        return None
    sock = socket.socket(fileno=os.dup(fd))
    if sock.family != socket.AF_UNIX:
        sock.close()
        return None
    return sock
