"""Holders: a workspace's process that keeps its namespaces and cgroup and forks its execs.

Spares are forked ahead, ready but for their view (spawn_spare); one given a workspace mounts
its view, then becomes the compiled holder (sandbox/holder/) where that was built
(exec_native_holder), or else serves as the Python `Holder`. Messages on the control socket
(SOCK_SEQPACKET), as holder/holder.c reads them: the assignment (JSON: ws, path, overlay,
areas) answered "ok" or "error: ..."; "exec ID[ stdin][ report][ memfd]\n" then the exec's
request (exec_init.exec_message), with the exec's fds: its info pipe, then the read end of its
stdin, its report channel and the request's memfd, each only if its word is there; "kill ID";
"drop spare" answered "dropped", then "respare". The runner makes the command's stdout and
stderr pipes and relays them, as frames, on the info pipe (exec_init.relay).

The workspace's processes share one pid namespace whose pid 1 (its init) the holder keeps as
long as the view: what a command leaves running lasts across calls and dies with the
workspace (or a restore, which replaces the view: "drop spare" ends the init).
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import sys

from .exec_init import (
    EXEC_MESSAGE_MAX,
    OPTIONAL_FDS,
    REPORT_FD,
    decode_exec_request,
    sandbox_init,
    split_exec_message,
    workspace_init,
)
from .exec_init import report as exec_report
from .isolation import SECCOMP_PROGRAM, drop_bounding_set, kept_mask
from .linux import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    PR_SET_DUMPABLE,
    PR_SET_PDEATHSIG,
    close_fds_except,
    close_fds_from,
    fork_into,
    loopback_up,
    prctl,
    reset_signals,
    setns_fd,
    sigchld_wakeup,
    unshare,
    write_file,
)
from .protocol import SupervisorError
from .state import Supervisor
from .view import View
from .workspace import Workspace


class Holder:
    """A workspace's holder: keeps its namespaces and starts its execs (a tiny zygote).

    Each exec is one child (in the holder's namespaces and cgroup), its runner: it confines
    itself, `posix_spawn`s the command (no second Python fork) into the workspace's pid
    namespace, which it stays out of, waits for it and reports its status on the info pipe.
    "kill" is a SIGUSR1 to the runner, which kills the command's process group.
    """

    def __init__(self, view: View, ws: Workspace, ctl: socket.socket) -> None:
        self.view, self.ws, self.ctl = view, ws, ctl
        self.children: dict[int, int] = {}  # pid of a runner -> job (request id)
        self.broken = ""  # why execs cannot run here, if they cannot
        self.init_pid, self.init_ns = 0, -1  # the workspace's pid 1, and its namespace
        self.init_lifeline = -1  # see start_init

    def start_init(self) -> None:
        """A new workspace pid namespace with its init (exec_init.workspace_init), which lives
        while our end of its lifeline (ours alone: runners close it) is open. Returns once the
        init has mounted the workspace's /proc: a first command must find it."""
        # A socket pair, not a pipe: the init also says on it when its /proc is mounted.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        lifeline, self.init_lifeline = theirs.detach(), ours.detach()
        pid = fork_into(CLONE_NEWPID)
        if pid == 0:
            try:
                reset_signals()
                os.dup2(lifeline, 3)
                close_fds_from(4)
                os.read(3, 1)  # we hold its namespace: until then it must stay dumpable
                prctl(PR_SET_DUMPABLE, 0)
                workspace_init(self.view, self.ws.root)
            finally:
                os._exit(1)
        os.close(lifeline)
        self.init_pid = pid
        try:  # where we lack CAP_SYS_PTRACE (docker), only while the init is dumpable
            ns = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            os.write(self.init_lifeline, b"\0")
        os.read(self.init_lifeline, 1)  # its /proc is mounted (or it died: execs say so)
        # Above the fds an exec's runner dup2s into place (0-4, and REPORT_FD + 64).
        self.init_ns = fcntl.fcntl(ns, fcntl.F_DUPFD_CLOEXEC, REPORT_FD + 128)
        os.close(ns)

    def end_init(self) -> None:
        """Kills the init, and with it every process of the workspace; waits for it."""
        if self.init_pid:
            with contextlib.suppress(OSError):
                os.kill(self.init_pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.init_pid, 0)
        for fd in (self.init_ns, self.init_lifeline):
            if fd >= 0:
                os.close(fd)
        self.init_pid, self.init_ns, self.init_lifeline = 0, -1, -1

    def run(self) -> None:
        """Serves the control socket until it closes. Never returns."""
        rfd = sigchld_wakeup()
        sel = selectors.DefaultSelector()
        sel.register(self.ctl, selectors.EVENT_READ)
        sel.register(rfd, selectors.EVENT_READ)
        while True:
            for key, _ in sel.select():
                if key.fileobj == rfd:
                    with contextlib.suppress(BlockingIOError):
                        os.read(rfd, 512)
                    self.reap()
                    continue
                msg, ancdata, _, _ = self.ctl.recvmsg(EXEC_MESSAGE_MAX, socket.CMSG_SPACE(8 * 4))
                if not msg:
                    os._exit(0)  # the supervisor closed us: the workspace is gone
                fds = array.array("i")
                for level, kind, data in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                words, body = split_exec_message(msg)  # holder/holder.c's messages (see its top)
                if words[:1] == [b"kill"]:
                    for pid, job in self.children.items():
                        if job == int(words[1]):
                            os.kill(pid, signal.SIGUSR1)  # see exec_init.KillSwitch
                elif words[:1] == [b"exec"] and len(fds) == 1 + sum(
                    word in words for word in OPTIONAL_FDS
                ):
                    self.fork_exec(int(words[1]), words, list(fds), body)
                elif msg == b"drop spare":  # the view is replaced: its processes go
                    self.end_init()
                    self.ctl.send(b"dropped")
                elif msg == b"respare":
                    if not self.init_pid:
                        self.start_init()
                else:
                    for fd in fds:
                        os.close(fd)

    def reap(self) -> None:
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.pop(pid, None)
            if pid == self.init_pid:  # it should not die while we live: execs will fail
                self.init_pid = 0

    def fork_exec(self, job: int, words: list[bytes], fds: list[int], body: bytes) -> None:
        """Forks the exec's runner (exec_init.sandbox_init); its fds: info, then stdin,
        report and memfd as the message's header `words` say (exec_init.exec_message)."""
        given = iter(fds)
        info = next(given)
        stdin, report, memfd = (next(given) if word in words else -1 for word in OPTIONAL_FDS)
        try:
            if self.broken:
                raise SupervisorError("InfrastructureError", self.broken)
            pid = os.fork()
        except (OSError, SupervisorError) as e:
            msg = {"error": str(e), "kind": getattr(e, "kind", "LimitExceeded")}
            if isinstance(e, OSError):  # typically the workspace's pids limit
                msg["error"] = f"cannot start a process: {e.strerror}"
            exec_report(info, msg)
            for fd in fds:
                os.close(fd)
            return
        if pid == 0:
            try:
                reset_signals()
                # Ours above 0-4, close-on-exec, and placeholders (close-on-exec too) at 0-4:
                # posix_spawn puts the command's stdio there from fds that are never in the
                # way, and the command starts with those and nothing else of ours.
                info, stdin, report, memfd = (
                    fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, REPORT_FD + 1) if fd >= 0 else -1
                    for fd in (info, stdin, report, memfd)
                )
                null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
                close_fds_except({info, stdin, report, memfd, null, self.init_ns})
                for target in range(REPORT_FD + 1):
                    if target != null:
                        os.dup2(null, target, inheritable=False)
                if memfd >= 0:
                    body = os.pread(memfd, os.fstat(memfd).st_size, 0)
                    os.close(memfd)
                request = decode_exec_request(body)
                # Its command is forked into the workspace's pid namespace; it stays out.
                setns_fd(self.init_ns, CLONE_NEWPID, "enter the workspace's pid namespace")
                os.close(self.init_ns)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the holder's death ends the exec
                sigchld = sigchld_wakeup()
                sandbox_init(self.ws.root, request, info, stdin, report, sigchld)
            except BaseException as e:
                with contextlib.suppress(OSError):
                    exec_report(info, {"error": f"exec: {e}"})
            os._exit(127)
        for fd in fds:  # the info pipe too: its runner writes there
            os.close(fd)
        self.children[pid] = job


