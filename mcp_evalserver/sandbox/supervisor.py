#!/usr/bin/env python3
"""mcp-evalserver sandbox supervisor: copy-on-write workspaces and sandboxed exec in one instance.

Stdlib only and Python >= 3.8, because it is copied into arbitrary images and run as
`python3 supervisor.py`. It speaks JSON lines on stdin/stdout; every request carries an `id`
and many may be in flight, each answered once:

    -> {"id": 7, "op": "exec", "args": {"ws": "t1", "argv": ["true"], "timeout": 10}}
    <- {"id": 7, "ok": true, "result": {"exit_code": 0, ...}}
    <- {"id": 8, "ok": false, "error": {"type": "NotFound", "message": "...", "errno": "ENOENT"}}

Ops and their args (results in brackets):
  init       mode ("host"|"container"), store, store_tmpfs, instance, workdir, network
             [version, pid, python, cgroups, cgroup_dirs, limits: which are enforced]
  freeze     setup: [shell lines], timeout            [base: HEAD of workdir or null]
  ws_create  ws, limits: {pids, memory_bytes, disk_bytes}
             [ws, ms, holder_pid, root, made_ahead: built before it was asked for,
              ready_left: how many more are (if made_ahead)]
  exec       ws, argv, env, cwd, stdin_b64, timeout, output_cap, user (name or uid in the view),
             report (a private channel at the command's fd REPORT_FD, see spawn_sandboxed)
             [exit_code (-signal), stdout_b64, stderr_b64, *_truncated, duration_s, timed_out;
              with report: report_b64, report_truncated, report_writers]
  read       ws, path, max_bytes [data_b64]     write  ws, path, data_b64, mode [bytes]
  list       ws, path [entries: {name, kind, size}, truncated]
  diff       ws, timeout, max_bytes [patch_b64]  ws_reset, ws_destroy  ws
  ws_checkpoint  ws [checkpoint, depth, holder_pid]  ws_restore  ws, checkpoint [holder_pid]
  ws_fork    ws, name, checkpoint (none: a new one) [ws, ms, checkpoint]
  ws_export  ws, checkpoint, max_bytes [archive_b64: the checkpoint's layers as a tar]
  ws_create  ... start_b64 (such an archive): the workspace starts at it [checkpoint: of it]
  cancel     target (a request id)               shutdown
A socket passed to us (SCM_RIGHTS) on our request socket, or on the connection channel
`--connections FD` (the local backend's: its requests come through pipes), becomes another
connection that speaks this same protocol: see Connection.
One thread runs a selectors loop and never waits on a command: every sandboxed thing runs in
a forked child (so no fork races another thread's locks), and each workspace has a holder
process that keeps its namespaces and cgroup and forks its execs.

Modes. "container": the overlay's lower is `/` and uppers live on a non-overlay store (e.g. a
tmpfs at /trajs); the container needs CAP_SYS_ADMIN and CAP_NET_ADMIN (and no AppArmor
profile). "host" (the local backend): the host's `/` is bind-mounted read-only and the overlay
(lower = the instance directory) sits at that directory's own path; run it as root, or as a
user who may create user namespaces (then without cgroup limits).
"""

from __future__ import annotations

import array
import base64
import contextlib
import ctypes
import errno
import fcntl
import io
import itertools
import json
import os
import platform
import resource
import selectors
import signal
import socket
import stat
import struct
import sys
import time
from collections.abc import Callable
from typing import Any

try:
    from mcp_evalserver.sandbox import supervisor_layers as layers
except ImportError:  # run as a script (`-I` leaves our own directory off the path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import supervisor_layers as layers  # type: ignore[import-not-found, no-redef]

PROTOCOL_VERSION = 1

# --- Linux constants (stable kernel ABI) ----------------------------------------------------
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP, CLONE_NEWTIME = 0x02000000, 0x00000080
NS_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID
NS_FLAGS |= CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_CAPBSET_READ, PR_CAPBSET_DROP, CAP_SYS_ADMIN = 1, 23, 24, 21
PR_SET_DUMPABLE = 4
# Where an exec asked with `report` finds the write end of its private report channel.
REPORT_FD = 4
REPORT_CAP = 64 << 20
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 22, 38
SYSCALL_CLONE = {"x86_64": 56, "aarch64": 220}
# Signals Python ignores or handles that a command must start with at their defaults.
RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD)
# What a trajectory keeps: root-like access to its own copy-on-write files, nothing else.
# Never CAP_DAC_READ_SEARCH (open_by_handle_at escapes a chroot), SYS_ADMIN, SYS_CHROOT, KILL.
KEPT_CAPS = (0, 1, 3, 4)  # CHOWN, DAC_OVERRIDE, FOWNER, FSETID
SYSCALL_MOUNT_SETATTR, AT_RECURSIVE, AT_FDCWD = 442, 0x8000, -100
SYSCALL_OPEN_TREE, SYSCALL_MOVE_MOUNT = 428, 429  # the same number on every architecture
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
# Syscalls a sandboxed process may not make even without capabilities (user namespaces make
# unshare/clone possible for anyone); per architecture: (audit arch, {name: nr}).
SECCOMP_TABLES = {
    "x86_64": (0xC000003E, {"mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161,
                            "unshare": 272, "setns": 308, "clone": 56, "clone3": 435,
                            "ioctl": 16, "personality": 135, "socket": 41}),
    "aarch64": (0xC00000B7, {"mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
                             "unshare": 97, "setns": 268, "clone": 220, "clone3": 435,
                             "ioctl": 29, "personality": 92, "socket": 198}),
}  # fmt: skip
NEW_MOUNT_API = (428, 429, 430, 431, 432, 433, 442)  # open_tree..fspick, mount_setattr
# What Docker's default seccomp profile refuses a container without extra capabilities
# (moby's profiles/seccomp/default.json), by number: the keyring (not namespaced), io_uring
# (its operations bypass seccomp), modules, kexec, tracing, NUMA, clock and swap calls, file
# handles, userfaultfd and obsolete calls. Per arch; absent where the arch has no such call.
DENIED_SYSCALLS = {
    "x86_64": {"acct": 163, "add_key": 248, "bpf": 321, "clock_adjtime": 305,
               "clock_settime": 227, "create_module": 174, "delete_module": 176,
               "fanotify_init": 300, "finit_module": 313, "get_kernel_syms": 177,
               "get_mempolicy": 239, "init_module": 175, "io_uring_enter": 426,
               "io_uring_register": 427, "io_uring_setup": 425, "ioperm": 173, "iopl": 172,
               "kcmp": 312, "kexec_file_load": 320, "kexec_load": 246, "keyctl": 250,
               "lookup_dcookie": 212, "mbind": 237, "modify_ldt": 154, "move_pages": 279,
               "name_to_handle_at": 303, "nfsservctl": 180, "open_by_handle_at": 304,
               "perf_event_open": 298, "pidfd_getfd": 438, "process_madvise": 440,
               "query_module": 178, "quotactl": 179, "quotactl_fd": 443, "reboot": 169,
               "request_key": 249, "set_mempolicy": 238, "settimeofday": 164, "swapoff": 168,
               "swapon": 167, "syslog": 103, "sysfs": 139, "_sysctl": 156, "userfaultfd": 323,
               "uselib": 134, "ustat": 136, "vhangup": 153, "migrate_pages": 256,
               "set_mempolicy_home_node": 450},
    "aarch64": {"acct": 89, "add_key": 217, "bpf": 280, "clock_adjtime": 266,
                "clock_settime": 112, "delete_module": 106, "fanotify_init": 262,
                "finit_module": 273, "get_mempolicy": 236, "init_module": 105,
                "io_uring_enter": 426, "io_uring_register": 427, "io_uring_setup": 425,
                "kcmp": 272, "kexec_file_load": 294, "kexec_load": 104, "keyctl": 219,
                "lookup_dcookie": 18, "mbind": 235, "move_pages": 239,
                "name_to_handle_at": 264, "nfsservctl": 42, "open_by_handle_at": 265,
                "perf_event_open": 241, "pidfd_getfd": 438, "process_madvise": 440,
                "quotactl": 60, "quotactl_fd": 443, "reboot": 142, "request_key": 218,
                "set_mempolicy": 237, "settimeofday": 170, "swapoff": 225, "swapon": 224,
                "syslog": 116, "userfaultfd": 282, "vhangup": 58, "migrate_pages": 238,
                "set_mempolicy_home_node": 450},
}  # fmt: skip
# ioctls that act on a terminal the process does not own: TIOCSTI pushes input into it,
# TIOCLINUX (on a virtual console) can paste and read its screen.
DENIED_IOCTLS = (0x5412, 0x541C)
# socket(2) families Docker refuses: AF_VSOCK talks to the hypervisor, past every namespace.
DENIED_SOCKET_FAMILIES = (40,)
# personality(2) values Docker allows: Linux, with UNAME26 and/or ADDR_LIMIT_32BIT, and a query.
ALLOWED_PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
# Host mode: a view is an allowlist (DESIGN.md). Of the host it holds these system directories
# (or their symlinks), read-only, nosuid, nodev; then the instance at its own path, the paths
# the task declares, and the workspace's own PRIVATE_DIRS, /dev and /proc. Nothing else.
HOST_SYSTEM = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
# Per workspace, on its disk cap: /tmp and /var/tmp share one directory; /root is HOME.
PRIVATE_DIRS = {"/tmp": "tmp", "/var/tmp": "tmp", "/root": "home"}
# Under /etc, besides whatever a non-root user may not read: key and credential directories
# whose public halves need not be visible either.
ETC_SECRETS = ("ssh", "ssl/private", "docker", "sudoers.d")
PROC_MASKED = ("kcore", "keys", "timer_list", "sched_debug", "latency_stats", "acpi", "scsi")
PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs")
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
SPARE_HOLDERS = 2  # prepared ahead: see Supervisor.spawn_spare
READY_WORKSPACES = 2  # whole workspaces prepared ahead: see Supervisor.prepare_ready
# Request ids of other connections are renumbered from here: far past any first connection's.
CONNECTION_IDS = 1 << 48
MAX_PASSED = 16  # sockets taken with one read (of the request socket or the channel)
IDLE_S = 0.002  # how long the loop has nothing to do before it prepares spares
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                        ctypes.c_char_p]  # fmt: skip
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]  # fmt: skip


def _cap_last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40


# Read once here: inside a workspace view /proc may be an empty directory.
CAP_LAST_CAP = _cap_last_cap()


class SupervisorError(Exception):
    """An error answered to the client; `kind` names a class of mcp_evalserver.errors.

    `errno_name` ("EACCES", ...) says which system call failure it was, when one was.
    """

    def __init__(self, kind: str, message: str, errno_name: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.errno_name = kind, errno_name


def _check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    _check(_libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), "mount " + target)


def umount(target: str) -> None:
    _check(_libc.umount2(target.encode(), MNT_DETACH), "umount " + target)


def prctl(option: int, arg: int = 0) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc.setns(fd, nstype), "setns " + path)
    finally:
        os.close(fd)


def clone_mount(path: str) -> int:
    """A detached copy of the mount at `path` (open_tree(2)): an fd that `attach_mount` puts
    into another mount namespace, where a bind of `path` could not reach."""
    fd = _libc.syscall(ctypes.c_long(SYSCALL_OPEN_TREE), ctypes.c_int(AT_FDCWD),
                       ctypes.c_char_p(path.encode()),
                       ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC))  # fmt: skip
    return _check(fd, "open_tree " + path)


def attach_mount(fd: int, target: str) -> None:
    """Mounts `clone_mount`'s copy at `target` (move_mount(2)) and closes the fd."""
    try:
        ret = _libc.syscall(ctypes.c_long(SYSCALL_MOVE_MOUNT), ctypes.c_int(fd),
                            ctypes.c_char_p(b""), ctypes.c_int(AT_FDCWD),
                            ctypes.c_char_p(target.encode()),
                            ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))  # fmt: skip
        _check(ret, "move_mount " + target)
    finally:
        os.close(fd)


