"""Jobs: the children whose pipes the loop drains, and the replies they end in.

A job is a forked child (setup, an export, a file operation) or an exec a workspace's holder
forked: the loop writes its stdin, captures its stdout and stderr with a byte cap, reads its
info pipe (fd 3: JSON lines of status and errors) and, when it has exited and every pipe
reached EOF, answers its request with `finish(job)`. An exec has that one pipe alone (and its
stdin, and its report channel when asked): its runner relays the command's output there as
frames (exec_init.FRAME) and closes it once the command exited, after its status; what the
command left running is the runner's to sink.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from typing import TYPE_CHECKING, Any

from .exec_init import FRAME, JSON_LINE, STDERR, STDOUT
from .linux import PR_SET_PDEATHSIG, close_fds_from, prctl, reset_signals
from .protocol import SupervisorError
from .workspace import Workspace

if TYPE_CHECKING:  # annotations only: the module must import on Python 3.8
    from collections.abc import Callable, Mapping

    Reply = Callable[[int, Mapping[str, Any]], None]
    Fail = Callable[[int, str, str, "str | None"], None]

# The most an exec's report channel keeps (head and tail).
REPORT_CAP = 64 << 20
# The most read from an exec's report channel once its command exited (see Jobs.let_go): what
# it wrote before it exited is at most a socket's buffer; more is a process it left running.
AFTER_EXIT_BYTES = 1 << 20


def _non_blocking(fd: int) -> None:
    """O_NONBLOCK on our end of a fresh pipe (no other status flag set there to keep: one
    fcntl where os.set_blocking reads the flags first)."""
    fcntl.fcntl(fd, fcntl.F_SETFL, os.O_NONBLOCK)


# --- output capture --------------------------------------------------------------------------
class Capture:
    """Keeps the first and last halves of a byte stream up to `cap` bytes in all."""

    def __init__(self, cap: int) -> None:
        self.cap, self.total = cap, 0
        self.head, self.tail = bytearray(), bytearray()

    def feed(self, chunk: bytes | memoryview) -> None:
        self.total += len(chunk)
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - (self.cap - self.cap // 2)
            if excess > 0:
                del self.tail[:excess]

    def result(self) -> tuple[bytes, bool]:
        if self.total <= self.cap:
            return bytes(self.head + self.tail), False
        marker = b"\n[... %d bytes omitted ...]\n" % (self.total - len(self.head) - len(self.tail))
        return bytes(self.head + marker + self.tail), True


class Job:
    """A child whose pipes the loop drains; `finish` runs once it exited and hit EOF.

    `pid` is our own child to reap, or 0 for an exec forked by a workspace's holder (then the
    end of its info pipe, with the status written by its runner, is the end of the job, and
    the pipe carries frames: see take_frames).
    """

    def __init__(self, req_id: int, pid: int, deadline: float | None, ws: Workspace | None) -> None:
        self.req_id, self.pid, self.deadline, self.ws = req_id, pid, deadline, ws
        self.started = time.monotonic()
        self.captures: dict[int, Capture] = {}  # our own child's: its pipe -> its stream
        self.streams: list[Capture] = []  # stdout, stderr
        self.info = bytearray()
        self.partial = b""  # an exec's: the start of a frame not read whole yet
        self.info_fd = -1
        # What is left to write of the stdin: a view, so that taking what was written off
        # its front copies nothing (slicing bytes copied the rest at each write: 50 MiB of
        # stdin took ~9 s of the supervisor's CPU in 64 KiB writes).
        self.stdin_fd, self.stdin_data = -1, memoryview(b"")
        self.status: int | None = None
        self.timed_out = False
        self.killed = False  # by us: timeout, cancel, reset or destroy
        self.open_fds: set[int] = set()
        self.report: socket.socket | None = None  # our end of the exec's report channel
        self.report_data = Capture(REPORT_CAP)
        self.report_writers: set[int] = set()  # pids, as the kernel tells them
        self.finish: Callable[[Job], Mapping[str, Any]] = lambda job: {}
        self.on_done: Callable[[], None] = lambda: None  # once it ended, cancelled or not

    def output(self) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
        return self.streams[0].result(), self.streams[1].result()

    def take_frames(self, data: bytes) -> None:
        """An exec's info pipe, read: its frames to the stream or the JSON lines they are for;
        a frame not whole yet waits for the next read."""
        buf = memoryview(self.partial + data if self.partial else data)
        at, end = 0, len(buf)
        while end - at >= FRAME.size:
            kind, size = FRAME.unpack_from(buf, at)
            start = at + FRAME.size
            if end - start < size:
                break
            at = start + size
            if kind == JSON_LINE:
                self.info += buf[start:at]
            elif kind in (STDOUT, STDERR):
                self.streams[kind == STDERR].feed(buf[start:at])
        self.partial = bytes(buf[at:])

    def messages(self) -> list[dict[str, Any]]:
        found = []
        for line in bytes(self.info).split(b"\n")[:-1]:  # complete lines only
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict):
                found.append(msg)
        return found


class Jobs:
    """Every job in flight, watched by the loop's selector `sel`; a finished one is answered
    through `reply` or `fail`. Also the holders we killed and what waits for their reaping."""

    def __init__(self, sel: selectors.BaseSelector, reply: Reply, fail: Fail) -> None:
        self.sel, self.reply, self.fail = sel, reply, fail
        self.pid = os.getpid()  # the supervisor's: a child forked for a job checks its parent
        self.by_pid: dict[int, Job] = {}  # pid of our own child -> job
        self.active: set[Job] = set()  # unfinished jobs, with or without a pid of ours
        self.by_req: dict[int, Job] = {}
        # Holders we killed, not reaped yet, and what waits for that (see reap, after_holder).
        self.dying: dict[int, list[Callable[[], None]]] = {}

    def next_deadline(self) -> float | None:
        deadlines = [j.deadline for j in self.active if j.deadline and not j.timed_out]
        return min(deadlines) if deadlines else None

    def spawn(
        self,
        req_id: int,
        child: Callable[[], None],
        ws: Workspace | None,
        timeout: float | None,
        cap: int = 0,
        stdin: bytes | None = None,
    ) -> Job:
        """Fork `child` with fd 0 = stdin, 1/2 = captured output (if cap), 3 = info pipe."""
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, info
        pid = os.fork()
        if pid == 0:
            try:
                reset_signals()
                for target, fds in enumerate(pipes):
                    os.dup2(fds[0] if target == 0 else fds[1], target)
                if not cap:
                    os.dup2(os.open("/dev/null", os.O_WRONLY), 1)
                    os.dup2(1, 2)
                close_fds_from(4)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != self.pid:
                    os._exit(1)
                child()
            except BaseException as e:  # report anything, never return into the loop
                try:
                    os.write(
                        3,
                        (
                            json.dumps({"error": str(e), "kind": "InfrastructureError"}) + "\n"
                        ).encode(),
                    )
                finally:
                    os._exit(127)
            os._exit(0)
        os.close(pipes[0][0])
        for _, w in pipes[1:]:
            os.close(w)
        return self.register(Job(req_id, pid, None, ws), pipes, timeout, cap, stdin)

    def register(
        self,
        job: Job,
        pipes: list[tuple[int, int]],
        timeout: float | None,
        cap: int,
        stdin: bytes | None,
    ) -> Job:
        """Watches the parent's ends of `pipes` (stdin, stdout, stderr, info) for `job`."""
        for i, (r, _) in enumerate(pipes[1:], start=1):
            _non_blocking(r)
            if i < 3:
                job.captures[r] = Capture(cap or 1)
                job.streams.append(job.captures[r])
            else:
                job.info_fd = r
            job.open_fds.add(r)
            self.sel.register(r, selectors.EVENT_READ, (job, r))
        return self.watch(job, pipes[0][1], timeout, stdin)

    def register_exec(
        self, job: Job, info: int, stdin_fd: int, timeout: float, cap: int, stdin: bytes | None
    ) -> Job:
        """Watches an exec's info pipe `info` (non-blocking already), its stdin if it has one
        (`stdin_fd`, written `stdin`) and its report channel."""
        job.streams = [Capture(cap or 1), Capture(cap or 1)]
        job.info_fd = info
        job.open_fds.add(info)
        self.sel.register(info, selectors.EVENT_READ, (job, info))
        return self.watch(job, stdin_fd, timeout, stdin)

    def watch(self, job: Job, stdin_fd: int, timeout: float | None, stdin: bytes | None) -> Job:
        """`job` in flight: its deadline, its stdin written from `stdin`, its report read."""
        job.deadline = time.monotonic() + timeout if timeout else None
        job.stdin_fd, job.stdin_data = stdin_fd, memoryview(stdin or b"")
        if job.stdin_data:
            _non_blocking(job.stdin_fd)
            self.sel.register(job.stdin_fd, selectors.EVENT_WRITE, (job, job.stdin_fd))
        elif stdin_fd >= 0:
            os.close(job.stdin_fd)
            job.stdin_fd = -1
        if job.report is not None:
            job.report.setblocking(False)
            job.open_fds.add(job.report.fileno())
            self.sel.register(job.report.fileno(), selectors.EVENT_READ, (job, job.report.fileno()))
        if job.pid:
            self.by_pid[job.pid] = job
        self.active.add(job)
        self.by_req[job.req_id] = job
        if job.ws is not None:
            job.ws.jobs.add(job.req_id)
        return job

    def pump(self, job: Job, fd: int) -> None:
        if fd == job.stdin_fd:
            try:
                n = os.write(fd, job.stdin_data[:65536])
                job.stdin_data = job.stdin_data[n:]
                if job.stdin_data:
                    return
            except BlockingIOError:
                return
            except OSError:
                pass  # the command closed its stdin: not our problem
            self.sel.unregister(fd)
            os.close(fd)
            job.stdin_fd = -1
            return
        if job.report is not None and fd == job.report.fileno():
            self.pump_report(job, job.report)
            return
        try:
            chunk = os.read(fd, 1 << 16)
            if chunk and fd == job.info_fd:
                take = job.info.extend if job.pid else job.take_frames
                take(chunk)
                # Its writer closes it right after its last line (an exec's status): that
                # end is read now rather than after another turn of the loop.
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    take(chunk)
                    return
        except BlockingIOError:
            return
        if chunk:
            job.captures[fd].feed(chunk)
            return
        self.sel.unregister(fd)
        os.close(fd)
        job.open_fds.discard(fd)
        if fd == job.info_fd and not job.pid:
            self.let_go(job)
        self.maybe_done(job)

    def let_go(self, job: Job) -> None:
        """An exec's runner closed the info pipe: its command exited, and its output is all
        read (the runner sinks what a process it left running writes after). What is in the
        report channel now is read; from here on it belongs to whatever the command left
        running, and no one reads on."""
        report = job.report
        if report is not None and report.fileno() in job.open_fds:
            for _ in range(AFTER_EXIT_BYTES >> 16):
                if not self.pump_report(job, report):
                    break
            if report.fileno() in job.open_fds:  # a writer left running: no one reads on
                self.sel.unregister(report.fileno())
                job.open_fds.discard(report.fileno())
                report.close()

    def pump_report(self, job: Job, sock: socket.socket) -> bool:
        """Reads the report channel; whether it read bytes. With SO_PASSCRED the kernel never
        joins bytes of two writers in one read and names each read's writer: that count is
        the exec's answer to "did anyone but the one process that should write to it?"."""
        try:
            chunk, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(12))
        except BlockingIOError:
            return False
        if chunk:
            job.report_data.feed(chunk)
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    job.report_writers.add(struct.unpack("i", data[:4])[0])
            return True
        self.sel.unregister(sock.fileno())
        job.open_fds.discard(sock.fileno())
        sock.close()
        self.maybe_done(job)
        return False

    def reap(self) -> None:
        """Reaps the children that ended. Those we expect to end (jobs, holders we killed) are
        asked for one by one: a wait for any child walks every child in the kernel, and each
        workspace's holder is one (1.1 ms a wait at 3,000, twice per workspace destroyed).
        Only when none of them ended is it a child that ended by itself (a holder that died),
        for the wait for any."""
        expected = False
        for pid in [*self.by_pid, *self.dying]:
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped already
                self.ended(pid, None)
                continue
            if done:
                expected = True
                self.ended(pid, status)
        while not expected:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.ended(pid, status)

    def ended(self, pid: int, status: int | None) -> None:
        for then in self.dying.pop(pid, []):
            try:
                then()
            except Exception as e:  # a bug freeing one workspace must not take the instance
                sys.stderr.write(f"supervisor: after holder {pid}: {e!r}\n")
        job = self.by_pid.get(pid)
        if job is not None and status is not None:
            job.status = status
            self.maybe_done(job)

    def kill(self, job: Job) -> None:
        job.killed = True
        if job.pid and job.status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(job.pid, signal.SIGKILL)
        if not job.pid and job.ws is not None and job.ws.ctl is not None:
            # Its parent, the holder, kills it: only the holder knows the pid for sure.
            with contextlib.suppress(OSError):
                job.ws.ctl.send(b"kill %d" % job.req_id)

    def expire(self) -> None:
        now = time.monotonic()
        for job in list(self.active):
            if job.deadline and not job.timed_out and now >= job.deadline:
                job.timed_out = True
                self.kill(job)

    def maybe_done(self, job: Job) -> None:
        if (job.pid and job.status is None) or job.open_fds or job not in self.active:
            return
        if job.stdin_fd >= 0:
            self.sel.unregister(job.stdin_fd)
            os.close(job.stdin_fd)
        self.by_pid.pop(job.pid, None)
        self.active.discard(job)
        job.on_done()
        if self.by_req.pop(job.req_id, None) is None:
            return  # cancelled: the client no longer waits
        if job.ws is not None:
            job.ws.jobs.discard(job.req_id)
        try:
            self.reply(job.req_id, job.finish(job))
        except SupervisorError as e:
            self.fail(job.req_id, e.kind, str(e), e.errno_name)
        except Exception as e:  # a bug here must fail one request, not the instance
            self.fail(job.req_id, "InfrastructureError", f"supervisor: {e!r}", None)

    def after_holder(self, pid: int, then: Callable[[], None]) -> None:
        """Runs `then` once the holder `pid`, which we killed, is reaped (now if it was)."""
        if pid not in self.dying:
            then()
            return
        self.dying[pid].append(then)
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped already: it had died by itself
            done = pid
        if done:
            self.ended(pid, None)

    def cancel(self, target: int) -> bool:
        """Kills the job of request `target`, whose reply nobody waits for any more."""
        job = self.by_req.pop(target, None)
        if job is not None:
            self.kill(job)
            if job.ws is not None:
                job.ws.jobs.discard(job.req_id)
        return job is not None