def spawn_spare(sup: Supervisor) -> tuple[int, socket.socket, list[str]]:
    """Forks a holder, ready but for its view: (pid, control socket, cgroup dirs).

    A holder keeps a workspace's namespaces alive and forks its execs, so they start in
    its namespaces and cgroup: no setns, no cgroup migration per exec. Joining the cgroup
    (a v1 migration waits for an RCU grace period: 0.4-20 ms here) and making the net
    namespace (1-10 ms) happen ahead of time in spares, off the path of ws_create and of
    the first exec. Binding ns files would keep namespaces without a process, but the
    kernel refuses that bind (EINVAL, "ns loop") when namespace ids are not monotonic
    across CPUs, as on 6.18: 23 of 120 here.
    """
    sup.created += 1  # a new cgroup each time: a reset's old one may await removal
    cgroups = sup.cgroups.create(f"holder.{sup.created}") if sup.cgroups else []
    ctl, holder_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        try:
            holder_main(sup, holder_end, cgroups, ctl)
        finally:
            os._exit(1)  # never fall back into the supervisor's loop
    holder_end.close()
    return pid, ctl, cgroups


def holder_main(
    sup: Supervisor, ctl: socket.socket, cgroups: list[str], other: socket.socket
) -> None:
    """A spare holder: prepares, waits for its workspace, builds its view, serves it."""
    reset_signals()
    other.close()
    close_fds_except({ctl.fileno(), sup.view.snapshot})  # not others' pipes
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != sup.jobs.pid:
        return
    broken = ""
    try:
        for d in cgroups:
            write_file(os.path.join(d, "cgroup.procs"), str(os.getpid()))
        with contextlib.suppress(OSError):  # needs CAP_SYS_RESOURCE: best effort
            write_file("/proc/self/oom_score_adj", "-1000")  # the OOM killer takes execs
        # Net, ipc and uts namespaces are per workspace, not per exec: a fresh net
        # namespace costs ~3 ms and a workspace's execs may share a loopback.
        private = CLONE_NEWIPC | CLONE_NEWUTS
        unshare(private if sup.cfg.get("network") else private | CLONE_NEWNET)
        socket.sethostname("sandbox")
        if not sup.cfg.get("network"):
            loopback_up()
    except BaseException as e:
        broken = f"workspace setup failed: {e}"
    assignment = ctl.recv(65536)
    if not assignment:
        return  # never used: the supervisor is shutting down
    request = json.loads(assignment)
    ws = Workspace(str(request["ws"]), str(request["path"]))
    ws.overlay = dict(request["overlay"])
    try:
        sup.view.enter_view_namespace([str(path) for path in request["areas"]])
        sup.view.mount_view(ws)
        ctl.send(b"ok")
    except BaseException as e:
        ctl.send(f"error: {e}".encode())
        return
    if not broken and sup.native_holder:
        exec_native_holder(sup, ws, ctl)  # returns only if it could not
    # What an exec may ever gain back; our effective set stays: execs mount their /proc.
    drop_bounding_set()  # after the exec above: root's execve takes the bounding set
    holder = Holder(sup.view, ws, ctl)
    holder.broken = broken
    if not broken:
        try:
            holder.start_init()
        except OSError as e:
            holder.broken = f"workspace setup failed: {e}"
    holder.run()


def exec_native_holder(sup: Supervisor, ws: Workspace, ctl: socket.socket) -> None:
    """Becomes the compiled holder (native.py builds it) in these namespaces, cgroup and view: a few
    pages where this interpreter kept about 2 MB, and execs started by system calls, not
    by a forked interpreter. Returns only if the exec failed (this one serves then)."""
    os.set_inheritable(ctl.fileno(), True)
    # Its settings travel in a memfd, not its argv: every exec's pid 1 starts as a copy of
    # the holder, and its command line is what `ps` shows the trajectory.
    fields = [str(ctl.fileno()), ws.root, sup.view.mask_file, sup.view.mask_dir, str(kept_mask())]
    settings = os.memfd_create("holder-settings", 0)
    os.write(settings, b"".join(f.encode() + b"\0" for f in fields) + (SECCOMP_PROGRAM or b""))
    with contextlib.suppress(OSError):
        os.execve(sup.native_holder, ["mcp-evalserver-holder", str(settings)], {})
    os.close(settings)
    sys.stderr.write(f"supervisor: holder {sup.native_holder} did not start; Python holds\n")
