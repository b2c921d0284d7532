"""An exec's runner and the workspace's init (see holders.Holder): the runner, outside the
workspace's pid namespace, confines itself, spawns the command into that namespace and waits
for it alone; the init is that namespace's pid 1, which keeps what commands leave running.
The compiled holder (sandbox/holder/) does the same in C, reading the same exec request
(encode_exec_request)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import struct
import time
from typing import Any

from .isolation import apply_rlimits, drop_privileges, lookup_user
from .linux import PR_SET_DUMPABLE, prctl, write_file
from .protocol import SupervisorError
from .view import View

# Where an exec asked with `report` finds the write end of its private report channel.
REPORT_FD = 4
# A command's stdin, stdout, stderr and report channel, where it finds them.
STDIO_FDS = (0, 1, 2, REPORT_FD)
# Signals Python ignores or handles that a command must start with at their defaults.
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# An exec's request up to this size travels in its "exec" message, after the header line
# (holder/runner.c reads the same): no memfd to make, write and close per exec, nor to stat and
# read in the runner. A larger one (argv may be megabytes) goes in a memfd, the last fd.
INLINE_REQUEST_MAX = 32 << 10
# The most an "exec" message holds: its header line and an inline request (holder/holder.h's too).
EXEC_MESSAGE_MAX = INLINE_REQUEST_MAX + 256


class CommandNotRun(Exception):
    """The program could not be started; the command's result is this exit code."""

    def __init__(self, program: str, reason: str, code: int) -> None:
        super().__init__(program)
        self.program, self.reason, self.code = program, reason, code


