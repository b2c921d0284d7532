"""File operations served in the supervisor's own process, without a fork: resolved by
openat2(2) inside the workspace's view, as the trajectory.

A dirfd of the view is opened once per holder (through /proc/<holder>/root: the view lives in
the holder's mount namespace), and every path is resolved relative to it by the kernel:

- container mode: the view's root, RESOLVE_IN_ROOT (`..` and absolute symlinks stop at the
  view's `/`, exactly as in the chroot the forked child made);
- host mode: the instance's overlay (the view's root is a read-only skeleton of host binds),
  RESOLVE_BENEATH: a path that would leave it (an absolute symlink, `..` past it) fails with
  EXDEV rather than resolving differently from the chroot.

Always RESOLVE_NO_MAGICLINKS (no /proc/*/root, /proc/*/fd/*) and RESOLVE_NO_XDEV: a path that
crosses a mount (a mask, /sys, /tmp, a declared path, a hung network filesystem) is not served
here. Whatever cannot be served here (EXDEV, ELOOP, a path outside the instance, a kernel
without openat2) is answered by the forked child of files.py, as every call was before: it
gives the answer the chroot gives, and a timeout bounds it. What is served here cannot block:
a regular file on the workspace's own overlay, opened O_NONBLOCK (a FIFO swapped in is refused
on fstat, never waited on). Checks are the kernel's, with this thread's effective capabilities
dropped meanwhile (isolation.as_the_trajectory): uid 0 without capabilities, as a command, so a
file made here is owned as a command's would be (the supervisor's uid and gid, its umask).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING, Literal

from .isolation import as_the_trajectory
from .linux import RESOLVE_BENEATH, RESOLVE_IN_ROOT
from .protocol import SupervisorError
from .view_dir import Elsewhere, ViewDir

if TYPE_CHECKING:
    from .protocol import Entry, ListArgs, ListResult, ReadArgs, ReadResult, WriteArgs, WriteResult
    from .state import Supervisor
    from .workspace import Workspace

#: Larger than this, a file is written by the forked child: copying a large lower file up to
#: the overlay's upper (on open for writing) would hold the loop that long.
LARGEST_COPY_UP = 8 << 20


def view_dir(sup: Supervisor, ws: Workspace) -> ViewDir:
    """The workspace's ViewDir, opened once per holder (a restore gives it a new one).

    Raises:
        Elsewhere: no holder, or the kernel lacks openat2 (remembered: asked once).
    """
    if ws.holder_pid and ws.holder_gone():
        # A dead holder (dying, a zombie, or gone) loses its namespaces: the view is lost, and
        # the dirfd would serve its stale mounts. The forked child fails the same way (its
        # setns). Its closed socket says so first (Workspace.holder_gone).
        forget_view_dir(ws)
        raise SupervisorError(
            "InfrastructureError", "the workspace's holder died: its view is gone"
        )
    current = ws.view_dir
    if current is not None and current.holder_pid == ws.holder_pid:
        return current
    forget_view_dir(ws)
    if not ws.holder_pid or sup.openat2_missing:
        raise Elsewhere
    container = sup.cfg["mode"] == "container"
    prefix = "/" if container else str(sup.cfg["instance"]).rstrip("/")
    where = f"/proc/{ws.holder_pid}/root{ws.root}{'' if container else prefix}"
    fd = os.open(where, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    opened = ViewDir(fd, ws.holder_pid, prefix, RESOLVE_IN_ROOT if container else RESOLVE_BENEATH)
    try:
        os.close(opened.open(".", os.O_PATH | os.O_DIRECTORY))
    except Elsewhere as e:
        os.close(fd)
        if isinstance(e.__cause__, OSError) and e.__cause__.errno == errno.ENOSYS:
            sup.openat2_missing = True
        raise
    ws.view_dir = opened
    return opened


def forget_view_dir(ws: Workspace) -> None:
    """Closes the workspace's dirfd: kept open, it would keep a dead holder's mounts alive."""
    if ws.view_dir is not None:
        os.close(ws.view_dir.fd)
        ws.view_dir = None


def read(sup: Supervisor, ws: Workspace, args: ReadArgs) -> ReadResult:
    """Raises: Elsewhere, SupervisorError, OSError (as files.py's child would)."""
    path, limit = str(args["path"]), int(args.get("max_bytes") or 16 << 20)
    where = view_dir(sup, ws)
    relative = where.relative(path, sup.cfg["workdir"])
    with as_the_trajectory():
        if _regular_file(where, relative, path, "read") is None:
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", path)
        fd = where.open(relative, os.O_RDONLY)
    try:
        require_regular(path, os.fstat(fd).st_mode, "read")  # swapped in meanwhile?
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise SupervisorError("LimitExceeded", f"{path} is larger than {limit} bytes")
    return {"data": b"".join(chunks)}


def write(sup: Supervisor, ws: Workspace, args: WriteArgs, data: bytes) -> WriteResult:
    """Raises: Elsewhere, SupervisorError, OSError (as files.py's child would)."""
    path, mode = str(args["path"]), args.get("mode")
    where = view_dir(sup, ws)
    relative = where.relative(path, sup.cfg["workdir"])
    with as_the_trajectory():
        existing = _regular_file(where, relative, path, "write")
        if existing is not None and existing.st_size > LARGEST_COPY_UP:
            raise Elsewhere
        previous = None if existing is None else existing.st_size
        if previous is None:
            _make_parents(where, relative)
        flags = os.O_WRONLY | (os.O_CREAT if previous is None else 0)
        fd = where.open(relative, flags, 0o644)
        try:
            require_regular(path, os.fstat(fd).st_mode, "write")  # swapped in meanwhile?
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if mode is not None:
                os.fchmod(fd, int(mode))
        finally:
            os.close(fd)
    return {"bytes": len(data), "previous_bytes": previous}


def list_(sup: Supervisor, ws: Workspace, args: ListArgs) -> ListResult:
    """Raises: Elsewhere, OSError (as files.py's child would)."""
    path, limit = str(args.get("path") or "."), int(args.get("max_entries") or 10000)
    where = view_dir(sup, ws)
    with as_the_trajectory():
        fd = where.open(where.relative(path, sup.cfg["workdir"]), os.O_RDONLY | os.O_DIRECTORY)
        try:
            entries: list[Entry] = []
            truncated = False
            with os.scandir(fd) as found:
                for entry in found:
                    if len(entries) >= limit:
                        truncated = True
                        break
                    st = entry.stat(follow_symlinks=False)
                    entries.append({"name": entry.name, "kind": kind_of(st.st_mode),
                                    "size": st.st_size})  # fmt: skip
        finally:
            os.close(fd)
    if not truncated:
        entries.sort(key=lambda e: str(e["name"]))
    return {"entries": entries, "truncated": truncated}


def _regular_file(where: ViewDir, relative: str, path: str, verb: str) -> os.stat_result | None:
    """What is at `relative`, looked at without opening it to read or write (O_PATH: no FIFO
    wakes, no device opens, nothing is copied up yet); None if nothing is.

    Raises:
        SupervisorError: it is not a regular file. Elsewhere (see ViewDir.open).
    """
    try:
        fd = where.open(relative, os.O_PATH)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    require_regular(path, st.st_mode, verb)
    return st


def _make_parents(where: ViewDir, relative: str) -> None:
    """mkdir -p of the directories above `relative`, each made in a directory resolved as
    every path here is."""
    parts = [p for p in relative.split("/")[:-1] if p not in ("", ".")]
    for depth in range(1, len(parts) + 1):
        try:
            os.close(where.open("/".join(parts[:depth]), os.O_PATH | os.O_DIRECTORY))
            continue
        except FileNotFoundError:
            pass
        parent = where.open("/".join(parts[: depth - 1]) or ".", os.O_PATH | os.O_DIRECTORY)
        try:
            os.mkdir(parts[depth - 1], 0o777, dir_fd=parent)
        except FileExistsError:
            pass  # made meanwhile; resolved again below
        finally:
            os.close(parent)


def kind_of(mode: int) -> Literal["file", "dir", "symlink", "other"]:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


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