# The GIL stays held across a call through PyDLL: fork_into's clone must not release it.
_syscall_holding_gil = ctypes.PyDLL(None, use_errno=True).syscall


def fork_into(flags: int) -> int:
    """os.fork() whose child starts in new namespaces (clone(2) `flags`, e.g. CLONE_NEWPID).

    A clone without a new stack is a fork; Python's own before/after-fork hooks run around it
    exactly as os.fork runs them. One fork where unshare-then-fork took two processes.
    """
    number = SYSCALL_CLONE.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"no clone syscall number for {platform.machine()}")
    ctypes.pythonapi.PyOS_BeforeFork()
    zero = ctypes.c_ulong(0)
    pid = _syscall_holding_gil(ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD),
                               zero, zero, zero, zero)  # fmt: skip
    err = ctypes.get_errno()
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, f"clone: {os.strerror(err)}")
    return int(pid)


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
    parser in the compiled holder. Strings hold no NUL (op_exec refuses them)."""
    limits, have, env = request["limits"], request["have"], request["env"]
    fields = [request["cwd"], request.get("user") or "", str(limits.get("pids") or ""),
              str(limits.get("memory_bytes") or ""), "1" if have.get("nproc") else "0",
              "1" if have.get("memory") else "0", str(len(request["argv"])), *request["argv"],
              str(len(env)), *(f"{k}={v}" for k, v in env.items())]  # fmt: skip
    return b"".join(field.encode("utf-8", "surrogateescape") + b"\0" for field in fields)


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


def make_readonly_recursive(path: str) -> None:
    """Read-only, nosuid, nodev for a mount and everything under it (rbind alone keeps rw)."""
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
    ret = _libc.syscall(ctypes.c_long(SYSCALL_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
                        ctypes.c_char_p(path.encode()), ctypes.c_uint(AT_RECURSIVE),
                        ctypes.byref(attr), ctypes.c_size_t(32))  # fmt: skip
    if ret == 0:
        return
    # Kernels before 5.12: remount each submount, deepest last is fine for ro.
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    for point in points:
        point = point.replace("\\040", " ")
        if point == path or point.startswith(path.rstrip("/") + "/"):
            mount("none", point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def close_fds_from(lowest: int) -> None:
    close_fds_except(set(range(lowest)))


def close_fds_except(keep: set[int]) -> None:
    """Closes every fd >= 3 not in `keep` (a forked child must not hold others' pipes)."""
    close_range = getattr(_libc, "close_range", None)  # glibc >= 2.34; not in older musl
    low = 3
    for fd in [*sorted(k for k in keep if k >= 3), 1 << 32]:
        if fd <= low:
            low = max(low, fd + 1)
            continue
        if close_range is None or close_range(ctypes.c_uint(low), ctypes.c_uint(fd - 1), 0):
            for name in os.listdir("/proc/self/fd"):  # kernels before 5.9, older libcs
                if low <= int(name) < fd:
                    with contextlib.suppress(OSError):
                        os.close(int(name))
        low = fd + 1


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]  # fmt: skip


def _seccomp_program() -> bytes | None:
    """A classic-BPF filter refusing mount/namespace/DENIED syscalls; None on an unknown arch.

    Every refusal is EPERM (what Docker answers) but clone3, whose flags hide in a struct:
    ENOSYS makes libc fall back to clone, whose flags we can read.
    """
    machine = platform.machine()
    table = SECCOMP_TABLES.get(machine)
    if table is None:
        return None
    arch, nrs = table
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    nr, arg0, arg1 = 0, 16, 24  # offsets in seccomp_data (low words of the arguments)
    # (code, jump-if-true label, jump-if-false label, k); "" = the next instruction.
    body: list[tuple[int, str, str, int]] = [(ld, "", "", 4), (jeq, "", "enosys", arch)]
    body.append((ld, "", "", nr))
    if machine == "x86_64":
        body.append((jge, "eperm", "", 0x40000000))  # the x32 ABI's numbers
    blocked = [nrs[n] for n in ("mount", "umount2", "pivot_root", "chroot", "unshare", "setns")]
    for number in blocked + list(NEW_MOUNT_API) + sorted(DENIED_SYSCALLS[machine].values()):
        body.append((jeq, "eperm", "", number))
    body.append((jeq, "enosys", "", nrs["clone3"]))
    body.append((jeq, "ioctl", "", nrs["ioctl"]))
    body.append((jeq, "personality", "", nrs["personality"]))
    body.append((jeq, "socket", "", nrs["socket"]))
    body.append((jeq, "", "allow", nrs["clone"]))
    body.append((ld, "", "", arg0))  # the clone flags
    body.append((jset, "eperm", "allow", NS_FLAGS))
    labels = {"ioctl": len(body)}
    body.append((ld, "", "", arg1))  # the request
    body += [(jeq, "eperm", "", request) for request in DENIED_IOCTLS]
    body.append((ret, "", "", allow))
    labels["personality"] = len(body)
    body.append((ld, "", "", arg0))
    body += [(jeq, "allow", "", persona) for persona in ALLOWED_PERSONALITIES]
    body.append((ret, "", "", eperm))
    labels["socket"] = len(body)
    body.append((ld, "", "", arg0))  # the family
    body += [(jeq, "eperm", "", family) for family in DENIED_SOCKET_FAMILIES]
    body.append((ret, "", "", allow))
    labels.update(allow=len(body), eperm=len(body) + 1, enosys=len(body) + 2)
    prog: list[tuple[int, int, int, int]] = []
    for code, jt, jf, k in body:
        here = len(prog) + 1
        prog.append((code, labels[jt] - here if jt else 0, labels[jf] - here if jf else 0, k))
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm), (ret, 0, 0, enosys)]
    assert all(0 <= jt < 256 and 0 <= jf < 256 for _, jt, jf, _ in prog)
    return b"".join(struct.pack("HBBI", *ins) for ins in prog)


SECCOMP_PROGRAM = _seccomp_program()


def drop_bounding_set() -> None:
    """What an exec may ever gain back; holders drop it once for all their execs."""
    if _libc.prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0:
        return  # already done
    for cap in range(CAP_LAST_CAP + 1):
        if cap not in KEPT_CAPS:
            prctl(PR_CAPBSET_DROP, cap)


def drop_privileges(filter_syscalls: bool, ids: tuple[int, int, list[int]] | None = None) -> None:
    """Keep uid 0 but only KEPT_CAPS; no_new_privs; optionally the seccomp filter.

    Why uid 0 and not a uid per workspace: tasks' files are root-owned, and access(2) ignores
    capabilities for any other real uid, so git and pip would see a read-only repository.
    Per-workspace process caps therefore come from the pids cgroup, not RLIMIT_NPROC.
    `ids` (uid, gid, groups; see `lookup_user`) asks for another user of the view: a non-zero
    uid keeps no capability at all.
    """
    keep_mask = sum(1 << c for c in KEPT_CAPS)
    drop_bounding_set()
    if ids is not None:
        uid, gid, groups = ids
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)  # from uid 0 to another: the kernel clears every capability set
    if ids is None or ids[0] == 0:
        header = _CapHeader(0x20080522, 0)
        data = (_CapData * 2)(_CapData(keep_mask, keep_mask, keep_mask), _CapData(0, 0, 0))
        _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries and file caps grant nothing more
    program = SECCOMP_PROGRAM if filter_syscalls else None
    if program is not None:
        buf = ctypes.create_string_buffer(program)
        fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buf))
        fbuf = ctypes.create_string_buffer(fprog)
        _check(_libc.prctl(PR_SET_SECCOMP, 2, ctypes.addressof(fbuf), 0, 0), "seccomp")


def lookup_user(user: str) -> tuple[int, int, list[int], str]:
    """(uid, gid, groups, home) of a user name or uid, from the view's /etc/passwd and group.

    Called after chroot: the workspace's own files decide (a sample may add users). A uid
    absent from passwd runs with gid 0 and home /, as `docker exec --user` does.
    """
    entries = []
    with contextlib.suppress(OSError), open("/etc/passwd", errors="replace") as f:
        entries = [line.rstrip("\n").split(":") for line in f]
    found = next(
        (e for e in entries if len(e) >= 7 and (e[0] == user or (user.isdigit() and e[2] == user))),
        None,
    )
    if found is None:
        if not user.isdigit():
            raise SupervisorError(
                "InvalidInput", f"unable to find user {user}: no matching entries in passwd file"
            )
        return int(user), 0, [0], "/"
    name, uid, gid, home = found[0], int(found[2]), int(found[3]), found[5] or "/"
    groups = {gid}
    with contextlib.suppress(OSError), open("/etc/group", errors="replace") as f:
        for line in f:
            fields = line.rstrip("\n").split(":")
            if len(fields) >= 4 and fields[2].isdigit() and name in fields[3].split(","):
                groups.add(int(fields[2]))
    return uid, gid, sorted(groups), home


def serve_as_init(command: int) -> None:
    """Pid 1 of an exec: reaps every orphan until `command` exits, reports its status."""
    for fd in (0, 1, 2):  # the command's pipes end with the command, not with us
        os.close(fd)
    with contextlib.suppress(OSError):
        os.close(REPORT_FD)  # likewise its report channel, if it has one
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == command:
            break
    os.write(3, (json.dumps({"status": status}) + "\n").encode())
    os._exit(0)  # and the kernel kills whatever the command left running


def enter_user_namespace() -> None:
    """Unprivileged: become root of a new user namespace mapping only ourselves."""
    uid, gid = os.getuid(), os.getgid()
    try:
        unshare(CLONE_NEWUSER)
        write_file("/proc/self/setgroups", "deny")
        write_file("/proc/self/uid_map", f"0 {uid} 1")
        write_file("/proc/self/gid_map", f"0 {gid} 1")
    except OSError as e:
        raise SupervisorError(
            "SandboxUnavailable",
            f"uid {uid} may not create user namespaces here ({e.strerror}); run as root, or "
            "allow them (sysctl kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, "
            "kernel.apparmor_restrict_unprivileged_userns=0)",
        ) from e


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS IFF_UP


def reset_signals() -> None:
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


