"""An exec's runner and the workspace's init (see holders.Holder): the runner, outside the
workspace's pid namespace, confines itself, spawns the command into that namespace and waits
for it alone; the init is that namespace's pid 1, which keeps what commands leave running.
holder.c does the same in C, reading the same exec request (encode_exec_request)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import time
from typing import Any

from .isolation import apply_rlimits, drop_privileges, lookup_user
from .linux import PR_SET_DUMPABLE, prctl, write_file
from .protocol import SupervisorError
from .view import View

# Where an exec asked with `report` finds the write end of its private report channel.
REPORT_FD = 4
# Signals Python ignores or handles that a command must start with at their defaults.
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# An exec's request up to this size travels in its "exec" message, after the header line
# (holder.c reads the same): no memfd to make, write and close per exec, nor to stat and
# read in the runner. A larger one (argv may be megabytes) goes in a memfd, the last fd.
INLINE_REQUEST_MAX = 32 << 10
# The most an "exec" message holds: its header line and an inline request (holder.c's too).
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


def spawn_command(argv: list[str], env: dict[str, str]) -> int:
    """The command as a child of ours with our stdio, leading its own session: `posix_spawn`
    (vfork semantics: nothing of ours is copied, unlike a Python fork).

    Raises:
        CommandNotRun: no such program, or it cannot be executed.
    """
    program = find_program(argv[0], env.get("PATH", DEFAULT_PATH))
    try:
        return os.posix_spawn(
            program, argv, env, setsid=True, setsigdef=RESET_SIGNALS, setsigmask=()
        )
    except OSError as e:
        code = 127 if e.errno == errno.ENOENT else 126
        raise CommandNotRun(argv[0], e.strerror or str(e), code) from e


def encode_exec_request(request: dict[str, Any]) -> bytes:
    """An exec's request as the holders read it (holder.c reads the same): NUL-terminated
    fields `cwd user pids memory have_nproc have_memory argc argv... envc env...`; no JSON
    parser in the compiled holder. Strings hold no NUL (execs.exec_ refuses them)."""
    limits, have, env = request["limits"], request["have"], request["env"]
    fields = [request["cwd"], request.get("user") or "", str(limits.get("pids") or ""),
              str(limits.get("memory_bytes") or ""), "1" if have.get("nproc") else "0",
              "1" if have.get("memory") else "0", str(len(request["argv"])), *request["argv"],
              str(len(env)), *(f"{k}={v}" for k, v in env.items())]  # fmt: skip
    return ("\0".join(fields) + "\0").encode("utf-8", "surrogateescape")


def exec_message(job: int, request: bytes) -> tuple[bytes, bool]:
    """The "exec JOB" message for `request` (encode_exec_request's), and whether the request
    must go in a memfd instead (then the header says "memfd" and the body is empty)."""
    if len(request) <= INLINE_REQUEST_MAX:
        return b"exec %d\n" % job + request, False
    return b"exec %d memfd\n" % job, True


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
    def fire(cls) -> None:
        if cls.command > 0:
            for target in (-cls.command, cls.command):  # its group, then itself
                with contextlib.suppress(OSError):
                    os.kill(target, signal.SIGKILL)


def await_group(group: int) -> None:
    """Until a killed command's group is gone (holder.c's await_group): the next exec must
    not find its processes still holding the workspace's pids."""
    for _ in range(5000):
        try:
            os.kill(-group, signal.SIGKILL)
        except OSError:
            return
        time.sleep(0.001)


def wait_for_command(command: int) -> None:
    """Waits for `command` alone (what it left running is the workspace init's), reports its
    status on the info pipe."""
    KillSwitch.command = command
    if KillSwitch.asked:
        KillSwitch.fire()
    for fd in (0, 1, 2):  # the command's pipes end with the command, not with us
        os.close(fd)
    with contextlib.suppress(OSError):
        os.close(REPORT_FD)  # likewise its report channel, if it has one
    _, status = os.waitpid(command, 0)
    if KillSwitch.asked:
        await_group(command)
    os.write(3, (json.dumps({"status": status}) + "\n").encode())
    os._exit(0)


def workspace_init(view: View, root: str) -> None:
    """Pid 1 of the workspace's pid namespace (holder.c's init_main): mounts its /proc in the
    view, then waits for the end of its lifeline (fd 3: the holder's end); ignoring SIGCHLD
    makes the kernel reap the orphans that come to it. Never returns."""
    try:
        view.mount_proc(root)
        os.chroot(root)
        os.chdir("/")
        drop_privileges(True)
    except BaseException:
        os._exit(1)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    os.read(3, 1)  # the holder is gone: so is the workspace
    os._exit(0)


def sandbox_init(
    root: str,
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    limits: dict[str, Any],
    have: dict[str, bool],
    user: str | None = None,
) -> None:
    """The exec's runner, its commands' pid namespace the workspace's: sets the sandbox up,
    spawns the command, waits for it (see wait_for_command). Never returns."""
    try:
        KillSwitch.arm()
        os.setsid()  # no controlling terminal: /dev/tty is ENXIO, TIOCSTI has no target
        fcntl.fcntl(3, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
        with contextlib.suppress(OSError):
            write_file("/proc/self/oom_score_adj", "0")  # the holder's -1000 is not for us
        apply_rlimits(limits, have)
        os.chroot(root)
        try:
            os.chdir(cwd)
        except OSError as e:
            msg = {"error": f"cwd {cwd!r}: {e.strerror}", "kind": "InvalidInput"}
            os.write(3, (json.dumps(msg) + "\n").encode())
            os._exit(127)
        ids = None
        if user:
            try:
                identity = lookup_user(user)
            except SupervisorError as e:
                os.write(3, (json.dumps({"error": str(e), "kind": e.kind}) + "\n").encode())
                os._exit(127)
            ids = identity[:3]
            env.setdefault("HOME", identity[3])
        drop_privileges(True, ids)
        # Same uid as the command (though outside its pid namespace), so without this a
        # command that found us could open our fd 3 (or ptrace us) and write its own
        # `status` into the info pipe. The command's execve makes it dumpable again.
        prctl(PR_SET_DUMPABLE, 0)
    except BaseException as e:
        os.write(3, (json.dumps({"error": f"sandbox setup: {e}"}) + "\n").encode())
        os._exit(127)
    if KillSwitch.asked:
        os._exit(127)  # killed before its command existed: no status (see exec_result)
    try:
        command = spawn_command(argv, env)
    except CommandNotRun as e:
        with contextlib.suppress(OSError):
            os.write(2, f"sandbox: cannot run {e.program!r}: {e.reason}\n".encode())
            os.write(3, (json.dumps({"status": e.code << 8}) + "\n").encode())
        os._exit(0)
    wait_for_command(command)
