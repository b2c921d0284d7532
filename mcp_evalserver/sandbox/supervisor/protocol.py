"""The supervisor's wire protocol, declared once: what `client.py` sends and the supervisor
answers. Stdlib only and Python >= 3.8, like the rest of this folder: both ends import it.

JSON lines; every request carries an `id`, many may be in flight, each is answered once, in
any order:

    -> {"id": 7, "op": "exec", "args": {"ws": "t1", "argv": ["true"], "timeout": 10}}
    <- {"id": 7, "ok": true, "result": {"exit_code": 0, ...}}
    <- {"id": 8, "ok": false, "error": {"type": "NotFound", "message": "...", "errno": "ENOENT"}}
    <- {"id": 9, "ok": true, "result": {}, "raw": {"data": 5}}\nhello

`Op` names every operation; `<Op>Args` and `<Op>Result` are its request's `args` and its
reply's `result`. An argument left out takes the default the supervisor documents beside it.
A result's `bytes` values (a file's, a command's output, a diff, an archive) travel raw right
after its line, in the order and with the lengths its `raw` names: base64 and JSON's escaping
of a 4 KB file cost its read more CPU, on both ends, than the rest of its round trip. Binary
data in a request travels base64 (`*_b64`). A socket passed to the supervisor (SCM_RIGHTS) on
its request socket or on its connection channel (`--connections FD`) becomes another
connection that speaks this same protocol, under request ids of its own.
"""

from __future__ import annotations

# Annotations stay strings (never evaluated), so `list[str]` and `X | None` are fine on 3.8;
# TypedDict and Literal are 3.8's own.
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

PROTOCOL_VERSION = 2  # 2: a result's bytes travel raw after its line (`Reply.raw`)

Op = Literal[
    "init", "freeze",
    "ws_create", "ws_destroy", "ws_reset",
    "ws_checkpoint", "ws_restore", "ws_fork", "ws_export", "ws_end_processes",
    "exec", "diff", "read", "write", "list", "search", "glob",
    "cancel", "shutdown",
]  # fmt: skip
OPS = get_args(Op)

# Each names a class of mcp_evalserver.errors, which the client raises.
ErrorType = Literal[
    "InvalidInput", "NotFound", "Conflict", "LimitExceeded", "Timeout",
    "InfrastructureError", "SandboxUnavailable",
]  # fmt: skip
ERROR_TYPES = get_args(ErrorType)


def error_type(name: object) -> ErrorType:
    """`name` if it names an error type, else InfrastructureError (as the client reads it)."""
    for known in ERROR_TYPES:
        if known == name:
            return known  # type: ignore[no-any-return]
    return "InfrastructureError"


# --- envelopes -------------------------------------------------------------------------------
class Request(TypedDict):
    id: int
    op: Op
    args: Mapping[str, Any]  # the op's <Op>Args


class _ErrorRequired(TypedDict):
    type: ErrorType
    message: str


class ErrorBody(_ErrorRequired, total=False):
    errno: str  # which system call failure it was ("EACCES", ...), when one was