# --- cgroups: per-workspace pids/memory limits where the hierarchy is writable ---------------
class Cgroups:
    """Per-workspace cgroups under the supervisor's own (v1 controllers or the v2 tree)."""

    def __init__(self, in_container: bool) -> None:
        self.version = ""
        self.bases: dict[str, str] = {}  # controller ("pids", "memory", "" for v2) -> dir
        self.in_container = in_container
        try:
            self._setup()
        except OSError:
            self.bases = {}
        if not self.bases:
            self.version = ""

    def _setup(self) -> None:
        own: dict[str, str] = {}
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                for c in ctrls.split(","):
                    own[c] = path
        name = f"mcp-evalserver-{os.getpid()}"
        if os.path.isdir("/sys/fs/cgroup/pids") or os.path.isdir("/sys/fs/cgroup/memory"):
            self.version = "v1"
            for ctrl in ("pids", "memory"):
                mnt = "/sys/fs/cgroup/" + ctrl
                if ctrl not in own or not os.path.isdir(mnt):
                    continue
                if not os.access(mnt, os.W_OK):
                    # Docker mounts the container's cgroup read-only; with CAP_SYS_ADMIN we
                    # may remount it rw in our private mount namespace (the container's view
                    # stays read-only) and nest per-workspace limits under the container's.
                    with contextlib.suppress(OSError):
                        flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC
                        mount("none", mnt, None, flags)
                # Without a cgroup namespace the path names the host's tree; inside a
                # container only our own cgroup is mounted, at the controller's root.
                parent = mnt + own[ctrl] if os.path.isdir(mnt + own[ctrl]) else mnt
                with contextlib.suppress(OSError):
                    os.makedirs(os.path.join(parent, name), exist_ok=True)
                    self.bases[ctrl] = os.path.join(parent, name)
        elif os.path.exists("/sys/fs/cgroup/cgroup.controllers") and "" in own:
            # v2: processes may only sit in leaves, so we move into a leaf of our own subtree
            # and enable the controllers for its siblings (works where the parent delegates).
            self.version = "v2"
            root = "/sys/fs/cgroup"
            if not os.access(root, os.W_OK):  # as for v1 in docker
                with contextlib.suppress(OSError):
                    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC
                    mount("none", root, None, flags)
            parent = root + own[""] if os.path.isdir(root + own[""]) else root
            self._delegate(parent.rstrip("/"))
            base = os.path.join(parent, name)
            os.makedirs(os.path.join(base, "supervisor"), exist_ok=True)
            write_file(os.path.join(base, "supervisor", "cgroup.procs"), str(os.getpid()))
            write_file(os.path.join(base, "cgroup.subtree_control"), "+pids +memory")
            self.bases[""] = base

    def _delegate(self, parent: str) -> None:
        """Enables pids and memory for `parent`'s children (v2), if it has not already."""
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if {"pids", "memory"} <= set(f.read().split()):
                return
        try:
            write_file(os.path.join(parent, "cgroup.subtree_control"), "+pids +memory")
            return
        except OSError as e:
            if e.errno != errno.EBUSY or not self.in_container:
                raise
        # A container's own (namespaced) root cgroup holds its processes, and v2 enables
        # controllers only below a cgroup without any: move them into a leaf, as nested
        # container runtimes do. Only ever inside a container: never a host's processes.
        leaf = os.path.join(parent, "init")
        os.makedirs(leaf, exist_ok=True)
        with open(os.path.join(parent, "cgroup.procs")) as f:
            for pid in f.read().split():
                with contextlib.suppress(OSError):  # gone meanwhile
                    write_file(os.path.join(leaf, "cgroup.procs"), pid)
        write_file(os.path.join(parent, "cgroup.subtree_control"), "+pids +memory")

    def create(self, name: str) -> list[str]:
        dirs = []
        for base in self.bases.values():
            d = os.path.join(base, name)
            os.makedirs(d, exist_ok=True)
            dirs.append(d)
        return dirs

    def limit(self, dirs: list[str], pids: int | None, memory: int | None) -> None:
        ctrls = list(self.bases)  # create() made one directory per controller, in this order
        for i, d in enumerate(dirs):
            ctrl = ctrls[i]
            if pids and ctrl in ("pids", ""):
                write_file(os.path.join(d, "pids.max"), str(pids))
            if memory and ctrl == "memory":
                write_file(os.path.join(d, "memory.limit_in_bytes"), str(memory))
                swap = os.path.join(d, "memory.memsw.limit_in_bytes")
                if os.path.exists(swap):
                    write_file(swap, str(memory))
            if memory and ctrl == "":
                write_file(os.path.join(d, "memory.max"), str(memory))
                if os.path.exists(os.path.join(d, "memory.swap.max")):
                    write_file(os.path.join(d, "memory.swap.max"), "0")

    def limits(self) -> dict[str, bool]:
        v2 = "" in self.bases
        return {"pids": v2 or "pids" in self.bases, "memory": v2 or "memory" in self.bases}


