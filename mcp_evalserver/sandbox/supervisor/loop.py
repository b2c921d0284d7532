"""The supervisor's event loop: one thread, a selectors loop that never waits on a command.

It reads requests (JSON lines, protocol.py) from its first connection and from every socket
passed to it (connections.py), dispatches each through OPERATIONS, the one table of the
operations, drains the pipes of the jobs in flight (jobs.py) and answers each request once;
the answers of one turn of the loop leave in one write per connection.
Every sandboxed thing runs in a forked child (so no fork races another thread's locks), and
each workspace has a holder process that keeps its namespaces and cgroup and forks its execs.
"""

from __future__ import annotations

import array
import contextlib
import itertools
import json
import os
import selectors
import socket
import sys
import time
from typing import TYPE_CHECKING, Any

from . import checkpoints, execs, files, instance, search, workspaces
from .connections import CONNECTION_IDS, MAX_PASSED, Connection, as_unix_socket, complete_lines
from .jobs import Jobs
from .layers import LayerError
from .linux import sigchld_wakeup
from .protocol import (
    CancelArgs,
    CancelResult,
    Empty,
    ErrorBody,
    Op,
    Reply,
    SupervisorError,
    error_type,
    reply_frame,
)
from .state import Supervisor
from .workspaces import IDLE_S

# The most one read of requests takes: a pipe holds 64 KiB. Reads go into one buffer kept for
# good: a fresh 1 MiB bytes object per read cost an mmap, a page fault, an mremap and a munmap
# per request.
READ_BYTES = 1 << 16

# Made once: `json.dumps` with an option builds an encoder per call, `json.loads` of bytes
# guesses their encoding first (UTF-8: clients write ASCII JSON).
_encode = json.JSONEncoder(separators=(",", ":")).encode
_decode = json.JSONDecoder().decode

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    # A handler answers at once (its result) or later, through a job it started (None).
    Handler = Callable[[Supervisor, int, Any], "Mapping[str, Any] | None"]


def cancel(sup: Supervisor, req_id: int, args: CancelArgs) -> CancelResult:
    return {"cancelled": sup.cancel(int(args["target"]))}


def shutdown(sup: Supervisor, req_id: int, args: Empty) -> Empty:
    sup.running = False
    return {}


# Every operation of the protocol (protocol.Op), and the function that serves it.
OPERATIONS: dict[Op, Handler] = {
    "init": instance.init,
    "freeze": instance.freeze,
    "ws_create": workspaces.ws_create,
    "ws_destroy": workspaces.ws_destroy,
    "ws_reset": workspaces.ws_reset,
    "ws_checkpoint": checkpoints.ws_checkpoint,
    "ws_restore": checkpoints.ws_restore,
    "ws_fork": checkpoints.ws_fork,
    "ws_export": checkpoints.ws_export,
    "ws_end_processes": checkpoints.ws_end_processes,
    "exec": execs.exec_,
    "diff": execs.diff,
    "read": files.read,
    "write": files.write,
    "list": files.list_,
    "search": search.search,
    "glob": search.glob,
    "cancel": cancel,
    "shutdown": shutdown,
}


