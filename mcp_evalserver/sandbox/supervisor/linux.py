"""Linux system calls the standard library lacks, through ctypes, and their constants (stable
kernel ABI): mounts, namespaces, prctl, a fork into new namespaces, closing inherited fds."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import platform
import signal
import socket
import struct

# --- constants ---------------------------------------------------------------------------------
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
PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS = 22, 38
SYSCALL_CLONE = {"x86_64": 56, "aarch64": 220}
SYSCALL_MOUNT_SETATTR, AT_RECURSIVE, AT_FDCWD = 442, 0x8000, -100
SYSCALL_OPEN_TREE, SYSCALL_MOVE_MOUNT = 428, 429  # the same number on every architecture
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC, MOVE_MOUNT_F_EMPTY_PATH = 1, 0o2000000, 4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 1, 2, 4
SYSCALL_OPENAT2 = 437  # the same number on every architecture; Linux 5.6
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_BENEATH, RESOLVE_IN_ROOT = 0x01, 0x02, 0x08, 0x10

# --- system calls -----------------------------------------------------------------------------
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                       ctypes.c_char_p]  # fmt: skip
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                       ctypes.c_ulong]  # fmt: skip


def check(ret: int, what: str) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def mount(src: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

    check(libc.mount(enc(src), enc(target), enc(fstype), flags, enc(data)), "mount " + target)


def umount(target: str) -> None:
    check(libc.umount2(target.encode(), MNT_DETACH), "umount " + target)


def prctl(option: int, arg: int = 0) -> None:
    check(libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


def unshare(flags: int) -> None:
    check(libc.unshare(flags), "unshare")


def setns(path: str, nstype: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        check(libc.setns(fd, nstype), "setns " + path)
    finally:
        os.close(fd)


def setns_fd(fd: int, nstype: int, what: str) -> None:
    """Joins the namespace an open ns file `fd` names."""
    check(libc.setns(fd, nstype), what)


def clone_mount(path: str) -> int:
    """A detached copy of the mount at `path` (open_tree(2)): an fd that `attach_mount` puts
    into another mount namespace, where a bind of `path` could not reach."""
    fd = libc.syscall(ctypes.c_long(SYSCALL_OPEN_TREE), ctypes.c_int(AT_FDCWD),
                       ctypes.c_char_p(path.encode()),
                       ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC))  # fmt: skip
    return check(fd, "open_tree " + path)


def attach_mount(fd: int, target: str) -> None:
    """Mounts `clone_mount`'s copy at `target` (move_mount(2)) and closes the fd."""
    try:
        ret = libc.syscall(ctypes.c_long(SYSCALL_MOVE_MOUNT), ctypes.c_int(fd),
                            ctypes.c_char_p(b""), ctypes.c_int(AT_FDCWD),
                            ctypes.c_char_p(target.encode()),
                            ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))  # fmt: skip
        check(ret, "move_mount " + target)
    finally:
        os.close(fd)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64)]  # fmt: skip


# openat2's constant arguments, made once: the file tools open twice per call.
_OPENAT2 = ctypes.c_long(SYSCALL_OPENAT2)
_OPEN_HOW_SIZE = ctypes.c_size_t(ctypes.sizeof(_OpenHow))


def openat2(dirfd: int, path: str, flags: int, resolve: int, mode: int = 0) -> int:
    """openat2(2): opens `path` relative to `dirfd`, resolved as `resolve` (RESOLVE_*) says.

    Raises:
        OSError: as open(2) does, and ENOSYS on kernels before 5.6, EXDEV when resolving would
            leave what `resolve` allows, ELOOP on a magic link RESOLVE_NO_MAGICLINKS refuses.
    """
    how = _OpenHow(flags, mode if flags & os.O_CREAT else 0, resolve)
    fd = libc.syscall(_OPENAT2, ctypes.c_int(dirfd),
                      ctypes.c_char_p(path.encode("utf-8", "surrogateescape")),
                      ctypes.byref(how), _OPEN_HOW_SIZE)  # fmt: skip
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    return int(fd)


# The GIL stays held across a call through PyDLL: fork_into's clone must not release it.
syscall_holding_gil = ctypes.PyDLL(None, use_errno=True).syscall


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
    pid = syscall_holding_gil(ctypes.c_long(number), ctypes.c_ulong(flags | signal.SIGCHLD),
                               zero, zero, zero, zero)  # fmt: skip
    err = ctypes.get_errno()
    if pid == 0:
        ctypes.pythonapi.PyOS_AfterFork_Child()
        return 0
    ctypes.pythonapi.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, f"clone: {os.strerror(err)}")
    return int(pid)


def make_readonly_recursive(path: str) -> None:
    """Read-only, nosuid, nodev for a mount and everything under it (rbind alone keeps rw)."""
    attr = (ctypes.c_uint64 * 4)(MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, 0, 0, 0)
    ret = libc.syscall(ctypes.c_long(SYSCALL_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
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
    close_range = getattr(libc, "close_range", None)  # glibc >= 2.34; not in older musl
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


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, req))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS IFF_UP


def sigchld_wakeup() -> int:
    """The read end of a non-blocking pipe that SIGCHLD writes to: a select loop that watches it
    wakes when a child exits, and reaps."""
    rfd, wfd = os.pipe()
    for fd in (rfd, wfd):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wfd)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return rfd


def reset_signals() -> None:
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)


def write_file(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