def find_program(name: str, path: str) -> str:
    """`name` as execvp would find it on `path` (inside the caller's root).

    Raises:
        CommandNotRun: not found (exit 127) or not executable (126).
    """
    if "/" in name:
        return name
    denied = False
    for folder in path.split(":"):
        candidate = os.path.join(folder or ".", name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            denied = True
    if denied:
        raise CommandNotRun(name, os.strerror(errno.EACCES), 126)
    raise CommandNotRun(name, os.strerror(errno.ENOENT), 127)


def spawn_command(argv: list[str], env: dict[str, str], stdio: list[int]) -> int:
    """The command as a child of ours with `stdio` as its fds 0, 1, 2 (and REPORT_FD, if a
    fourth is given), leading its own session: `posix_spawn` (vfork semantics: nothing of
    ours is copied, unlike a Python fork). Every other fd of ours is close-on-exec.

    Raises:
        CommandNotRun: no such program, or it cannot be executed.
    """
    program = find_program(argv[0], env.get("PATH", DEFAULT_PATH))
    try:
        moves = [(os.POSIX_SPAWN_DUP2, fd, STDIO_FDS[i]) for i, fd in enumerate(stdio)]
        return os.posix_spawn(
            program,
            argv,
            env,
            file_actions=moves,
            setsid=True,
            setsigdef=RESET_SIGNALS,
            setsigmask=(),
        )
    except OSError as e:
        code = 127 if e.errno == errno.ENOENT else 126
        raise CommandNotRun(argv[0], e.strerror or str(e), code) from e


def encode_exec_request(request: dict[str, Any]) -> bytes:
    """An exec's request as the holders read it (holder/runner.c reads the same): NUL-terminated
    fields `cwd user pids memory have_nproc have_memory argc argv... envc env...`; no JSON
    parser in the compiled holder. Strings hold no NUL (execs.exec_ refuses them)."""
    limits, have, env = request["limits"], request["have"], request["env"]
    fields = [request["cwd"], request.get("user") or "", str(limits.get("pids") or ""),
              str(limits.get("memory_bytes") or ""), "1" if have.get("nproc") else "0",
              "1" if have.get("memory") else "0", str(len(request["argv"])), *request["argv"],
              str(len(env)), *(f"{k}={v}" for k, v in env.items())]  # fmt: skip
    return ("\0".join(fields) + "\0").encode("utf-8", "surrogateescape")


# The fds an "exec" message may carry after its info pipe, in this order, each only if its
# word is in the message's header.
OPTIONAL_FDS = (b"stdin", b"report", b"memfd")


def exec_message(job: int, request: bytes, stdin: bool, report: bool) -> tuple[bytes, bool]:
    """The "exec JOB" message for `request` (encode_exec_request's), and whether the request
    must go in a memfd instead (then the header says "memfd" and the body is empty). Its fds:
    the info pipe, then the stdin pipe's read end ("stdin"), the report channel ("report"),
    the memfd ("memfd"), each only if its word is in the header."""
    words = b"exec %d" % job + (b" stdin" if stdin else b"") + (b" report" if report else b"")
    if len(request) <= INLINE_REQUEST_MAX:
        return words + b"\n" + request, False
    return words + b" memfd\n", True


def split_exec_message(message: bytes) -> tuple[list[bytes], bytes]:
    """An "exec" message's header words and its inline request (empty with "memfd")."""
    header, _, body = message.partition(b"\n")
    return header.split(), body


def decode_exec_request(data: bytes) -> dict[str, Any]:
    """The Python holder's reading of encode_exec_request."""
    fields = [f.decode("utf-8", "surrogateescape") for f in data.split(b"\0")[:-1]]
    cwd, user, pids, memory, nproc, has_memory, argc = fields[:7]
    argv = fields[7 : 7 + int(argc)]
    envc = int(fields[7 + int(argc)])
    pairs = fields[8 + int(argc) : 8 + int(argc) + envc]
    return {
        "cwd": cwd, "user": user or None, "argv": argv,
        "env": dict(pair.split("=", 1) for pair in pairs),
        "limits": {"pids": int(pids) if pids else None,
                   "memory_bytes": int(memory) if memory else None},
        "have": {"nproc": nproc == "1", "memory": has_memory == "1"},
    }  # fmt: skip


# --- the info pipe: frames --------------------------------------------------------------
# What an exec's runner writes on its info pipe, the one pipe the supervisor reads per exec
# (holder/wire.c writes the same): frames of a kind byte, a big-endian length and that many bytes:
# the command's stdout, its stderr, or a JSON line ({"status": N} or {"error": ...}). Only the
# runner writes there: its command never holds the pipe, so no output can pose as a frame.
FRAME = struct.Struct(">BI")
STDOUT, STDERR, JSON_LINE = ord("o"), ord("e"), ord("j")
# The most of a stream one frame carries: a frame then fills an empty pipe and no more.
FRAME_CHUNK = (64 << 10) - FRAME.size
# The most read from a command's pipes once it exited (the supervisor's jobs.AFTER_EXIT_BYTES
# for its own children): what it wrote before it exited is at most a pipe's buffer; more is a
# process it left running writing.
AFTER_EXIT_CHUNKS = 16


def write_all(fd: int, data: bytes) -> None:
    """All of `data` to `fd`, waiting while a non-blocking pipe is full."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            waiting = select.poll()
            waiting.register(fd, select.POLLOUT)
            waiting.poll()


def write_frame(fd: int, kind: int, data: bytes) -> None:
    write_all(fd, FRAME.pack(kind, len(data)) + data)


def report(fd: int, message: dict[str, Any]) -> None:
    """A JSON line on the info pipe `fd` (its status, or why it did not run)."""
    write_frame(fd, JSON_LINE, (json.dumps(message) + "\n").encode())


class KillSwitch:
    """The runner's answer to the holder's SIGUSR1 ("kill" this exec): the command's process
    group (the command and what it started there: `cmd &`, pipelines) is killed; asked before
    the command exists, the command is killed as soon as it does."""

    command = 0
    asked = False

    @classmethod
    def arm(cls) -> None:
        signal.signal(signal.SIGUSR1, cls.on_signal)

    @classmethod
    def on_signal(cls, signum: int, frame: Any) -> None:
        cls.asked = True
        cls.fire()

    @classmethod
    def started(cls, command: int) -> None:
        """`command` exists: a kill asked before now kills it at once."""
        cls.command = command
        if cls.asked:
            cls.fire()

    @classmethod
    def fire(cls) -> None:
        if cls.command > 0:
            for target in (-cls.command, cls.command):  # its group, then itself
                with contextlib.suppress(OSError):
                    os.kill(target, signal.SIGKILL)


def await_group(group: int) -> None:
    """Until a killed command's group is gone (holder/runner.c's await_group): the next exec must
    not find its processes still holding the workspace's pids."""
    for _ in range(5000):
        try:
            os.kill(-group, signal.SIGKILL)
        except OSError:
            return
        time.sleep(0.001)


def relay(command: int, streams: list[int], sigchld: int, info: int) -> list[int]:
    """Until `command` exits, its stdout and stderr (`streams`) as frames on `info`; then what
    they hold already (at most AFTER_EXIT_CHUNKS each); `sigchld` wakes us when it exits.
    Returns its status as a JSON frame's, and the pipes still open: a process it left running
    holds them (see sink)."""
    kinds = {streams[0]: STDOUT, streams[1]: STDERR}
    polled = select.poll()
    for fd in (*streams, sigchld):
        polled.register(fd, select.POLLIN)
    status = None
    while status is None:
        for fd, _ in polled.poll():
            if fd == sigchld:
                with contextlib.suppress(BlockingIOError):
                    os.read(sigchld, 512)
                done, raw = os.waitpid(command, os.WNOHANG)
                if done:
                    status = raw
            elif not relay_chunk(fd, kinds[fd], info):
                polled.unregister(fd)
                del kinds[fd]
    for fd in list(kinds):
        for _ in range(AFTER_EXIT_CHUNKS):
            if not select.select([fd], [], [], 0)[0]:
                break
            if not relay_chunk(fd, kinds[fd], info):
                del kinds[fd]
                break
    KillSwitch.command = 0
    if KillSwitch.asked:
        await_group(command)
    report(info, {"status": status})
    os.close(info)
    return list(kinds)


