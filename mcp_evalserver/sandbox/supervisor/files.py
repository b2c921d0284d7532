"""Files, read and written as the trajectory itself, resolved inside its view.

Served in the supervisor's own process where openat2(2) can resolve the path on the
workspace's own overlay (in_view.py: no fork per call); otherwise, as always before, by a child
that enters the workspace's mount namespace, chroots into its view and drops privileges, so
symlinks resolve inside it, with a timeout (a FIFO, a hung filesystem).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import json
import os
from typing import TYPE_CHECKING, Any

from . import in_view
from .in_view import kind_of, require_regular
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
from .view_dir import Elsewhere

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    FileArgs = ReadArgs | WriteArgs | ListArgs


def files_job(
    sup: Supervisor,
    req_id: int,
    args: FileArgs,
    work: Callable[[], Mapping[str, Any]],
    answer: Callable[[dict[str, Any]], Mapping[str, Any]] = dict,
) -> None:
    """Runs `work` in a child inside the workspace's view, as the trajectory; its result (or
    error) comes back as one JSON line on the info pipe, and `answer(result)` is the reply's."""
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

    def finish(job: Job) -> Mapping[str, Any]:
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
        return answer(dict(msgs[-1]["result"]))

    sup.jobs.spawn(req_id, child, ws, float(args.get("timeout") or 60)).finish = finish


# --- operations ------------------------------------------------------------------------------
def in_process(path: str, serve: Callable[[], Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """`serve()` (an in_view operation) with its errors as the forked child reports them; None
    when it is for the child instead (Elsewhere)."""
    try:
        return serve()
    except Elsewhere:
        return None
    except FileNotFoundError as e:
        raise SupervisorError("NotFound", f"{path}: no such file or directory", "ENOENT") from e
    except OSError as e:
        name = errno.errorcode.get(e.errno or 0)
        raise SupervisorError("InvalidInput", f"{path}: {e.strerror}", name) from e


def read(sup: Supervisor, req_id: int, args: ReadArgs) -> Mapping[str, Any] | None:
    path, limit = str(args["path"]), int(args.get("max_bytes") or 16 << 20)
    ws = sup.workspace(args)
    done = in_process(path, lambda: in_view.read(sup, ws, args))
    if done is not None:
        return done

    def work() -> dict[str, str]:
        require_regular(path, os.stat(path).st_mode, "read")
        # O_NONBLOCK: a FIFO swapped in meanwhile must not hang us; fstat catches it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            require_regular(path, os.fstat(fd).st_mode, "read")
            data = f.read(limit + 1)
        if len(data) > limit:
            raise SupervisorError("LimitExceeded", f"{path} is larger than {limit} bytes")
        return {"data_b64": base64.b64encode(data).decode()}  # JSON, on the info pipe

    def answer(result: dict[str, Any]) -> ReadResult:
        return {"data": base64.b64decode(result["data_b64"])}

    files_job(sup, req_id, args, work, answer)
    return None


def write(sup: Supervisor, req_id: int, args: WriteArgs) -> Mapping[str, Any] | None:
    path, data = str(args["path"]), base64.b64decode(args["data_b64"])
    mode = args.get("mode")
    ws = sup.workspace(args)
    done = in_process(path, lambda: in_view.write(sup, ws, args, data))
    if done is not None:
        return done

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
    return None


def list_(sup: Supervisor, req_id: int, args: ListArgs) -> Mapping[str, Any] | None:
    path, limit = str(args.get("path") or "."), int(args.get("max_entries") or 10000)
    ws = sup.workspace(args)
    done = in_process(path, lambda: in_view.list_(sup, ws, args))
    if done is not None:
        return done

    def work() -> ListResult:
        entries: list[Entry] = []
        with os.scandir(path) as it:
            for entry in it:
                if len(entries) >= limit:
                    return {"entries": entries, "truncated": True}
                st = entry.stat(follow_symlinks=False)
                entries.append({"name": entry.name, "kind": kind_of(st.st_mode),
                                "size": st.st_size})  # fmt: skip
        entries.sort(key=lambda e: str(e["name"]))
        return {"entries": entries, "truncated": False}

    files_job(sup, req_id, args, work)
    return None
