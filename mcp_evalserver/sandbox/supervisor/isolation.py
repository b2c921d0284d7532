"""What confines a sandboxed process besides its view: capabilities, no_new_privs, the seccomp
filter, its user (from the view's own passwd), rlimits, and the user namespace an unprivileged
supervisor runs in. holder/confine.c applies the same lists (KEPT_CAPS, the filter it is handed)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import platform
import resource
import stat
import struct
from typing import Any

from .linux import (
    CAP_SYS_ADMIN,
    CLONE_NEWUSER,
    NS_FLAGS,
    PR_CAPBSET_DROP,
    PR_CAPBSET_READ,
    PR_SET_NO_NEW_PRIVS,
    PR_SET_SECCOMP,
    check,
    libc,
    prctl,
    unshare,
    write_file,
)
from .protocol import SupervisorError

# What a trajectory may keep, by InstanceSpec.capabilities. "none": uid 0 owns the tasks' files,
# which is all most commands need; DAC_OVERRIDE (or CHOWN, FOWNER: take the file over, then open
# it) opens any other user's private file. "container": the set Docker gives a container by
# default (moby's oci/caps/defaults.go), for tasks written for one (apt, chown, nginx, su). Never
# DAC_READ_SEARCH (open_by_handle_at escapes a chroot), SYS_ADMIN, SYS_PTRACE, NET_ADMIN. What
# keeps the added ones inside the workspace is in docs/design/isolation.md ("Capabilities").
CONTAINER_CAPS = (
    0,  # CHOWN
    1,  # DAC_OVERRIDE
    3,  # FOWNER
    4,  # FSETID
    5,  # KILL
    6,  # SETGID
    7,  # SETUID
    8,  # SETPCAP
    10,  # NET_BIND_SERVICE
    13,  # NET_RAW
    18,  # SYS_CHROOT (chroot(2) itself stays refused by the filter: see SECCOMP_TABLES)
    27,  # MKNOD
    29,  # AUDIT_WRITE
    31,  # SETFCAP
)
CAPABILITY_SETS: dict[str, tuple[int, ...]] = {"none": (), "container": CONTAINER_CAPS}
# This supervisor's set (one instance each), chosen at init (keep_capabilities).
KEPT_CAPS: tuple[int, ...] = ()


def keep_capabilities(name: str) -> None:
    """Sets what every sandboxed process of this supervisor keeps (InstanceSpec.capabilities).

    Raises:
        SupervisorError: an unknown set.
    """
    global KEPT_CAPS
    if name not in CAPABILITY_SETS:
        known = ", ".join(CAPABILITY_SETS)
        raise SupervisorError("InvalidInput", f"capabilities {name!r} unknown; known: {known}")
    KEPT_CAPS = CAPABILITY_SETS[name]


def kept_mask() -> int:
    return sum(1 << c for c in KEPT_CAPS)


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


def _cap_last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except OSError:
        return 40


# Read once here: inside a workspace view /proc may be an empty directory.
CAP_LAST_CAP = _cap_last_cap()


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]  # fmt: skip


class _AsTheTrajectory:
    """as_the_trajectory's context manager, for one KEPT_CAPS: capset's arguments made once,
    from one capget (the header, this thread's sets as they were, to come back to, and them
    lowered). A class, not a generator's context manager: every file operation served in
    process enters one (6.6 us against 4.1 us for the two capsets alone, timeit). The sets
    are the supervisor's own, which nothing else changes; were they lowered meanwhile, the
    capset back up would fail (EPERM), never raise what is not permitted."""

    __slots__ = ("header", "lowered", "saved")

    def __init__(self) -> None:
        header = _CapHeader(0x20080522, 0)
        saved = (_CapData * 2)()
        check(libc.capget(ctypes.byref(header), ctypes.byref(saved)), "capget")
        keep = sum(1 << c for c in KEPT_CAPS)
        lowered = (_CapData * 2)(*(_CapData(d.permitted & (keep >> 32 * i) & 0xFFFFFFFF,
                                            d.permitted, d.inheritable)
                                   for i, d in enumerate(saved)))  # fmt: skip
        # Each pointer keeps what it points to alive (ctypes.byref holds a reference).
        self.header, self.saved = ctypes.byref(header), ctypes.byref(saved)
        self.lowered = ctypes.byref(lowered)

    def __enter__(self) -> None:
        check(libc.capset(self.header, self.lowered), "capset")

    def __exit__(self, *exc_info: object) -> None:
        check(libc.capset(self.header, self.saved), "capset")


_AS_THE_TRAJECTORY: dict[tuple[int, ...], _AsTheTrajectory] = {}


def as_the_trajectory() -> contextlib.AbstractContextManager[None]:
    """This thread without effective capabilities meanwhile (`with`), as a trajectory's
    commands are (uid 0, KEPT_CAPS): a file opened or made then passes the permission checks a
    command's would, no more. The permitted set stays, so they come back after; per thread
    (capset(2)), and the supervisor's loop is one thread. Not reentrant.

    Raises:
        OSError: the kernel refused (it never should: lowering is always allowed).
    """
    switch = _AS_THE_TRAJECTORY.get(KEPT_CAPS)
    if switch is None:
        switch = _AS_THE_TRAJECTORY[KEPT_CAPS] = _AsTheTrajectory()
    return switch


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
    if libc.prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0) == 0:
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
    keep_mask = kept_mask()
    drop_bounding_set()
    if ids is not None:
        uid, gid, groups = ids
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)  # from uid 0 to another: the kernel clears every capability set
    if ids is None or ids[0] == 0:
        header = _CapHeader(0x20080522, 0)
        data = (_CapData * 2)(_CapData(keep_mask, keep_mask, keep_mask), _CapData(0, 0, 0))
        check(libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)  # setuid binaries and file caps grant nothing more
    program = SECCOMP_PROGRAM if filter_syscalls else None
    if program is not None:
        buf = ctypes.create_string_buffer(program)
        fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buf))
        fbuf = ctypes.create_string_buffer(fprog)
        check(libc.prctl(PR_SET_SECCOMP, 2, ctypes.addressof(fbuf), 0, 0), "seccomp")


def lookup_user(user: str) -> tuple[int, int, list[int], str]:
    """(uid, gid, groups, home) of a user name or uid, from the view's /etc/passwd and group.

    Called after chroot: the workspace's own files decide (a sample may add users). A uid
    absent from passwd runs with gid 0 and home /, as `docker exec --user` does.
    """
    entries = [line.split(":") for line in _read_regular("/etc/passwd")]
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
    for line in _read_regular("/etc/group"):
        fields = line.split(":")
        if len(fields) >= 4 and fields[2].isdigit() and name in fields[3].split(","):
            groups.add(int(fields[2]))
    return uid, gid, sorted(groups), home


def _read_regular(path: str) -> list[str]:
    """The lines of `path` if it is a regular file, else none: a FIFO the trajectory put at
    /etc/passwd must not block an exec before its command exists (holder/confine.c's
    open_regular)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        return f.read().decode(errors="replace").splitlines()


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


def apply_rlimits(limits: dict[str, Any], have: dict[str, bool]) -> None:
    """Per-process caps where no cgroup enforces the workspace's: see execs.spawn_sandboxed."""
    if limits.get("pids") and have.get("nproc"):
        n = int(limits["pids"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    if limits.get("memory_bytes") and not have["memory"]:
        n = int(limits["memory_bytes"])  # no cgroup: a per-process cap is better than none
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