def relay_chunk(fd: int, kind: int, info: int) -> bool:
    """One read of a command's stream `fd` as a frame; False (and `fd` closed) at its end."""
    chunk = os.read(fd, FRAME_CHUNK)
    if chunk:
        write_frame(info, kind, chunk)
        return True
    os.close(fd)
    return False


def sink(fds: list[int]) -> None:
    """Reads and drops what a process the command left running (`server &`) writes to the
    command's pipes, until it closes them, so that it never dies of a broken pipe (holder/runner.c's
    runner does the same beside its next execs). Never returns."""
    polled = select.poll()
    for fd in fds:
        polled.register(fd, select.POLLIN)
    left = len(fds)
    while left:
        for fd, _ in polled.poll():
            if not os.read(fd, 1 << 16):
                polled.unregister(fd)
                left -= 1
    os._exit(0)


def workspace_init(view: View, root: str) -> None:
    """Pid 1 of the workspace's pid namespace (holder/holder.c's init_main): mounts its /proc
    in the view, says so on its lifeline (fd 3, a socket whose other end only the holder
    keeps), then waits for the lifeline's end; ignoring SIGCHLD makes the kernel reap the
    orphans that come to it. Never returns."""
    try:
        view.mount_proc(root)
        os.write(3, b"\0")  # the holder serves no exec before: a first command finds /proc
        os.chroot(root)
        os.chdir("/")
        drop_privileges(True)
    except BaseException:
        os._exit(1)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    os.read(3, 1)  # the holder is gone: so is the workspace
    os._exit(0)


def sandbox_init(
    root: str, request: dict[str, Any], info: int, stdin: int, report_fd: int, sigchld: int
) -> None:
    """The exec's runner, its commands' pid namespace the workspace's: sets the sandbox up,
    spawns the command with fresh stdout and stderr pipes (and `stdin`, or an empty one, and
    `report_fd` if it is one), relays its output on `info` (see relay), then sinks what it
    left running. Every fd of ours is close-on-exec: the command never holds `info`. Never
    returns."""
    env, user = request["env"], request.get("user")
    try:
        KillSwitch.arm()
        os.setsid()  # no controlling terminal: /dev/tty is ENXIO, TIOCSTI has no target
        with contextlib.suppress(OSError):
            write_file("/proc/self/oom_score_adj", "0")  # the holder's -1000 is not for us
        apply_rlimits(request["limits"], request["have"])
        os.chroot(root)
        try:
            os.chdir(request["cwd"])
        except OSError as e:
            report(info, {"error": f"cwd {request['cwd']!r}: {e.strerror}", "kind": "InvalidInput"})
            os._exit(127)
        ids = None
        if user:
            try:
                identity = lookup_user(user)
            except SupervisorError as e:
                report(info, {"error": str(e), "kind": e.kind})
                os._exit(127)
            ids = identity[:3]
            env.setdefault("HOME", identity[3])
        drop_privileges(True, ids)
        # Same uid as the command (though outside its pid namespace), so without this a
        # command that found us could open our info pipe (or ptrace us) and write its own
        # frames there. The command's execve makes it dumpable again.
        prctl(PR_SET_DUMPABLE, 0)
    except BaseException as e:
        report(info, {"error": f"sandbox setup: {e}"})
        os._exit(127)
    if KillSwitch.asked:
        os._exit(127)  # killed before its command existed: no status (see exec_result)
    out, err = os.pipe(), os.pipe()  # close-on-exec, as Python makes them
    if stdin < 0:  # none given: an empty one, as a pipe whose writer is gone
        stdin, writer = os.pipe()
        os.close(writer)
    stdio = [stdin, out[1], err[1]] + ([report_fd] if report_fd >= 0 else [])
    try:
        command = spawn_command(request["argv"], env, stdio)
    except CommandNotRun as e:
        with contextlib.suppress(OSError):
            write_frame(info, STDERR, f"sandbox: cannot run {e.program!r}: {e.reason}\n".encode())
            report(info, {"status": e.code << 8})
        os._exit(0)
    KillSwitch.started(command)
    for fd in stdio:  # the command's ends: its pipes end with it (and what it left running)
        os.close(fd)
    sink(relay(command, [out[0], err[0]], sigchld, info))
