"""Files, read and written as the trajectory itself: in a child that enters the workspace's
mount namespace, chroots into its view and drops privileges, so symlinks resolve inside it."""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
import stat
from typing import TYPE_CHECKING, Any, Literal

from .isolation import drop_privileges
from .jobs import Job
from .linux import CLONE_NEWNS, setns
from .protocol import (
    Entry,
    ListArgs,
    ListResult,
    ReadArgs,
    ReadResult,
    SupervisorError,
    WriteArgs,
    WriteResult,
    error_type,
)
from .state import Supervisor

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    FileArgs = ReadArgs | WriteArgs | ListArgs
    Kind = Literal["file", "dir", "symlink", "other"]


def files_job(
    sup: Supervisor, req_id: int, args: FileArgs, work: Callable[[], Mapping[str, Any]]
) -> None:
    """Runs `work` in a child inside the workspace's view, as the trajectory; its result (or
    error) comes back as one JSON line on the info pipe."""
    ws = sup.workspace(args)
    workdir = sup.cfg["workdir"]

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
                error_type(msgs[-1].get("kind")),
                msgs[-1]["error"],
                msgs[-1].get("errno"),
            )
        return dict(msgs[-1]["result"])

    sup.jobs.spawn(req_id, child, ws, float(args.get("timeout") or 60)).finish = finish


# --- operations ------------------------------------------------------------------------------
def read(sup: Supervisor, req_id: int, args: ReadArgs) -> None:
    path, limit = str(args["path"]), int(args.get("max_bytes") or 16 << 20)

    def work() -> ReadResult:
        require_regular(path, os.stat(path).st_mode, "read")
        # O_NONBLOCK: a FIFO swapped in meanwhile must not hang us; fstat catches it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            require_regular(path, os.fstat(fd).st_mode, "read")
            data = f.read(limit + 1)
        if len(data) > limit:
            raise SupervisorError("LimitExceeded", f"{path} is larger than {limit} bytes")
        return {"data_b64": base64.b64encode(data).decode()}

    files_job(sup, req_id, args, work)


def write(sup: Supervisor, req_id: int, args: WriteArgs) -> None:
    path, data = str(args["path"]), base64.b64decode(args["data_b64"])
    mode = args.get("mode")

    def work() -> WriteResult:
        parent = os.path.dirname(path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            require_regular(path, os.stat(path).st_mode, "write")
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        # Without O_CREAT first: whether the file existed, told by the open that writes it.
        try:
            fd, created = os.open(path, flags & ~os.O_CREAT), False
        except FileNotFoundError:
            fd, created = os.open(path, flags, 0o644), True
        with os.fdopen(fd, "wb") as f:
            st = os.fstat(fd)
            require_regular(path, st.st_mode, "write")
            os.ftruncate(fd, 0)
            f.write(data)
        if mode is not None:
            os.chmod(path, int(mode))
        return {"bytes": len(data), "previous_bytes": None if created else st.st_size}

    files_job(sup, req_id, args, work)


def list_(sup: Supervisor, req_id: int, args: ListArgs) -> None:
    path, limit = str(args.get("path") or "."), int(args.get("max_entries") or 10000)

    def work() -> ListResult:
        entries: list[Entry] = []
        with os.scandir(path) as it:
            for entry in it:
                if len(entries) >= limit:
                    return {"entries": entries, "truncated": True}
                st = entry.stat(follow_symlinks=False)
                kind: Kind = ("symlink" if stat.S_ISLNK(st.st_mode) else "dir"
                        if stat.S_ISDIR(st.st_mode) else "file"
                        if stat.S_ISREG(st.st_mode) else "other")  # fmt: skip
                entries.append({"name": entry.name, "kind": kind, "size": st.st_size})
        entries.sort(key=lambda e: str(e["name"]))
        return {"entries": entries, "truncated": False}

    files_job(sup, req_id, args, work)


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