class SupervisorError(Exception):
    """An error the supervisor answers a request with (`ErrorBody`); `errno_name` ("EACCES",
    ...) says which system call failure it was, when one was."""

    def __init__(self, kind: ErrorType, message: str, errno_name: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.errno_name = kind, errno_name


class Reply(TypedDict, total=False):
    id: int
    ok: bool
    result: Mapping[str, Any]  # when ok: the op's <Op>Result, less its bytes values
    error: ErrorBody  # when not
    raw: Mapping[str, int]  # the result's bytes values that follow the line: name -> length


def reply_frame(reply: Reply, encode: Callable[[Reply], str]) -> bytes:
    """What the supervisor writes for `reply`: its line (made by `encode`, JSON), then the bytes
    of each `bytes` value of its result, named with their lengths in the line's `raw`."""
    result = reply.get("result")
    if not result or bytes not in map(type, result.values()):  # no Python frame per value
        return (encode(reply) + "\n").encode()
    fields: dict[str, Any] = {}
    raw: list[bytes] = []
    lengths: dict[str, int] = {}
    for name, value in result.items():
        if type(value) is bytes:
            raw.append(value)
            lengths[name] = len(value)
        else:
            fields[name] = value
    line = encode({**reply, "result": fields, "raw": lengths})
    return b"".join([line.encode(), b"\n", *raw])


def raw_size(reply: Mapping[str, Any], most: int) -> int:
    """How many bytes follow `reply`'s line (see `Reply.raw`).

    Raises:
        ValueError: `raw` is not a mapping of names to lengths, or they add up past `most`.
    """
    raw = reply.get("raw")
    if raw is None:
        return 0
    if not isinstance(raw, dict) or not {int} >= set(map(type, raw.values())):
        raise ValueError(f"bad raw lengths {raw!r}")
    size = sum(raw.values())
    if not 0 <= min(raw.values(), default=0) <= size <= most:
        raise ValueError(f"bad raw lengths {raw!r}: {most} bytes at most may follow a reply")
    return size


def result_of(reply: Mapping[str, Any], data: bytes) -> dict[str, Any]:
    """`reply`'s result, with the bytes that followed its line (`data`, `raw_size` of them)
    under their names."""
    result = dict(reply.get("result") or {})
    raw = reply.get("raw")
    if raw:
        at = 0
        for name, size in raw.items():
            result[name] = data[at : at + size]  # all of `data` when it is one value: no copy
            at += size
    return result


# --- the instance ----------------------------------------------------------------------------
class _DeclaredPathRequired(TypedDict):
    path: str
    writable: bool


class DeclaredPath(_DeclaredPathRequired, total=False):
    # Where the view shows it (read-only paths only); default `path`. In container mode the
    # backend bound it into the container there.
    target: str


class _InitRequired(TypedDict):
    mode: Literal["host", "container"]
    store: str  # holds the workspaces' layers; not on overlayfs


class InitArgs(_InitRequired, total=False):
    store_tmpfs: bool  # mount a private tmpfs at `store`
    instance: str  # host mode: the instance directory (default "/")
    workdir: str  # default "/testbed"
    network: bool  # default False: a workspace sees only its loopback
    capabilities: Literal["none", "container"]  # default "none": see isolation.CAPABILITY_SETS
    paths: list[DeclaredPath]  # host mode: more host paths the view shows
    holder: str | None  # the compiled holder's binary, if it can run here


class EnforcedLimits(TypedDict):
    pids: bool
    memory: bool


class InitResult(TypedDict):
    version: int
    holder: Literal["native", "python"]
    pid: int
    python: str
    cgroups: str  # "v1", "v2" or "" (none writable)
    cgroup_dirs: list[str]
    limits: EnforcedLimits


class FreezeArgs(TypedDict, total=False):
    setup: list[str]  # shell lines, run unsandboxed in the workdir before freezing
    timeout: float  # default 3600


class FreezeResult(TypedDict):
    base: str | None  # HEAD of the workdir, or None where it is not a git repository
    duration_s: float


# --- workspaces ------------------------------------------------------------------------------
class Limits(TypedDict, total=False):
    pids: int
    memory_bytes: int
    disk_bytes: int


class WorkspaceArgs(TypedDict):
    ws: str


class WsCreateArgs(WorkspaceArgs, total=False):
    limits: Limits
    start_b64: str  # a `ws_export` archive: the workspace starts at it


class _WsCreateRequired(TypedDict):
    ws: str
    ms: float
    holder_pid: int  # in the supervisor's pid namespace
    root: str  # the view, in the holder's mount namespace
    made_ahead: bool  # built before it was asked for


class WsCreateResult(_WsCreateRequired, total=False):
    ready_left: int  # if made ahead: how many more are
    checkpoint: str  # with start_b64: the checkpoint of what it started at


class Empty(TypedDict):
    pass


class WsCheckpointResult(TypedDict):
    checkpoint: str
    depth: int
    holder_pid: int


class WsRestoreArgs(WorkspaceArgs):
    checkpoint: str


class HolderResult(TypedDict):
    holder_pid: int


class _WsForkRequired(WorkspaceArgs):
    name: str


class WsForkArgs(_WsForkRequired, total=False):
    checkpoint: str | None  # none: a new checkpoint of the workspace as it is


class WsForkResult(WsCreateResult):
    parent_holder_pid: int


class _WsExportRequired(WorkspaceArgs):
    checkpoint: str


class WsExportArgs(_WsExportRequired, total=False):
    max_bytes: int  # default 256 MiB
    timeout: float  # default 300


class WsExportResult(TypedDict):
    archive: bytes  # the checkpoint's layers as a tar; raw after the reply's line


# --- commands --------------------------------------------------------------------------------
class _ExecRequired(WorkspaceArgs):
    argv: list[str]
    timeout: float


class ExecArgs(_ExecRequired, total=False):
    env: dict[str, str]
    cwd: str | None  # relative to the workdir
    stdin_b64: str | None
    output_cap: int  # bytes kept of each of stdout and stderr (head and tail); default 1 MiB
    user: str | None  # a name or uid of the view
    report: bool  # a private channel at the command's fd 4 (see execs.spawn_sandboxed)


class _ExecRequiredResult(TypedDict):
    exit_code: int  # -signal when a signal ended it
    stdout: bytes  # raw after the reply's line (Reply.raw), as stderr and report
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    duration_s: float
    timed_out: bool


class ExecResult(_ExecRequiredResult, total=False):
    report: bytes  # with report
    report_truncated: bool
    report_writers: int  # how many processes wrote to the channel


class DiffArgs(WorkspaceArgs, total=False):
    timeout: float  # default 300
    max_bytes: int  # default 64 MiB


class DiffResult(TypedDict):
    patch: bytes  # against the frozen base, binary; raw after the reply's line (Reply.raw)


# --- files, read and written as the trajectory itself ----------------------------------------
class _PathRequired(WorkspaceArgs):
    path: str


class ReadArgs(_PathRequired, total=False):
    max_bytes: int  # default 16 MiB
    timeout: float  # default 60


class ReadResult(TypedDict):
    data: bytes  # travels raw after the reply's line (Reply.raw)


class _WriteRequired(_PathRequired):
    data_b64: str


class WriteArgs(_WriteRequired, total=False):
    mode: int | None
    timeout: float


class WriteResult(TypedDict):
    bytes: int
    previous_bytes: int | None  # the size of the file it replaced; None: it did not exist


class ListArgs(WorkspaceArgs, total=False):
    path: str  # default "."
    max_entries: int  # default 10,000
    timeout: float


class Entry(TypedDict):
    name: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int


class ListResult(TypedDict):
    entries: list[Entry]
    truncated: bool


# --- finding files and lines, as the trajectory itself (search.py, finder.py) ----------------
class _SearchRequired(WorkspaceArgs):
    pattern: str  # a Python regular expression, matched line by line


class SearchArgs(_SearchRequired, total=False):
    path: str  # default ".": a directory to walk, or one file
    glob: str | None  # only paths (relative to `path`) it matches; without "/": any depth
    max_hits: int  # default 200
    timeout: float  # default 30


class Hit(TypedDict):
    path: str  # relative to the workdir when under it, else absolute
    line: int  # 1-based
    text: str  # the line, clipped around the match


class SearchResult(TypedDict):
    hits: list[Hit]
    total: int  # every matching line, also those past max_hits
    truncated: bool


class GlobArgs(WorkspaceArgs, total=False):
    pattern: str  # default "**/*"
    path: str  # default "."
    max_entries: int  # default 1000
    timeout: float  # default 30


class GlobResult(TypedDict):
    paths: list[str]  # sorted; relative to the workdir when under it, else absolute
    total: int
    truncated: bool


# --- the connection --------------------------------------------------------------------------
class CancelArgs(TypedDict):
    target: int  # a request id of this connection's


class CancelResult(TypedDict):
    cancelled: bool  # False: it was not running (any more)


# What each operation takes and answers: ws_reset answers as ws_create; ws_destroy and shutdown
# answer {}. The supervisor's table of handlers (loop.OPERATIONS) covers exactly these ops.
MESSAGES = {
    "init": (InitArgs, InitResult),
    "freeze": (FreezeArgs, FreezeResult),
    "ws_create": (WsCreateArgs, WsCreateResult),
    "ws_destroy": (WorkspaceArgs, Empty),
    "ws_reset": (WorkspaceArgs, WsCreateResult),
    "ws_checkpoint": (WorkspaceArgs, WsCheckpointResult),
    "ws_restore": (WsRestoreArgs, HolderResult),
    "ws_fork": (WsForkArgs, WsForkResult),
    "ws_export": (WsExportArgs, WsExportResult),
    "ws_end_processes": (WorkspaceArgs, Empty),
    "exec": (ExecArgs, ExecResult),
    "diff": (DiffArgs, DiffResult),
    "read": (ReadArgs, ReadResult),
    "write": (WriteArgs, WriteResult),
    "list": (ListArgs, ListResult),
    "search": (SearchArgs, SearchResult),
    "glob": (GlobArgs, GlobResult),
    "cancel": (CancelArgs, CancelResult),
    "shutdown": (Empty, Empty),
}
