"""The supervisor's process: its stdio, its connection channel, its side door; then the loop."""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import sys

from .loop import Loop


def main() -> None:
    # No controlling terminal for anything we start: not the operator's, whatever started us.
    with contextlib.suppress(OSError):  # EPERM: we already lead a process group (or session)
        os.setsid()
    # The protocol owns the original stdin/stdout; stray prints go to stderr instead.
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(os.open("/dev/null", os.O_RDONLY), 0)
    os.dup2(2, 1)
    os.set_blocking(proto_in, False)
    os.set_blocking(proto_out, True)
    # Each exec in flight holds four pipes here: 1024 descriptors would cap us near 250.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 1 << 20)), hard))
    lifeline = channel = -1
    if "--connections" in sys.argv[1:-1]:
        channel = int(sys.argv[sys.argv.index("--connections") + 1])
        os.set_inheritable(channel, False)  # a holder or a command with it could connect
    if "--listen" in sys.argv[1:-1]:
        door = side_door(sys.argv[sys.argv.index("--listen") + 1], proto_out)
        if door >= 0:  # requests come through it; our stdin's end still ends us
            lifeline, proto_in, proto_out = proto_in, door, door
    Loop(proto_in, proto_out, lifeline, channel).run()


def side_door(path: str, proto_out: int) -> int:
    """Serves the client through a unix socket at `path` (a directory the client shares with
    us, see docker_side_door.py), past whatever relays our stdio: says "listening" on stdout,
    accepts one connection, removes the socket. Says "stdio" and returns -1 where the directory
    is not the client's (no `here` in it)."""
    if not os.path.exists(os.path.join(os.path.dirname(path), "here")):
        os.write(proto_out, b"stdio\n")
        return -1
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(1)
    os.write(proto_out, b"listening\n")
    server.settimeout(60)
    try:
        conn, _ = server.accept()
    finally:
        server.close()
        os.unlink(path)  # nobody else ever connects
    conn.setblocking(True)  # read only when the loop saw it readable; writes may block
    return conn.detach()