def remove_cgroup_tree(base: str) -> None:
    """Removes our (empty) cgroup directory and its children; best effort."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)
        os.rmdir(base)


# --- output capture --------------------------------------------------------------------------
class Capture:
    """Keeps the first and last halves of a byte stream up to `cap` bytes in all."""

    def __init__(self, cap: int) -> None:
        self.cap, self.total = cap, 0
        self.head, self.tail = bytearray(), bytearray()

    def feed(self, chunk: bytes) -> None:
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


# --- workspaces ------------------------------------------------------------------------------
class Workspace:
    def __init__(self, name: str, path: str) -> None:
        self.name, self.path = name, path
        self.holder_pid = 0
        self.ctl: socket.socket | None = None  # to the holder; closing it ends the workspace
        # Not named after the workspace: one made ahead (prepare_ready) gets its name later.
        self.root = os.path.join(path, "r", "view")
        self.cgroups: list[str] = []
        self.jobs: set[int] = set()  # request ids running in this workspace
        self.limits: dict[str, Any] = {}
        self.layers: layers.WorkspaceLayers | None = None  # its stack (supervisor side)
        self.overlay: dict[str, Any] = {}  # what its holder mounts: layers.overlay()


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


class Job:
    """A child whose pipes the loop drains; `finish` runs once it exited and hit EOF.

    `pid` is our own child to reap, or 0 for an exec forked by a workspace's holder (then the
    end of its info pipe, with the status written by its parent, is the end of the job).
    """

    def __init__(self, req_id: int, pid: int, deadline: float | None, ws: Workspace | None) -> None:
        self.req_id, self.pid, self.deadline, self.ws = req_id, pid, deadline, ws
        self.started = time.monotonic()
        self.captures: dict[int, Capture] = {}
        self.info = bytearray()
        self.info_fd = -1
        self.stdin_fd, self.stdin_data = -1, b""
        self.status: int | None = None
        self.timed_out = False
        self.killed = False  # by us: timeout, cancel, reset or destroy
        self.open_fds: set[int] = set()
        self.out_fd = self.err_fd = -1
        self.report: socket.socket | None = None  # our end of the exec's report channel
        self.report_data = Capture(REPORT_CAP)
        self.report_writers: set[int] = set()  # pids, as the kernel tells them
        self.finish: Callable[[Job], dict[str, Any]] = lambda job: {}
        self.on_done: Callable[[], None] = lambda: None  # once it ended, cancelled or not

    def output(self) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
        return self.captures[self.out_fd].result(), self.captures[self.err_fd].result()

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


class Holder:
    """A workspace's holder: keeps its namespaces and starts its execs (a tiny zygote).

    Each exec is one child (in the holder's namespaces and cgroup) cloned straight into a pid
    namespace of its own, as its pid 1: it makes its own mount namespace and /proc, confines
    itself, `posix_spawn`s the command (no second Python fork) and serves as its init, then
    reports the command's status on the info pipe. Killing it kills the whole pid namespace.
    """

    def __init__(self, sup: Supervisor, ws: Workspace, ctl: socket.socket) -> None:
        self.sup, self.ws, self.ctl = sup, ws, ctl
        self.children: dict[int, int] = {}  # pid of C -> job (request id)
        self.broken = ""  # why execs cannot run here, if they cannot

    def run(self) -> None:
        """Serves the control socket until it closes. Never returns."""
        rfd, wfd = os.pipe()
        for fd in (rfd, wfd):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wfd)
        signal.signal(signal.SIGCHLD, lambda *_: None)
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
                msg, ancdata, _, _ = self.ctl.recvmsg(4096, socket.CMSG_SPACE(8 * 4))
                if not msg:
                    os._exit(0)  # the supervisor closed us: the workspace is gone
                fds = array.array("i")
                for level, kind, data in ancdata:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                words = msg.split()  # the messages of holder.c (see its top)
                if words[:1] == [b"kill"]:
                    for pid, job in self.children.items():
                        if job == int(words[1]):
                            os.kill(pid, signal.SIGKILL)
                elif words[:1] == [b"exec"] and len(fds) in (5, 6):  # sixth: a report channel
                    self.fork_exec(int(words[1]), list(fds))
                elif msg == b"drop spare":  # holder.c's: this one keeps no exec ready
                    self.ctl.send(b"dropped")
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

    def fork_exec(self, job: int, fds: list[int]) -> None:
        stdin, out, err, info, memfd = fds[:5]
        report = fds[5] if len(fds) > 5 else -1
        try:
            if self.broken:
                raise SupervisorError("InfrastructureError", self.broken)
            pid = fork_into(CLONE_NEWPID)  # pid 1 of its own pid namespace: one kill for all
        except (OSError, SupervisorError) as e:
            msg = {"error": str(e), "kind": getattr(e, "kind", "LimitExceeded")}
            if isinstance(e, OSError):  # typically the workspace's pids limit
                msg["error"] = f"cannot start a process: {e.strerror}"
            os.write(info, (json.dumps(msg) + "\n").encode())
            for fd in fds:
                os.close(fd)
            return
        if pid == 0:
            try:
                reset_signals()
                if report >= 0:  # out of the way of the dup2s below
                    report = fcntl.fcntl(report, fcntl.F_DUPFD, REPORT_FD + 64)
                for target, fd in enumerate((stdin, out, err, info)):
                    os.dup2(fd, target)
                request = decode_exec_request(os.pread(memfd, os.fstat(memfd).st_size, 0))
                if report >= 0:
                    os.dup2(report, REPORT_FD)  # inheritable: the command gets it
                close_fds_from(REPORT_FD + 1 if report >= 0 else 4)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the holder's death ends the exec
                self.sup.sandbox_init(
                    self.ws, request["argv"], request["env"], request["cwd"],
                    request["limits"], request["have"], request.get("user"),
                )  # fmt: skip
            except BaseException as e:
                with contextlib.suppress(OSError):
                    os.write(3, (json.dumps({"error": f"exec: {e}"}) + "\n").encode())
            os._exit(127)
        for fd in fds:  # the info pipe too: its end comes with the init's report
            os.close(fd)
        self.children[pid] = job


class Supervisor:
    def __init__(
        self, proto_in: int, proto_out: int, lifeline: int = -1, channel: int = -1
    ) -> None:
        self.proto_in, self.proto_out = proto_in, proto_out
        self.lifeline = lifeline  # our stdin when requests come another way: its end ends us
        self.sel = selectors.DefaultSelector()
        self.jobs: dict[int, Job] = {}  # pid of our own child -> job
        self.active: set[Job] = set()  # unfinished jobs, with or without a pid of ours
        self.by_req: dict[int, Job] = {}
        self.workspaces: dict[str, Workspace] = {}
        self.cfg: dict[str, Any] = {}
        self.frozen = False
        self.base: str | None = None
        self.cgroups: Cgroups | None = None
        self.stale_cgroups: list[str] = []
        self.inbuf = bytearray()
        self.running = True
        self.pid = os.getpid()
        self.created = 0  # holders forked so far
        self.layer_store: layers.LayerStore | None = None  # every workspace's layers
        self.spares: list[tuple[int, socket.socket, list[str]]] = []  # see spawn_spare
        # Holders we killed, not reaped yet, and what waits for that (see reap, after_holder).
        self.dying: dict[int, list[Callable[[], None]]] = {}
        self.mask_file = self.mask_dir = self.skeleton = ""  # see make_masks, build_skeleton
        self.dev = ""  # every view's /dev: see make_dev
        self.late_paths: list[dict[str, Any]] = []  # mounted per workspace (build_skeleton)
        self.native_holder = ""  # holder.c's binary, if init named one that can run here
        # Fresh workspaces built ahead with the limits of the last plain ws_create: the next
        # one takes its name and goes (see prepare_ready).
        self.ready: list[Workspace] = []
        self.ready_limits: dict[str, Any] | None = None
        self.prepare_after = 0.0  # monotonic time before which nothing is made ahead
        self.snapshot = -1  # the mount namespace holders copy (see snapshot_namespace)
        # Where sockets that become connections come from: our request socket, if it is one,
        # and the connection channel.
        self.proto_sock = as_unix_socket(proto_in)
        self.channel = socket.socket(fileno=channel) if channel >= 0 else None
        self.routes: dict[int, tuple[Connection, int]] = {}  # our id -> (connection, its id)
        self.route_ids = itertools.count(CONNECTION_IDS)

    # -- plumbing --
    def send(self, msg: dict[str, Any]) -> None:
        route = self.routes.pop(msg["id"], None) if self.routes else None
        if route is not None:
            self.send_on(route[0], route[1], msg)
            return
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        view = memoryview(data)
        try:
            while view:  # blocking fd: a slow client slows us down rather than losing replies
                view = view[os.write(self.proto_out, view) :]
        except OSError:  # the client is gone: nobody to answer, so clean up and leave
            self.running = False

    def send_on(self, conn: Connection, their_id: int, msg: dict[str, Any]) -> None:
        conn.asked.discard(msg["id"])
        msg["id"] = their_id
        try:  # blocking, as on the first connection
            conn.sock.sendall((json.dumps(msg, separators=(",", ":")) + "\n").encode())
        except OSError:  # its client is gone: it no longer waits for anything
            self.drop_connection(conn)

    def read_connection(self, conn: Connection) -> None:
        try:
            chunk = conn.sock.recv(1 << 20)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.drop_connection(conn)
            return
        for line in complete_lines(conn.inbuf, chunk):
            self.handle(line, conn)

    def drop_connection(self, conn: Connection) -> None:
        """Ends `conn`, cancelling what it asked that is still running."""
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(conn.sock)
        for our_id in list(conn.asked):
            self.cancel(our_id)  # forgets its route too
        conn.asked.clear()
        conn.sock.close()

    def reply(self, req_id: int, result: dict[str, Any]) -> None:
        self.send({"id": req_id, "ok": True, "result": result})

    def fail(self, req_id: int, kind: str, message: str, errno_name: str | None = None) -> None:
        error = {"type": kind, "message": message}
        if errno_name:
            error["errno"] = errno_name
        self.send({"id": req_id, "ok": False, "error": error})

    def run(self) -> None:
        rfd, wfd = os.pipe()
        for fd in (rfd, wfd):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wfd)
        signal.signal(signal.SIGCHLD, lambda *_: None)
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
        while self.running:
            deadlines = [j.deadline for j in self.active if j.deadline and not j.timed_out]
            timeout = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            if self.stale_cgroups:
                timeout = 0.2 if timeout is None else min(timeout, 0.2)
            # Spares are made only once nothing happened for IDLE_S: making one blocks this
            # loop for milliseconds, which must not land on the command asked right after the
            # create that took the last one.
            preparing = self.wants_spares()
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
                    self.reap()
                elif key.data == "requests":
                    self.read_requests()
                elif isinstance(key.data, Connection):
                    self.read_connection(key.data)
                elif key.data == "channel":
                    self.read_channel()
                elif key.data == "lifeline":
                    with contextlib.suppress(BlockingIOError):
                        if not os.read(self.lifeline, 4096):
                            self.running = False
                else:
                    job, fd = key.data
                    try:
                        self.pump(job, fd)
                    except Exception as e:  # one broken job must not take the instance down
                        sys.stderr.write(f"supervisor: job {job.req_id}: {e!r}\n")
            self.expire()
            self.remove_stale_cgroups()
            if preparing and not events:
                self.prepare_one()

    def read_requests(self) -> None:
        try:
            if self.proto_sock is not None:
                chunk = self.receive_with_sockets(self.proto_sock)
            else:
                chunk = os.read(self.proto_in, 1 << 20)
        except BlockingIOError:
            return
        if not chunk:
            self.running = False
            return
        for line in complete_lines(self.inbuf, chunk):
            self.handle(line)

    def read_channel(self) -> None:
        assert self.channel is not None
        try:
            chunk = self.receive_with_sockets(self.channel)
        except (BlockingIOError, InterruptedError):
            return
        if not chunk:  # the client closed it: no more connections, nothing else changes
            self.sel.unregister(self.channel)
            self.channel.close()
            self.channel = None

    def receive_with_sockets(self, sock: socket.socket) -> bytes:
        """Reads from `sock`; every socket that came along becomes a connection. They come
        close-on-exec: never a holder's or a command's."""
        space = socket.CMSG_SPACE(MAX_PASSED * array.array("i").itemsize)
        chunk, ancillary, flags, _ = sock.recvmsg(1 << 20, space, socket.MSG_CMSG_CLOEXEC)
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
                for fd in fds:
                    self.connect(socket.socket(fileno=fd))
        if flags & socket.MSG_CTRUNC:
            sys.stderr.write("supervisor: more sockets came at once than we take; dropped\n")
        return chunk

    def connect(self, sock: socket.socket) -> None:
        if sock.family != socket.AF_UNIX or sock.type != socket.SOCK_STREAM:
            sock.close()  # a client's mistake: its requests there go unanswered, it sees EOF
            return
        sock.setblocking(True)  # read only when the loop saw it readable; writes may block
        self.sel.register(sock, selectors.EVENT_READ, Connection(sock, self.routes))

    def handle(self, line: bytes, conn: Connection | None = None) -> None:
        req_id = 0
        if conn is not None:  # answered on conn, under its own id (see send), even if bad
            req_id = next(self.route_ids)
            self.routes[req_id] = (conn, 0)
            conn.asked.add(req_id)
        try:
            req = json.loads(line)
            if conn is None:
                req_id = int(req["id"])
            else:
                self.routes[req_id] = (conn, int(req["id"]))
                if req.get("op") == "cancel":  # its target is one of conn's own ids
                    req["args"] = {"target": conn.our_id(req.get("args", {}).get("target"))}
            handler = getattr(self, "op_" + str(req["op"]), None)
            if handler is None:
                raise SupervisorError("InvalidInput", "unknown op {!r}".format(req["op"]))
            result = handler(req_id, req.get("args") or {})
            if result is not None:
                self.reply(req_id, result)
        except (SupervisorError, layers.LayerError) as e:
            self.fail(req_id, e.kind, str(e))
        except OSError as e:
            self.fail(req_id, "InfrastructureError", f"supervisor: {e}")
        except (ValueError, KeyError, TypeError) as e:
            self.fail(req_id, "InvalidInput", f"bad request: {e!r}")
        except Exception as e:  # a bug must fail one request, not every trajectory's instance
            self.fail(req_id, "InfrastructureError", f"supervisor: {e!r}")

    # -- jobs --
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
        job.deadline = time.monotonic() + timeout if timeout else None
        job.stdin_fd, job.stdin_data = pipes[0][1], stdin or b""
        job.out_fd, job.err_fd = pipes[1][0], pipes[2][0]
        os.set_blocking(job.stdin_fd, False)
        if job.stdin_data:
            self.sel.register(job.stdin_fd, selectors.EVENT_WRITE, (job, job.stdin_fd))
        else:
            os.close(job.stdin_fd)
            job.stdin_fd = -1
        for i, (r, _) in enumerate(pipes[1:], start=1):
            os.set_blocking(r, False)
            if i < 3:
                job.captures[r] = Capture(cap or 1)
            else:
                job.info_fd = r
            job.open_fds.add(r)
            self.sel.register(r, selectors.EVENT_READ, (job, r))
        if job.report is not None:
            job.report.setblocking(False)
            job.open_fds.add(job.report.fileno())
            self.sel.register(job.report.fileno(), selectors.EVENT_READ, (job, job.report.fileno()))
        if job.pid:
            self.jobs[job.pid] = job
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
        except BlockingIOError:
            return
        if chunk:
            if fd == job.info_fd:
                job.info += chunk
            else:
                job.captures[fd].feed(chunk)
            return
        self.sel.unregister(fd)
        os.close(fd)
        job.open_fds.discard(fd)
        self.maybe_done(job)

    def pump_report(self, job: Job, sock: socket.socket) -> None:
        """Reads the report channel. With SO_PASSCRED the kernel never joins bytes of two
        writers in one read and names each read's writer: that count is the exec's answer to
        "did anyone but the one process that should write to it?"."""
        try:
            chunk, ancdata, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(12))
        except BlockingIOError:
            return
        if chunk:
            job.report_data.feed(chunk)
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    job.report_writers.add(struct.unpack("i", data[:4])[0])
            return
        self.sel.unregister(sock.fileno())
        job.open_fds.discard(sock.fileno())
        sock.close()
        self.maybe_done(job)

    def reap(self) -> None:
        """Reaps the children that ended. Those we expect to end (jobs, holders we killed) are
        asked for one by one: a wait for any child walks every child in the kernel, and each
        workspace's holder is one (1.1 ms a wait at 3,000, twice per workspace destroyed).
        Only when none of them ended is it a child that ended by itself (a holder that died),
        for the wait for any."""
        expected = False
        for pid in [*self.jobs, *self.dying]:
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
        job = self.jobs.get(pid)
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
        self.jobs.pop(job.pid, None)
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
            self.fail(job.req_id, "InfrastructureError", f"supervisor: {e!r}")

    # -- ops --
    def op_init(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        if self.cfg:
            raise SupervisorError("Conflict", "supervisor already initialised")
        mode = args["mode"]
        if mode not in ("host", "container"):
            raise SupervisorError("InvalidInput", "mode must be 'host' or 'container'")
        cfg: dict[str, Any] = {"workdir": "/testbed", "network": False}
        cfg["instance"] = "/"
        cfg.update(args)
        if mode == "host":
            instance = cfg["instance"]
            if not os.path.isdir(instance) or instance == "/":
                raise SupervisorError("InvalidInput", f"instance directory {instance!r} missing")
            if os.path.realpath(instance) != instance:
                real = os.path.realpath(instance)
                msg = f"instance directory {instance!r} goes through a symlink: use {real!r}"
                raise SupervisorError("InvalidInput", msg)
            cfg["paths"] = declared_paths(cfg.get("paths"), instance)
        elif cfg.get("paths"):
            msg = "declared paths are for host directories; an image holds its files itself"
            raise SupervisorError("InvalidInput", msg)
        if os.geteuid() != 0:
            enter_user_namespace()
            cfg["userns"] = True
        # Our own mount namespace: every mount we make dies with us, and ns files can be bound.
        unshare(CLONE_NEWNS)
        mount("none", "/", None, MS_REC | MS_PRIVATE)
        store = cfg["store"]
        os.makedirs(store, mode=0o700, exist_ok=True)
        if cfg.get("store_tmpfs"):
            mount("tmpfs", store, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700")
        self.cfg = cfg
        self.make_masks()
        self.make_dev()
        base = "/" if mode == "container" else cfg["instance"].rstrip("/") or "/"
        self.layer_store = layers.LayerStore(store, base)
        self.cgroups = Cgroups(in_container=mode == "container")
        holder = str(cfg.get("holder") or "")
        if holder and os.access(holder, os.X_OK) and SECCOMP_PROGRAM is not None:
            self.native_holder = holder
        return {
            "version": PROTOCOL_VERSION,
            "holder": "native" if self.native_holder else "python",
            "pid": os.getpid(),
            "python": platform.python_version(),
            "cgroups": self.cgroups.version,
            "cgroup_dirs": sorted(self.cgroups.bases.values()),
            "limits": self.cgroups.limits(),
        }

    def require_init(self) -> None:
        if not self.cfg:
            raise SupervisorError("Conflict", "send 'init' first")

    def op_freeze(self, req_id: int, args: dict[str, Any]) -> None:
        """Runs setup (unsandboxed, as the instance's owner would), refreshes the git index."""
        self.require_init()
        if self.frozen:
            raise SupervisorError("Conflict", "instance already frozen")
        workdir = self.cfg["workdir"]
        script = "set -e\n" + "\n".join(args.get("setup") or []) + "\n"
        script += (
            "if git -c safe.directory='*' rev-parse --git-dir >/dev/null 2>&1; then\n"
            "  git -c safe.directory='*' status --porcelain >/dev/null\n"
            '  printf \'{"base": "%s"}\\n\' "$(git -c safe.directory=\'*\' rev-parse HEAD)" >&3\n'
            "fi\n"
        )

        def child() -> None:
            os.chdir(workdir)
            os.execvp("/bin/sh", ["/bin/sh", "-c", script])

        def finish(job: Job) -> dict[str, Any]:
            (out, _), (err, _) = job.output()
            if (
                job.timed_out
                or not os.WIFEXITED(job.status or 0)
                or os.WEXITSTATUS(job.status or 0)
            ):
                tail = (out + err)[-4000:].decode(errors="replace")
                raise SupervisorError("InfrastructureError", f"setup failed: {tail}")
            if self.cfg["mode"] == "host":  # after setup: it may make what the view shows
                self.build_skeleton(self.cfg["paths"])
            self.snapshot_namespace()
            self.frozen = True
            self.base = next((str(m["base"]) for m in job.messages() if "base" in m), None)
            return {"base": self.base, "duration_s": time.monotonic() - job.started}

        job = self.spawn(req_id, child, None, float(args.get("timeout") or 3600), cap=1 << 20)
        job.finish = finish

    def snapshot_namespace(self) -> None:
        """Keeps our mount namespace as it is now, before any workspace, as the one every
        holder copies (enter_view_namespace), and goes on in a copy of it.

        A holder that copied our namespace copied every mount in it, the area (a tmpfs) of
        every workspace made before it among them: N workspaces kept N*N/2 mounts, 16 GB of
        kernel memory at 6,900. A copy of this snapshot is a few dozen mounts, plus the areas
        the workspace's layers lie on, attached by open_tree(2). Where that is refused
        (kernels before 5.2, a seccomp profile that lacks it), holders copy ours as before.
        """
        try:
            os.close(clone_mount(self.cfg["store"]))
        except OSError as e:
            sys.stderr.write(f"supervisor: no open_tree ({e}): holders copy every area\n")
            return
        self.snapshot = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        unshare(CLONE_NEWNS)  # areas are mounted from now on: in our copy only

    def enter_view_namespace(self, areas: list[str]) -> None:
        """A holder's own mount namespace: a copy of the snapshot with `areas` (the mount
        points of the tmpfs areas its workspace's layers lie on) attached, or else of ours."""
        if self.snapshot < 0:
            unshare(CLONE_NEWNS)
            return
        clones = [(clone_mount(path), path) for path in areas]  # from ours, where they are
        _check(_libc.setns(self.snapshot, CLONE_NEWNS), "setns into the snapshot")
        unshare(CLONE_NEWNS)
        os.close(self.snapshot)  # a holder keeps nothing that leads out of its own view
        self.snapshot = -1
        for fd, path in clones:
            attach_mount(fd, path)

    def workspace(self, args: dict[str, Any]) -> Workspace:
        ws = self.workspaces.get(str(args.get("ws")))
        if ws is None:
            raise SupervisorError("NotFound", "no workspace {!r}".format(args.get("ws")))
        return ws

    def op_ws_create(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        start = args.get("start_b64")
        archive = base64.b64decode(start) if start else None
        return self.create_workspace(
            str(args["ws"]), dict(args.get("limits") or {}), archive=archive
        )

    def create_workspace(
        self,
        name: str,
        limits: dict[str, Any],
        fork: tuple[Workspace, str] | None = None,
        archive: bytes | None = None,
    ) -> dict[str, Any]:
        """A workspace on a fresh area; `fork`: (parent, checkpoint) it starts from; `archive`:
        an exported checkpoint it starts from (read here, in the loop: a rare, resume-time
        cost of about the size of the trajectory's changes)."""
        self.require_init()
        if not self.frozen or self.layer_store is None:
            raise SupervisorError("Conflict", "freeze the instance before creating workspaces")
        if not name or "/" in name or name.startswith(".") or len(name) > 128:
            raise SupervisorError("InvalidInput", f"workspace name {name!r} not allowed")
        if name in self.workspaces:
            raise SupervisorError("Conflict", f"workspace {name!r} exists")
        started = time.monotonic()
        if fork is None and archive is None:
            ready = self.take_ready(name, limits)
            if ready is not None:
                self.workspaces[name] = ready
                ms = (time.monotonic() - started) * 1000
                result = {"ws": name, "ms": ms, "holder_pid": ready.holder_pid}
                result.update(root=ready.root, made_ahead=True, ready_left=len(self.ready))
                return result
        # A tmpfs per workspace (its area) is its disk cap.
        area = self.layer_store.open_area(limits.get("disk_bytes"))
        ws = Workspace(name, area.path)
        ws.limits = limits
        start = None
        try:
            if archive is not None:
                ws.layers = layers.WorkspaceLayers.imported(
                    self.layer_store, area, io.BytesIO(archive)
                )
                start = ws.layers.checkpoint()[0]  # to restore: the files it started with
            elif fork is None:
                ws.layers = layers.WorkspaceLayers(self.layer_store, area)
            else:
                assert fork[0].layers is not None
                ws.layers = fork[0].layers.fork(fork[1], area)
        except BaseException:
            self.layer_store.retire(area)
            raise
        try:
            self.build_workspace(ws)
        except BaseException:
            self.teardown(ws)
            raise
        self.workspaces[name] = ws
        # The holder (its pid in our pid namespace) keeps the view at `root` in its mount
        # namespace: what an operator's shell enters (`nsenter -t PID -m ... chroot ROOT`).
        ms = (time.monotonic() - started) * 1000
        result = {"ws": name, "ms": ms, "holder_pid": ws.holder_pid, "root": ws.root}
        result["made_ahead"] = False
        if start is not None:
            result["checkpoint"] = start
        return result

    def build_workspace(self, ws: Workspace) -> None:
        os.makedirs(ws.root, 0o700)
        os.mkdir(os.path.join(ws.path, "tmp"), 0o1777)
        os.chmod(os.path.join(ws.path, "tmp"), 0o1777)
        self.attach_holder(ws)

    def attach_holder(self, ws: Workspace) -> None:
        """Gives `ws` a holder that mounts its view on its current stack."""
        limits = ws.limits
        assert ws.layers is not None
        spare = self.spares.pop(0) if self.spares else self.spawn_spare()
        ws.holder_pid, ws.ctl, ws.cgroups = spare
        if self.cgroups is not None:
            self.cgroups.limit(ws.cgroups, limits.get("pids"), limits.get("memory_bytes"))
        try:
            ws.ctl.settimeout(60)
            view = {"ws": ws.name, "path": ws.path, "overlay": ws.layers.overlay()}
            view["areas"] = ws.layers.mounted_areas()
            ws.ctl.send(json.dumps(view).encode())
            ack = ws.ctl.recv(4096).decode(errors="replace")
            ws.ctl.settimeout(None)
        except OSError as e:
            ack = f"error: holder did not answer ({e})"
        if not ack.startswith("ok"):
            raise SupervisorError("InfrastructureError", "workspace mount failed: " + ack.strip())

    def spawn_spare(self) -> tuple[int, socket.socket, list[str]]:
        """Forks a holder, ready but for its view: (pid, control socket, cgroup dirs).

        A holder keeps a workspace's namespaces alive and forks its execs, so they start in
        its namespaces and cgroup: no setns, no cgroup migration per exec. Joining the cgroup
        (a v1 migration waits for an RCU grace period: 0.4-20 ms here) and making the net
        namespace (1-10 ms) happen ahead of time in spares, off the path of ws_create and of
        the first exec. Binding ns files would keep namespaces without a process, but the
        kernel refuses that bind (EINVAL, "ns loop") when namespace ids are not monotonic
        across CPUs, as on 6.18: 23 of 120 here.
        """
        self.created += 1  # a new cgroup each time: a reset's old one may await removal
        cgroups = self.cgroups.create(f"holder.{self.created}") if self.cgroups else []
        ctl, holder_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            try:
                self.holder_main(holder_end, cgroups, ctl)
            finally:
                os._exit(1)  # never fall back into the supervisor's loop
        holder_end.close()
        return pid, ctl, cgroups

    def holder_main(self, ctl: socket.socket, cgroups: list[str], other: socket.socket) -> None:
        """A spare holder: prepares, waits for its workspace, builds its view, serves it."""
        reset_signals()
        other.close()
        close_fds_except({ctl.fileno(), self.snapshot})  # not others' pipes
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != self.pid:
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
            unshare(private if self.cfg.get("network") else private | CLONE_NEWNET)
            socket.sethostname("sandbox")
            if not self.cfg.get("network"):
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
            self.enter_view_namespace([str(path) for path in request["areas"]])
            self.mount_view(ws)
            ctl.send(b"ok")
        except BaseException as e:
            ctl.send(f"error: {e}".encode())
            return
        if not broken and self.native_holder:
            self.exec_native_holder(ws, ctl)  # returns only if it could not
        # What an exec may ever gain back; our effective set stays: execs mount their /proc.
        drop_bounding_set()  # after the exec above: root's execve takes the bounding set
        holder = Holder(self, ws, ctl)
        holder.broken = broken
        holder.run()

    def exec_native_holder(self, ws: Workspace, ctl: socket.socket) -> None:
        """Becomes holder.c (native.py builds it) in these namespaces, cgroup and view: a few
        pages where this interpreter kept about 2 MB, and execs started by system calls, not
        by a forked interpreter. Returns only if the exec failed (this one serves then)."""
        os.set_inheritable(ctl.fileno(), True)
        # Its settings travel in a memfd, not its argv: every exec's pid 1 starts as a copy of
        # the holder, and its command line is what `ps` shows the trajectory.
        fields = [str(ctl.fileno()), ws.root, self.mask_file, self.mask_dir]
        settings = os.memfd_create("holder-settings", 0)
        os.write(settings, b"".join(f.encode() + b"\0" for f in fields) + (SECCOMP_PROGRAM or b""))
        with contextlib.suppress(OSError):
            os.execve(self.native_holder, ["mcp-evalserver-holder", str(settings)], {})
        os.close(settings)
        sys.stderr.write(f"supervisor: holder {self.native_holder} did not start; Python holds\n")

    def wants_spares(self) -> bool:
        if not (self.frozen and self.running) or time.monotonic() < self.prepare_after:
            return False
        return len(self.spares) < SPARE_HOLDERS or (
            self.ready_limits is not None and len(self.ready) < READY_WORKSPACES
        )

    def prepare_ready(self) -> None:
        """Builds one fresh workspace ahead (area, layers, a holder with the view mounted and
        its next exec's init ready) with the limits the last plain ws_create asked for, so the
        next such create only names one: creating a workspace is then off the path of the
        trajectory that asks. A failure here is logged and stops this until the next plain
        create: made on demand then, the error reaches a caller."""
        limits, store = self.ready_limits, self.layer_store
        if limits is None or store is None:
            return
        area = store.open_area(limits.get("disk_bytes"))
        ws = Workspace(".ready", area.path)
        ws.limits = dict(limits)
        try:
            ws.layers = layers.WorkspaceLayers(store, area)
        except Exception as e:
            store.retire(area)
            self.stop_ready(e)
            return
        try:
            self.build_workspace(ws)
        except Exception as e:
            self.teardown(ws)
            self.stop_ready(e)
            return
        self.ready.append(ws)

    def stop_ready(self, e: Exception) -> None:
        sys.stderr.write(f"supervisor: a workspace made ahead failed: {e}\n")
        self.ready_limits = None

    def take_ready(self, name: str, limits: dict[str, Any]) -> Workspace | None:
        """A workspace built ahead with these limits, now called `name`; None if there is none
        (the ones built for other limits go)."""
        if limits != self.ready_limits:
            for ws in self.ready:
                self.teardown(ws)
            self.ready.clear()
            self.ready_limits = dict(limits)
            return None
        if not self.ready:
            return None
        ws = self.ready.pop(0)
        ws.name = name
        return ws

    def prepare_one(self) -> None:
        """One spare holder, else one ready workspace: each blocks this loop for milliseconds,
        so a request that arrives meanwhile waits for one of them at most."""
        try:
            if len(self.spares) < SPARE_HOLDERS:
                self.spares.append(self.spawn_spare())
            elif len(self.ready) < READY_WORKSPACES:
                self.prepare_ready()
        except Exception as e:  # e.g. no memory or disk for one more: on demand, then
            self.stop_ready(e)
            self.prepare_after = time.monotonic() + 1  # not again at once

    def mount_view(self, ws: Workspace) -> None:
        """In the workspace's fresh mount namespace: build the trajectory's view at ws.root."""
        root, cfg = ws.root, self.cfg
        if cfg["mode"] == "container":
            self.mount_overlay(root, layers.overlay_options("/", ws.overlay))
            mount("/sys", root + "/sys", None, MS_BIND | MS_REC)
            make_readonly_recursive(root + "/sys")
            for f in ("/etc/resolv.conf", "/etc/hosts", "/etc/hostname"):
                if os.path.isfile(f) and os.path.isfile(root + f):
                    mount(f, root + f, None, MS_BIND)
                    mount("none", root + f, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        else:
            # The part every workspace shares was built once (build_skeleton); what is left is
            # this workspace's own: its private directories, then the copy-on-write paths.
            mount(self.skeleton, root, None, MS_BIND | MS_REC)
            for target, sub in PRIVATE_DIRS.items():
                private = os.path.join(ws.path, sub)
                os.makedirs(private, 0o700, exist_ok=True)
                mount(private, root + target, None, MS_BIND)
            for number, entry in enumerate(self.late_paths):
                path, target = entry["path"], root + entry["path"]
                make_mountpoint(target, os.path.isdir(path))
                if path == cfg["instance"]:
                    self.mount_overlay(target, layers.overlay_options(path, ws.overlay))
                elif entry["writable"]:  # on the area, kept as is across checkpoints
                    own = os.path.join(ws.path, "paths", str(number))
                    for sub in ("upper", "work"):
                        os.makedirs(os.path.join(own, sub), 0o700, exist_ok=True)
                    opts = f"lowerdir={path},upperdir={own}/upper,workdir={own}/work"
                    self.mount_overlay(target, opts)
                else:
                    mount(path, target, None, MS_BIND | MS_REC)
                    make_readonly_recursive(target)
        self.mount_dev(ws)
        store = root + cfg["store"]
        if os.path.isdir(store):  # other workspaces' uppers: never visible
            mount("tmpfs", store, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0555")

    @staticmethod
    def mount_overlay(target: str, opts: str) -> None:
        """An overlay at `target`; its upper is on the workspace's area (the disk cap)."""
        try:
            mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts + ",redirect_dir=on")
        except OSError:
            mount("overlay", target, "overlay", MS_NOSUID | MS_NODEV, opts)

    def make_masks(self) -> None:
        """An empty file and an empty directory on a read-only tmpfs, to bind over what a view
        must not show. Never the host's /dev/null: a chmod through a writable bind of it
        changes the host's node."""
        masks = os.path.join(self.cfg["store"], ".masks")
        os.makedirs(masks, 0o755, exist_ok=True)
        nothing = MS_NOSUID | MS_NODEV | MS_NOEXEC
        mount("tmpfs", masks, "tmpfs", nothing, "size=4k,mode=0555")
        self.mask_file, self.mask_dir = masks + "/file", masks + "/dir"
        with open(self.mask_file, "w"):
            pass
        os.chmod(self.mask_file, 0o444)
        os.mkdir(self.mask_dir, 0o555)
        mount("none", masks, None, MS_REMOUNT | MS_RDONLY | nothing)  # every bind of it too

    def mask(self, path: str) -> None:
        """Hides `path` (a directory, a file or anything else) behind an empty, read-only one."""
        mount(self.mask_dir if os.path.isdir(path) else self.mask_file, path, None, MS_BIND)

    def build_skeleton(self, declared: list[dict[str, Any]]) -> None:
        """Host mode, once per instance: what every workspace's view shares, read-only.

        The system directories (HOST_SYSTEM) with /etc's secrets masked, the declared read-only
        paths, and a mount point for everything mount_view adds, on a tmpfs remounted
        read-only: a workspace binds it as its root (one call), so a view costs no more than
        the old whole-host bind did. Paths that are copy-on-write or lie under something
        mounted per workspace are left for mount_view (`late_paths`).
        """
        cfg = self.cfg
        for entry in declared:
            path = entry["path"]
            if not os.path.exists(path) or (entry["writable"] and not os.path.isdir(path)):
                kind = "a directory" if entry["writable"] else "there"
                msg = f"declared path {path!r} is not {kind} on this host (after setup)"
                raise SupervisorError("InvalidInput", msg + ": make it there, or drop it")
        skeleton = os.path.join(cfg["store"], ".view")
        os.makedirs(skeleton, 0o755, exist_ok=True)
        mount("tmpfs", skeleton, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        for name in HOST_SYSTEM:
            source, target = "/" + name, os.path.join(skeleton, name)
            if os.path.islink(source):
                os.symlink(os.readlink(source), target)
            elif os.path.isdir(source):
                os.mkdir(target, 0o755)
                mount(source, target, None, MS_BIND | MS_REC)
                make_readonly_recursive(target)
        for path in secrets_under("/etc", ETC_SECRETS):
            self.mask(skeleton + path)
        for target in ("/proc", "/dev", *PRIVATE_DIRS):
            os.makedirs(skeleton + target, 0o755, exist_ok=True)
        instance = {"path": cfg["instance"], "writable": True}
        late = [instance]
        for entry in sorted(declared, key=lambda e: e["path"].count("/")):
            tops = [e["path"] for e in late if e["writable"]] + list(PRIVATE_DIRS)
            if entry["writable"] or any(is_under(entry["path"], top) for top in tops):
                late.append(entry)
                continue
            target = skeleton + entry["path"]
            make_mountpoint(target, os.path.isdir(entry["path"]))
            mount(entry["path"], target, None, MS_BIND | MS_REC)
            make_readonly_recursive(target)
        for entry in late:  # mount points outside the private directories exist already
            if not any(is_under(entry["path"], top) for top in PRIVATE_DIRS):
                make_mountpoint(skeleton + entry["path"], os.path.isdir(entry["path"]))
        mount("none", skeleton, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        self.skeleton = skeleton
        self.late_paths = sorted(late, key=lambda e: e["path"].count("/"))

    def make_dev(self) -> None:
        """A minimal /dev that every view binds: nothing in it can be chmod'ed, chown'ed or
        added.

        Nodes are made afresh (or, where mknod is refused, as in a user namespace, read-only
        binds) on a tmpfs that is then remounted read-only, the same for every workspace: the
        host's and the container's device inodes are never reachable for a metadata change.
        Made once, so a view costs one bind here rather than twenty calls (checkpoints and
        forks mount views often).
        """
        dev = os.path.join(self.cfg["store"], ".dev")
        os.makedirs(dev, 0o755, exist_ok=True)
        mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,mode=0755")
        for name in DEVICES:
            source, node = "/dev/" + name, os.path.join(dev, name)
            try:
                rdev = os.stat(source).st_rdev
            except OSError:
                continue
            try:
                os.mknod(node, stat.S_IFCHR | 0o666, rdev)
                os.chmod(node, 0o666)  # past our umask
            except PermissionError:
                with open(node, "w"):
                    pass
                mount(source, node, None, MS_BIND)
                mount("none", node, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
        links = {"fd": "", "stdin": "/0", "stdout": "/1", "stderr": "/2"}
        for name, suffix in links.items():
            target = "/proc/self/fd" + suffix
            os.symlink(target, os.path.join(dev, name))
        for sub in ("shm", "pts", "mqueue"):
            os.mkdir(os.path.join(dev, sub))
        mount("none", dev, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC)
        self.dev = dev

    def mount_dev(self, ws: Workspace) -> None:
        """The view's /dev (make_dev's); /dev/shm is the workspace's own directory (its bytes
        count in the disk cap)."""
        dev = ws.root + "/dev"
        os.makedirs(dev, exist_ok=True)
        mount(self.dev, dev, None, MS_BIND | MS_REC)
        shm = os.path.join(ws.path, "shm")
        os.makedirs(shm, exist_ok=True)
        os.chmod(shm, 0o1777)
        mount(shm, os.path.join(dev, "shm"), None, MS_BIND)

    def teardown(self, ws: Workspace) -> None:
        for req_id in list(ws.jobs):
            job = self.by_req.get(req_id)
            if job is not None:
                self.kill(job)
        holder = ws.holder_pid
        self.detach_holder(ws)
        if ws.layers is not None:  # frees its area, but for layers other workspaces hold
            # Once the holder is reaped: a directory removed while it is still a mount point in
            # the dying holder's namespace makes the kernel walk every mount of ours (an area
            # per workspace) to see whether it is one here too.
            self.after_holder(holder, ws.layers.close)
            ws.layers = None

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

    def detach_holder(self, ws: Workspace) -> None:
        """Ends the holder of `ws` (and with it the mounts of its view)."""
        if ws.ctl is not None:
            ws.ctl.close()
            ws.ctl = None
        if ws.holder_pid:  # reaped by the loop: its namespaces' teardown need not block us
            with contextlib.suppress(OSError):
                os.kill(ws.holder_pid, signal.SIGKILL)
            self.dying.setdefault(ws.holder_pid, [])
            ws.holder_pid = 0
        self.stale_cgroups.extend(ws.cgroups)
        ws.cgroups = []
        self.remove_stale_cgroups()

    def remove_stale_cgroups(self) -> None:
        for d in list(self.stale_cgroups):
            try:
                os.rmdir(d)
                self.stale_cgroups.remove(d)
            except FileNotFoundError:
                self.stale_cgroups.remove(d)
            except OSError:
                pass  # processes still exiting: retried from the loop

    def op_ws_destroy(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        ws = self.workspace(args)
        del self.workspaces[ws.name]
        self.teardown(ws)
        return {}

    def op_ws_reset(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        ws = self.workspace(args)
        limits = ws.limits
        self.op_ws_destroy(req_id, args)
        return self.op_ws_create(req_id, {"ws": ws.name, "limits": limits})

    # -- checkpoints and forks (the stacking itself is supervisor_layers') --
    def idle_workspace(self, args: dict[str, Any], what: str) -> Workspace:
        """The workspace, if no command runs in it: its upper is about to freeze or go."""
        ws = self.workspace(args)
        if ws.jobs:
            raise SupervisorError(
                "Conflict",
                f"workspace {ws.name!r} has {len(ws.jobs)} command(s) running; {what} it when "
                "they finish (or cancel them)",
            )
        return ws

    def remount(self, ws: Workspace) -> None:
        """The workspace's view on its current stack: its holder mounts it in place of the old
        one; a holder that is gone or fails is replaced by a new one. If that fails too, the
        workspace goes."""
        assert ws.layers is not None
        try:
            self.remount_in_holder(ws)
            return
        except OSError:
            pass
        self.detach_holder(ws)
        try:
            self.attach_holder(ws)
        except BaseException:
            del self.workspaces[ws.name]
            self.teardown(ws)
            raise

    def remount_in_holder(self, ws: Workspace) -> None:
        """The view again at the same root, on the workspace's new stack, in its holder's mount
        namespace, from here: the old view goes with every mount under it. No new holder, no
        cgroup, no namespace made; the holder (Python or compiled) only drops its spare. Asked only
        when no command runs there, so nothing has the old view open; an exec started later
        copies the new one.

        Raises:
            OSError: the holder is gone (its pid stays ours until the loop reaps it, so the
                namespace opened is its own), or the mounts failed.
        """
        assert ws.layers is not None
        if ws.ctl is None:
            raise OSError(errno.EPIPE, "no holder")
        # holder.c keeps free exec inits (its runners) inside the view: they must be gone, and
        # their copies of the old overlay with them, before the old upper becomes a lower. The
        # answer also says the holder lives: one killed (its socket and namespace outlast it a
        # moment) never runs again to answer, and its pid stays ours until the loop reaps it, so
        # the namespace opened below is its own.
        ws.ctl.settimeout(60)
        ws.ctl.send(b"drop spare")
        answer = ws.ctl.recv(64)
        ws.ctl.settimeout(None)
        if answer != b"dropped":
            raise OSError(errno.EPIPE, f"holder answered {answer!r}")
        target = os.open(f"/proc/{ws.holder_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        own = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _check(_libc.setns(target, CLONE_NEWNS), "setns into the holder's view")
            try:
                umount(ws.root)  # detached with everything under it
                ws.overlay = ws.layers.overlay()
                self.mount_view(ws)
            finally:
                if _libc.setns(own, CLONE_NEWNS) != 0:  # never serve from a holder's view
                    os._exit(70)
                os.fchdir(cwd)
        finally:
            for fd in (target, own, cwd):
                os.close(fd)
        ws.ctl.send(b"respare")

    def checkpoint(self, ws: Workspace) -> str:
        assert ws.layers is not None
        cid, changed = ws.layers.checkpoint()
        if changed:
            self.remount(ws)
        return cid

    def op_ws_checkpoint(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        ws = self.idle_workspace(args, "checkpoint")
        cid = self.checkpoint(ws)
        depth = len(ws.layers.stack) if ws.layers else 0
        return {"checkpoint": cid, "depth": depth, "holder_pid": ws.holder_pid}

    def op_ws_restore(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        ws = self.idle_workspace(args, "restore")
        assert ws.layers is not None
        ws.layers.restore(str(args["checkpoint"]))
        self.remount(ws)
        return {"holder_pid": ws.holder_pid}

    def op_ws_fork(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        """A new workspace `name` on a checkpoint of `ws` (a new one of its current state)."""
        cid = args.get("checkpoint")
        parent = self.workspace(args) if cid else self.idle_workspace(args, "fork")
        name = str(args["name"])
        if name in self.workspaces:  # before a checkpoint remounts the parent for nothing
            raise SupervisorError("Conflict", f"workspace {name!r} exists")
        if not cid:
            cid = self.checkpoint(parent)
        result = self.create_workspace(name, dict(parent.limits), (parent, str(cid)))
        result.update(checkpoint=cid, parent_holder_pid=parent.holder_pid)
        return result

    def op_ws_export(self, req_id: int, args: dict[str, Any]) -> None:
        """Checkpoint `checkpoint` of `ws` as an archive `ws_create` takes (`start_b64`), in a
        child: a checkpoint that outlives this supervisor, or this instance."""
        ws = self.workspace(args)
        assert ws.layers is not None
        assert self.layer_store is not None
        stack, store = ws.layers.stack_of(str(args["checkpoint"])), self.layer_store
        dirs = [layer.dir for layer in stack]
        cap = int(args.get("max_bytes") or 256 << 20)

        def child() -> None:
            with os.fdopen(1, "wb", closefd=False) as out:
                layers.write_archive(dirs, out)

        def finish(job: Job) -> dict[str, Any]:
            (archive, truncated), (err, _) = job.output()
            for msg in job.messages():
                if "error" in msg:
                    raise SupervisorError("InfrastructureError", "export failed: " + msg["error"])
            if (
                job.timed_out
                or not os.WIFEXITED(job.status or 0)
                or os.WEXITSTATUS(job.status or 0)
            ):
                why = err[-2000:].decode(errors="replace")
                raise SupervisorError("InfrastructureError", "export failed: " + why)
            if truncated:
                over = (
                    f"the checkpoint's archive is over {cap} bytes ({cap / (1 << 20):g} MiB), "
                    "the most asked for: keep less in the workspace when it is checkpointed "
                    "(build outputs, caches, virtual environments), or ask for a larger max_bytes"
                )
                raise SupervisorError("LimitExceeded", over)
            return {"archive_b64": base64.b64encode(archive).decode()}

        # Held while the child reads them: the workspace may be destroyed meanwhile.
        store.hold(stack)
        job = self.spawn(req_id, child, None, float(args.get("timeout") or 300), cap=cap)
        job.finish, job.on_done = finish, lambda: store.release(stack)

    def op_cancel(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        return {"cancelled": self.cancel(int(args["target"]))}

    def cancel(self, target: int) -> bool:
        route = self.routes.pop(target, None)  # a cancelled request is never answered
        if route is not None:
            route[0].asked.discard(target)
        job = self.by_req.pop(target, None)
        if job is not None:
            self.kill(job)
            if job.ws is not None:
                job.ws.jobs.discard(job.req_id)
        return job is not None

    def op_shutdown(self, req_id: int, args: dict[str, Any]) -> dict[str, Any]:
        self.running = False
        return {}

    def shutdown(self) -> None:
        for key in list(self.sel.get_map().values()):
            if isinstance(key.data, Connection):
                self.drop_connection(key.data)
        for pid, ctl, cgroups in self.spares:
            ctl.close()
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            self.stale_cgroups.extend(cgroups)
        self.spares.clear()
        for ws in [*self.workspaces.values(), *self.ready]:
            self.teardown(ws)
        self.workspaces.clear()
        self.ready.clear()
        for pid in list(self.dying):  # nothing reaps from here on: free their areas now
            self.ended(pid, None)
        deadline = time.monotonic() + 2
        while self.stale_cgroups and time.monotonic() < deadline:
            time.sleep(0.02)
            self.remove_stale_cgroups()
        if self.cgroups is not None:
            for base in self.cgroups.bases.values():
                remove_cgroup_tree(base)

    # -- sandboxed execution --
    def op_exec(self, req_id: int, args: dict[str, Any]) -> None:
        ws = self.workspace(args)
        argv = [str(a) for a in args["argv"]]
        if not argv:
            raise SupervisorError("InvalidInput", "argv is empty")
        env = {str(k): str(v) for k, v in (args.get("env") or {}).items()}
        refuse_nul("argv", argv)
        refuse_nul(
            "env", [*env, *env.values(), str(args.get("cwd") or ""), str(args.get("user") or "")]
        )
        if any(not key or "=" in key for key in env):
            raise SupervisorError("InvalidInput", "an env name is empty or holds '=': fix it")
        stdin = base64.b64decode(args["stdin_b64"]) if args.get("stdin_b64") else None
        job = self.spawn_sandboxed(
            req_id, ws, argv, env, args.get("cwd"), float(args["timeout"]),
            int(args.get("output_cap") or 1 << 20), stdin, args.get("user"),
            bool(args.get("report")),
        )  # fmt: skip

        def finish(job: Job) -> dict[str, Any]:
            result = self.exec_result(job)
            for key in ("stdout", "stderr"):
                result[key + "_b64"] = base64.b64encode(result.pop(key)).decode()
            if job.report is not None:
                report, truncated = job.report_data.result()
                result["report_b64"] = base64.b64encode(report).decode()
                result["report_truncated"] = truncated
                result["report_writers"] = len(job.report_writers)
            return result

        job.finish = finish

    def exec_result(self, job: Job) -> dict[str, Any]:
        for msg in job.messages():
            if "error" in msg and not job.timed_out:
                raise SupervisorError(msg.get("kind", "InfrastructureError"), msg["error"])
        raw = next((m["status"] for m in job.messages() if "status" in m), job.status)
        if raw is None and not job.killed and job.ws is not None:
            # Its parent died before reporting and we did not kill it: the holder died (its
            # execs die with it) or was killed from outside. Not the command's doing, so not a
            # result: the trajectory's workspace is lost.
            lost = f"workspace {job.ws.name!r} lost its holder while a command ran"
            raise SupervisorError("InfrastructureError", lost)
        if raw is None:  # its parent was killed (timeout, cancel, destroy) before reporting
            code = -signal.SIGKILL
        else:
            code = os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else -os.WTERMSIG(raw)
        (out, out_trunc), (err, err_trunc) = job.output()
        return {
            "exit_code": code, "stdout": out, "stderr": err,
            "stdout_truncated": out_trunc, "stderr_truncated": err_trunc,
            "duration_s": time.monotonic() - job.started, "timed_out": job.timed_out,
        }  # fmt: skip

    def spawn_sandboxed(
        self,
        req_id: int,
        ws: Workspace,
        argv: list[str],
        env: dict[str, str],
        cwd: str | None,
        timeout: float,
        cap: int,
        stdin: bytes | None,
        user: str | None = None,
        report: bool = False,
    ) -> Job:
        """Starts `argv` in the workspace (see Holder). With `report`, the command also gets
        the write end of a unix stream socket at fd REPORT_FD: a channel whose bytes only we
        read, that no path in the view names (a socket cannot be opened through /proc), which
        a process can hold only by inheriting it (pidfd_getfd is denied), and whose writers
        the kernel names (SO_PASSCRED). Not a file in the view: any process of the run could
        replace one after the tests wrote it. Not a pipe: /proc/PID/fd/N reopens a pipe, and
        its bytes carry no writer. What it cannot stop: the process it was meant for (pytest)
        and anything that process runs in itself can write to it; the reader decides whom
        to believe (strict grading: exactly one writer, which announced itself first)."""
        cfg, limits = self.cfg, ws.limits
        full_env = {"PATH": DEFAULT_PATH, "HOME": "/root", "LANG": "C.UTF-8",
                    "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
                    "GIT_CONFIG_VALUE_0": "*"}  # fmt: skip
        if user:
            del full_env["HOME"]  # the user's own, from the view's passwd (see sandbox_init)
        full_env.update({str(k): str(v) for k, v in env.items()})
        workdir = cfg["workdir"]
        target = os.path.join(workdir, cwd) if cwd else workdir
        have = self.cgroups.limits() if self.cgroups else {"pids": False, "memory": False}
        # In our own user namespace every sandboxed process is one (namespace, uid), so
        # RLIMIT_NPROC caps them together: shared by the instance, but the host is safe.
        have["nproc"] = bool(cfg.get("userns")) and not have["pids"]

        request = {"argv": argv, "env": full_env, "cwd": target, "limits": limits, "have": have}
        request["user"] = str(user) if user else None
        if ws.ctl is None:
            raise SupervisorError("NotFound", f"workspace {ws.name!r} is being destroyed")
        # The request travels in a memfd: argv may be larger than a socket message.
        memfd = os.memfd_create("exec-request", os.MFD_CLOEXEC)
        os.write(memfd, encode_exec_request(request))
        pipes = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, info
        theirs = [pipes[0][0], pipes[1][1], pipes[2][1], pipes[3][1], memfd]
        ours: socket.socket | None = None
        if report:
            ours, end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            ours.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
            ours.shutdown(socket.SHUT_WR)  # nothing flows to the command
            theirs.append(end.detach())
        try:
            header = b"exec %d" % req_id
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", theirs))]
            ws.ctl.sendmsg([header], rights)
        except OSError as e:
            for fd in [pipes[0][1], pipes[1][0], pipes[2][0], pipes[3][0]]:
                os.close(fd)
            if ours is not None:
                ours.close()
            msg = f"workspace {ws.name!r} lost its holder ({e}); reset it or make another"
            raise SupervisorError("InfrastructureError", msg) from e
        finally:
            for fd in theirs:
                os.close(fd)
        job = Job(req_id, 0, None, ws)
        job.report = ours
        return self.register(job, pipes, timeout, cap, stdin)

    def sandbox_init(
        self,
        ws: Workspace,
        argv: list[str],
        env: dict[str, str],
        cwd: str,
        limits: dict[str, Any],
        have: dict[str, bool],
        user: str | None = None,
    ) -> None:
        """Pid 1 of the exec's pid namespace: sets the sandbox up, spawns the command, serves
        as its init (see serve_as_init). Never returns."""
        try:
            unshare(CLONE_NEWNS)  # its own /proc, of this pid namespace
            os.setsid()  # no controlling terminal: /dev/tty is ENXIO, TIOCSTI has no target
            fcntl.fcntl(3, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
            with contextlib.suppress(OSError):
                write_file("/proc/self/oom_score_adj", "0")  # the holder's -1000 is not for us
            proc = ws.root + "/proc"
            mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            for name in PROC_READONLY:
                path = os.path.join(proc, name)
                if os.path.exists(path):
                    mount(path, path, None, MS_BIND | MS_REC)
                    mount("none", path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
            for name in PROC_MASKED:
                path = os.path.join(proc, name)
                if os.path.lexists(path):
                    self.mask(path)
            self.apply_rlimits(limits, have)
            os.chroot(ws.root)
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
            # Same uid as the command, so without this the command could open /proc/1/fd/3
            # (or ptrace us) and write its own `status` (or an `error`) into the info pipe.
            # The command's execve makes it dumpable again; only this init is shielded.
            prctl(PR_SET_DUMPABLE, 0)
        except BaseException as e:
            os.write(3, (json.dumps({"error": f"sandbox setup: {e}"}) + "\n").encode())
            os._exit(127)
        # The command must not be pid 1 of its namespace: the kernel drops the signals pid 1
        # sends itself (`kill $$` would do nothing) and nobody would reap orphans.
        try:
            command = spawn_command(argv, env)
        except CommandNotRun as e:
            with contextlib.suppress(OSError):
                os.write(2, f"sandbox: cannot run {e.program!r}: {e.reason}\n".encode())
                os.write(3, (json.dumps({"status": e.code << 8}) + "\n").encode())
            os._exit(0)
        serve_as_init(command)

    @staticmethod
    def apply_rlimits(limits: dict[str, Any], have: dict[str, bool]) -> None:
        if limits.get("pids") and have.get("nproc"):
            n = int(limits["pids"])
            resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
        if limits.get("memory_bytes") and not have["memory"]:
            n = int(limits["memory_bytes"])  # no cgroup: a per-process cap is better than none
            resource.setrlimit(resource.RLIMIT_AS, (n, n))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    # -- files, read and written as the trajectory itself (symlinks resolve inside its view) --
    def files_job(self, req_id: int, args: dict[str, Any], work: Callable[[], Any]) -> None:
        ws = self.workspace(args)
        workdir = self.cfg["workdir"]

        def child() -> None:
            os.setsid()
            setns(f"/proc/{ws.holder_pid}/ns/mnt", CLONE_NEWNS)
            os.chroot(ws.root)
            os.chdir(workdir)
            drop_privileges(False)
            result: dict[str, Any]
            try:
                result = {"result": work()}
            except FileNotFoundError as e:
                result = {"error": f"{e.filename}: no such file or directory", "kind": "NotFound"}
                result["errno"] = "ENOENT"
            except SupervisorError as e:
                result = {"error": str(e), "kind": e.kind, "errno": e.errno_name}
            except OSError as e:
                result = {"error": f"{e.filename}: {e.strerror}", "kind": "InvalidInput"}
                result["errno"] = errno.errorcode.get(e.errno or 0)
            data = (json.dumps(result) + "\n").encode()
            view = memoryview(data)
            while view:
                view = view[os.write(3, view) :]

        def finish(job: Job) -> dict[str, Any]:
            if job.timed_out:
                raise SupervisorError("Timeout", "file operation timed out (a FIFO or a hung fs?)")
            msgs = job.messages()
            if not msgs:
                raise SupervisorError("InfrastructureError", "file operation died")
            if "error" in msgs[-1]:
                raise SupervisorError(
                    msgs[-1].get("kind", "InfrastructureError"),
                    msgs[-1]["error"],
                    msgs[-1].get("errno"),
                )
            return dict(msgs[-1]["result"])

        self.spawn(req_id, child, ws, float(args.get("timeout") or 60)).finish = finish

    def op_read(self, req_id: int, args: dict[str, Any]) -> None:
        path, limit = str(args["path"]), int(args.get("max_bytes") or 16 << 20)

        def work() -> dict[str, Any]:
            require_regular(path, os.stat(path).st_mode, "read")
            # O_NONBLOCK: a FIFO swapped in meanwhile must not hang us; fstat catches it.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                require_regular(path, os.fstat(fd).st_mode, "read")
                data = f.read(limit + 1)
            if len(data) > limit:
                raise SupervisorError("LimitExceeded", f"{path} is larger than {limit} bytes")
            return {"data_b64": base64.b64encode(data).decode()}

        self.files_job(req_id, args, work)

    def op_write(self, req_id: int, args: dict[str, Any]) -> None:
        path, data = str(args["path"]), base64.b64decode(args["data_b64"])
        mode = args.get("mode")

        def work() -> dict[str, Any]:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                require_regular(path, os.stat(path).st_mode, "write")
            flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            fd = os.open(path, flags, 0o644)
            with os.fdopen(fd, "wb") as f:
                require_regular(path, os.fstat(fd).st_mode, "write")
                os.ftruncate(fd, 0)
                f.write(data)
            if mode is not None:
                os.chmod(path, int(mode))
            return {"bytes": len(data)}

        self.files_job(req_id, args, work)

    def op_list(self, req_id: int, args: dict[str, Any]) -> None:
        path, limit = str(args.get("path") or "."), int(args.get("max_entries") or 10000)

        def work() -> dict[str, Any]:
            entries: list[dict[str, Any]] = []
            with os.scandir(path) as it:
                for entry in it:
                    if len(entries) >= limit:
                        return {"entries": entries, "truncated": True}
                    st = entry.stat(follow_symlinks=False)
                    kind = ("symlink" if stat.S_ISLNK(st.st_mode) else "dir"
                            if stat.S_ISDIR(st.st_mode) else "file"
                            if stat.S_ISREG(st.st_mode) else "other")  # fmt: skip
                    entries.append({"name": entry.name, "kind": kind, "size": st.st_size})
            entries.sort(key=lambda e: str(e["name"]))
            return {"entries": entries, "truncated": False}

        self.files_job(req_id, args, work)

    def op_diff(self, req_id: int, args: dict[str, Any]) -> None:
        """`git add -A` into a throwaway index, then a binary diff against the frozen base."""
        ws = self.workspace(args)
        if self.base is None:
            raise SupervisorError("Conflict", "the instance workdir is not a git repository")
        # Run as the trajectory: its .git/config is untrusted. Prefixes are pinned so that
        # diff.noprefix or mnemonicPrefix in that config cannot break `git apply`.
        script = (
            "set -e\nidx=$(mktemp /tmp/.evalserver-index.XXXXXX)\ntrap 'rm -f \"$idx\"' EXIT\n"
            "gitdir=$(git rev-parse --git-dir)\n"
            # -p keeps the index's mtime: git trusts an entry whose stat matches unless it is
            # "racily clean" against that mtime, so a fresh mtime would hide same-second edits.
            '[ -f "$gitdir/index" ] && cp -p "$gitdir/index" "$idx"\n'
            'export GIT_INDEX_FILE="$idx"\ngit add -A\n'
            "git -c core.quotepath=false diff --cached --binary --no-color --no-ext-diff "
            f"--no-textconv --src-prefix=a/ --dst-prefix=b/ {self.base} --\n"
        )
        cap = int(args.get("max_bytes") or 64 << 20)
        timeout = float(args.get("timeout") or 300)
        job = self.spawn_sandboxed(
            req_id, ws, ["/bin/sh", "-c", script], {}, None, timeout, cap, None
        )

        def finish(job: Job) -> dict[str, Any]:
            result = self.exec_result(job)
            if result["timed_out"]:
                raise SupervisorError("Timeout", f"git diff did not finish in {timeout:g}s")
            if result["exit_code"] != 0:
                msg = result["stderr"].decode(errors="replace")[-2000:]
                raise SupervisorError("InfrastructureError", "git diff failed: " + msg)
            if result["stdout_truncated"]:
                raise SupervisorError("LimitExceeded", f"diff larger than {cap} bytes")
            return {"patch_b64": base64.b64encode(result["stdout"]).decode()}

        job.finish = finish


def refuse_nul(what: str, strings: list[str]) -> None:
    """No program can be given a string with a NUL in it: refused here, as the caller's
    mistake, not failed later as the sandbox's."""
    if any("\0" in text for text in strings):
        raise SupervisorError("InvalidInput", f"{what} holds a NUL byte, which no program can take")


def is_under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def make_mountpoint(path: str, directory: bool) -> None:
    """An empty directory (or file) to mount on at `path`, with its parents, unless one exists."""
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    if directory:
        os.mkdir(path, 0o755)
    else:
        with open(path, "w"):
            pass


def secrets_under(top: str, named: tuple[str, ...]) -> list[str]:
    """What under `top` a user other than root may not read, and the `named` entries (relative).

    Sandboxed processes are uid 0 with CAP_DAC_OVERRIDE, so whatever the host keeps from
    ordinary users (shadow files, private keys, root-only configs) must leave the view.
    Sockets, FIFOs and devices go too. Symlinks stay: they resolve inside the view.
    """
    found = [os.path.join(top, name) for name in named if os.path.lexists(os.path.join(top, name))]
    for parent, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            path = os.path.join(parent, name)
            if path in found:
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                hidden = mode & 0o005 != 0o005
            elif stat.S_ISREG(mode):
                hidden = not mode & 0o004
            else:
                hidden = not stat.S_ISLNK(mode)
            if hidden:
                found.append(path)
        dirs[:] = [d for d in dirs if os.path.join(parent, d) not in found]
    return found


def declared_paths(paths: Any, instance: str) -> list[dict[str, Any]]:
    """The task's extra host paths, checked: [{"path": absolute and resolved, "writable": bool}]."""
    checked = []
    for entry in paths or []:
        path, writable = str(entry["path"]), bool(entry.get("writable"))
        if not path.startswith("/") or os.path.normpath(path) != path or path == "/":
            msg = f"declared path {path!r}: give an absolute, normalised path other than /"
            raise SupervisorError("InvalidInput", msg)
        if os.path.realpath(path) != path:
            msg = (
                f"declared path {path!r} goes through a symlink: declare {os.path.realpath(path)!r}"
            )
            raise SupervisorError("InvalidInput", msg)
        if any(is_under(path, top) for top in ("/proc", "/dev", "/sys")) or path == instance:
            msg = f"declared path {path!r}: /proc, /dev and /sys are the view's own, and the "
            raise SupervisorError("InvalidInput", msg + "instance is always there")
        checked.append({"path": path, "writable": writable})
    return checked


def complete_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Adds `chunk` to a connection's `buffer`; takes out and returns the lines it completed
    (blank ones dropped), leaving the unfinished rest."""
    buffer += chunk
    if b"\n" not in chunk:
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


def require_regular(path: str, mode: int, verb: str) -> None:
    """File tools touch regular files only: never a terminal, a device, a FIFO or a socket."""
    if stat.S_ISREG(mode):
        return
    kinds = {stat.S_ISDIR: "a directory", stat.S_ISCHR: "a character device",
             stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a FIFO",
             stat.S_ISSOCK: "a socket"}  # fmt: skip
    kind = next((name for test, name in kinds.items() if test(mode)), "not a regular file")
    raise SupervisorError(
        "InvalidInput",
        f"{path} is {kind}: the file tools {verb} regular files only; use a command for others",
    )


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
    Supervisor(proto_in, proto_out, lifeline, channel).run()


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


if __name__ == "__main__":
    main()