class Loop:
    """Serves one supervisor: requests on `proto_in`, replies on `proto_out`; `lifeline` (our
    stdin when requests come another way) ends us when it ends; `channel` passes sockets that
    become more connections."""

    def __init__(
        self, proto_in: int, proto_out: int, lifeline: int = -1, channel: int = -1
    ) -> None:
        self.proto_in, self.proto_out = proto_in, proto_out
        self.lifeline = lifeline
        self.sel = selectors.DefaultSelector()
        self.sup = Supervisor(Jobs(self.sel, self.reply, self.fail))
        self.inbuf = bytearray()
        self.received = bytearray(READ_BYTES)
        self.received_view = memoryview(self.received)
        # Where sockets that become connections come from: our request socket, if it is one,
        # and the connection channel.
        self.proto_sock = as_unix_socket(proto_in)
        self.channel = socket.socket(fileno=channel) if channel >= 0 else None
        self.route_ids = itertools.count(CONNECTION_IDS)
        # Replies not written yet (see flush): the first connection's, and the others'.
        self.outbox: list[bytes] = []
        self.owed: dict[Connection, list[bytes]] = {}

    # -- plumbing --
    def send(self, msg: Reply) -> None:
        route = self.sup.routes.pop(msg["id"], None) if self.sup.routes else None
        if route is not None:
            self.send_on(route[0], route[1], msg)
            return
        self.outbox.append(reply_frame(msg, _encode))

    def send_on(self, conn: Connection, their_id: int, msg: Reply) -> None:
        conn.asked.discard(msg["id"])
        msg["id"] = their_id
        self.owed.setdefault(conn, []).append(reply_frame(msg, _encode))

    def flush(self) -> None:
        """Writes the replies made since the last flush (the loop's last turn), each
        connection's in one write: its client wakes once for them all, not once per reply,
        and on a machine of few CPUs does not preempt us after each."""
        if self.outbox:
            view = memoryview(b"".join(self.outbox))
            self.outbox.clear()
            try:  # blocking fd: a slow client slows us down rather than losing replies
                while view:
                    view = view[os.write(self.proto_out, view) :]
            except OSError:  # the client is gone: nobody to answer, so clean up and leave
                self.sup.running = False
        if self.owed:
            owed, self.owed = self.owed, {}
            for conn, replies in owed.items():
                try:  # blocking, as on the first connection
                    conn.sock.sendall(b"".join(replies))
                except OSError:  # its client is gone: it no longer waits for anything
                    self.drop_connection(conn)

    def read_connection(self, conn: Connection) -> None:
        try:
            n = conn.sock.recv_into(self.received)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            n = 0
        if not n:
            self.drop_connection(conn)
            return
        for line in complete_lines(conn.inbuf, self.received_view[:n]):
            self.handle(line, conn)

    def drop_connection(self, conn: Connection) -> None:
        """Ends `conn`, cancelling what it asked that is still running."""
        self.owed.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        for our_id in list(conn.asked):
            self.sup.cancel(our_id)  # forgets its route too
        conn.asked.clear()
        conn.sock.close()

    def reply(self, req_id: int, result: Mapping[str, Any]) -> None:
        self.send({"id": req_id, "ok": True, "result": result})

    def fail(self, req_id: int, kind: str, message: str, errno_name: str | None = None) -> None:
        error: ErrorBody = {"type": error_type(kind), "message": message}
        if errno_name:
            error["errno"] = errno_name
        self.send({"id": req_id, "ok": False, "error": error})

    def run(self) -> None:
        rfd = sigchld_wakeup()
        self.sel.register(rfd, selectors.EVENT_READ, "sigchld")
        self.sel.register(self.proto_in, selectors.EVENT_READ, "requests")
        if self.lifeline >= 0:
            self.sel.register(self.lifeline, selectors.EVENT_READ, "lifeline")
        if self.channel is not None:
            self.sel.register(self.channel, selectors.EVENT_READ, "channel")
        try:
            self.loop(rfd)
        finally:
            self.shutdown()  # whatever ended the loop, workspaces and cgroups go with us

    def loop(self, rfd: int) -> None:
        while self.sup.running:
            deadline = self.sup.jobs.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            if self.sup.stale_cgroups:
                timeout = 0.2 if timeout is None else min(timeout, 0.2)
            # Spares are made only once nothing happened for IDLE_S: making one blocks this
            # loop for milliseconds, which must not land on the command asked right after the
            # create that took the last one.
            preparing = workspaces.wants_spares(self.sup)
            if preparing:
                timeout = IDLE_S if timeout is None else min(timeout, IDLE_S)
            events = self.sel.select(timeout)
            for key, _ in events:
                if key.data == "sigchld":
                    while True:
                        try:
                            if not os.read(rfd, 512):
                                break
                        except BlockingIOError:
                            break
                    self.sup.jobs.reap()
                elif key.data == "requests":
                    self.read_requests()
                elif isinstance(key.data, Connection):
                    self.read_connection(key.data)
                elif key.data == "channel":
                    self.read_channel()
                elif key.data == "lifeline":
                    with contextlib.suppress(BlockingIOError):
                        if not os.read(self.lifeline, 4096):
                            self.sup.running = False
                else:
                    job, fd = key.data
                    try:
                        self.sup.jobs.pump(job, fd)
                    except Exception as e:  # one broken job must not take the instance down
                        sys.stderr.write(f"supervisor: job {job.req_id}: {e!r}\n")
            if deadline is not None and time.monotonic() >= deadline:
                self.sup.jobs.expire()  # only then: it looks at every job in flight
            self.flush()
            self.sup.remove_stale_cgroups()
            if preparing and not events:
                workspaces.prepare_one(self.sup)

    def read_requests(self) -> None:
        try:
            if self.proto_sock is not None:
                n = self.receive_with_sockets(self.proto_sock)
            else:
                n = os.readv(self.proto_in, [self.received])
        except BlockingIOError:
            return
        if not n:
            self.sup.running = False
            return
        for line in complete_lines(self.inbuf, self.received_view[:n]):
            self.handle(line)

    def read_channel(self) -> None:
        assert self.channel is not None
        try:
            n = self.receive_with_sockets(self.channel)
        except (BlockingIOError, InterruptedError):
            return
        if not n:  # the client closed it: no more connections, nothing else changes
            self.sel.unregister(self.channel)
            self.channel.close()
            self.channel = None

    def receive_with_sockets(self, sock: socket.socket) -> int:
        """Reads from `sock` into self.received (how many bytes); every socket that came along
        becomes a connection. They come close-on-exec: never a holder's or a command's."""
        space = socket.CMSG_SPACE(MAX_PASSED * array.array("i").itemsize)
        n, ancillary, flags, _ = sock.recvmsg_into([self.received], space, socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                for fd in fds:
                    self.connect(socket.socket(fileno=fd))
        if flags & socket.MSG_CTRUNC:
            sys.stderr.write("supervisor: more sockets came at once than we take; dropped\n")
        return n

    def connect(self, sock: socket.socket) -> None:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            sock.close()  # a client's mistake: its requests there go unanswered, it sees EOF
            return
        sock.setblocking(True)  # read only when the loop saw it readable; writes may block
        self.sel.register(sock, selectors.EVENT_READ, Connection(sock, self.sup.routes))

    def handle(self, line: bytes, conn: Connection | None = None) -> None:
        req_id = 0
        if conn is not None:  # answered on conn, under its own id (see send), even if bad
            req_id = next(self.route_ids)
            self.sup.routes[req_id] = (conn, 0)
            conn.asked.add(req_id)
        try:
            req = _decode(line.decode())
            if conn is None:
                req_id = int(req["id"])
            else:
                self.sup.routes[req_id] = (conn, int(req["id"]))
                if req.get("op") == "cancel":  # its target is one of conn's own ids
                    req["args"] = {"target": conn.our_id(req.get("args", {}).get("target"))}
            handler = OPERATIONS.get(str(req["op"]))  # type: ignore[call-overload]
            if handler is None:
                raise SupervisorError("InvalidInput", "unknown op {!r}".format(req["op"]))
            result = handler(self.sup, req_id, req.get("args") or {})
            if result is not None:
                self.reply(req_id, result)
        except SupervisorError as e:
            # The errno too: an operation served in this process (files.in_process) answers
            # with the same errors as one a child served.
            self.fail(req_id, e.kind, str(e), e.errno_name)
        except LayerError as e:
            self.fail(req_id, e.kind, str(e))
        except OSError as e:
            self.fail(req_id, "InfrastructureError", f"supervisor: {e}")
        except (ValueError, KeyError, TypeError) as e:
            self.fail(req_id, "InvalidInput", f"bad request: {e!r}")
        except Exception as e:  # a bug must fail one request, not every trajectory's instance
            self.fail(req_id, "InfrastructureError", f"supervisor: {e!r}")

    def shutdown(self) -> None:
        self.flush()  # the answer to `shutdown`, or to what was asked before the loop broke
        for key in list(self.sel.get_map().values()):
            if isinstance(key.data, Connection):
                self.drop_connection(key.data)
        workspaces.close_all(self.sup)
