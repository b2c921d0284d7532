"""The sandbox seam: `Backend` -> `Instance` -> `Workspace`, and the types they exchange.

A backend provisions instances (a prepared, frozen environment per task); an instance hands out
workspaces (a trajectory's private copy-on-write view of it). Every method is async (anyio) and
cleanup goes through `async with` or an explicit `aclose`/`destroy`, never `__del__`.

A command that exits non-zero is data (`ExecResult.exit_code`); an instance that is gone raises
`SandboxUnavailable`.
"""

from __future__ import annotations

import functools
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_evalserver import errors
from mcp_evalserver.errors import ExcInfo
from mcp_evalserver.spec.host_paths import HostPath

DEFAULT_WORKDIR = "/testbed"
#: The file descriptor at which `exec(report=True)` gives the command its report channel.
REPORT_FD = 4


class InstanceSpec(BaseModel):
    """What a task needs from its environment; equal specs share one instance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(default="", description="Instance identity; derived from the spec if empty.")
    image: str | None = Field(default=None, description="Container image (docker backend).")
    path: str | None = Field(default=None, description="Host directory (local backend).")
    workdir: str = Field(
        default="",
        description="Where commands start and diffs are taken: /testbed for an image, the "
        "directory itself for a path, unless given.",
    )
    setup: tuple[str, ...] = Field(default=(), description="Shell commands run once, then frozen.")
    paths: tuple[HostPath, ...] = Field(
        default=(),
        description="Host paths the view shows at their own place besides the instance "
        "(local backend; an image holds its files itself).",
    )
    setup_timeout_s: float = Field(default=1800.0, gt=0)
    build_context: str | None = Field(
        default=None,
        description="A host directory with a Dockerfile: the docker backend builds `image` "
        "from it when the engine lacks it (the tag names the context's hash).",
    )
    build_context_hash: str | None = Field(
        default=None, description="`tree_hash` of the context when the task was read."
    )
    build_timeout_s: float = Field(default=1800.0, gt=0, description="How long a build may take.")
    cpus: float | None = Field(
        default=None, gt=0, description="CPUs of the instance's container (docker backend)."
    )
    network: bool = Field(default=False, description="Whether commands may reach the network.")
    capabilities: Literal["none", "container"] = Field(
        default="none",
        description="What uid 0 may do in a workspace: `none` (no capability), or `container`: "
        "Docker's default set for a container (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, "
        "MKNOD, NET_BIND_SERVICE, NET_RAW, SETGID, SETUID, SETFCAP, SETPCAP, SYS_CHROOT, "
        "AUDIT_WRITE), inside the workspace's namespaces (Harbor tasks).",
    )
    pids_limit: int | None = Field(default=512, gt=0, description="Processes per workspace.")
    memory_bytes: int | None = Field(default=2 << 30, gt=0, description="Memory per workspace.")
    disk_bytes: int | None = Field(
        default=2 << 30, gt=0, description="Bytes a workspace may write (its upper layer)."
    )

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if (self.image is None) == (self.path is None):
            raise ValueError("give exactly one of `image` (docker) or `path` (local)")
        for name in ("path", "workdir"):
            value = getattr(self, name)
            if value and not value.startswith("/"):
                raise ValueError(f"`{name}` must be an absolute path, got {value!r}")
        if not self.workdir:
            object.__setattr__(self, "workdir", self.path or DEFAULT_WORKDIR)
        if not self.key:
            # Not the build context: the image's tag names its hash, and keys stay as they were.
            unkeyed = {"key", "build_context", "build_context_hash", "build_timeout_s"}
            if self.cpus is None:  # (keys of specs without stay what older ledgers hold)
                unkeyed.add("cpus")
            if self.capabilities == "none":  # likewise
                unkeyed.add("capabilities")
            blob = self.model_dump_json(exclude=unkeyed).encode()
            object.__setattr__(self, "key", hashlib.sha256(blob).hexdigest()[:16])
        return self

    def limits(self) -> dict[str, int]:
        """The per-workspace limits as the supervisor protocol names them."""
        named = {"pids": self.pids_limit, "memory_bytes": self.memory_bytes}
        named["disk_bytes"] = self.disk_bytes
        return {k: v for k, v in named.items() if v is not None}


class ExecResult(BaseModel):
    """What a command did. A non-zero `exit_code` is data; a signal is `-signum`."""

    model_config = ConfigDict(extra="forbid")

    exit_code: int
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float
    timed_out: bool = False
    report: bytes | None = Field(
        default=None,
        description="What the command's processes wrote to its report channel "
        "(`exec(report=True)`); None when it had none.",
    )
    report_truncated: bool = False
    report_writers: int = Field(
        default=0,
        description="How many processes wrote to the report channel (the kernel's count).",
    )

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class FileEntry(BaseModel):
    """One directory entry, not followed if it is a symlink."""

    model_config = ConfigDict(extra="forbid")

    name: str
    kind: Literal["file", "dir", "symlink", "other"]
    size: int


class SearchHit(BaseModel):
    """One line that matched: `path` relative to the workdir when under it, else absolute."""

    model_config = ConfigDict(extra="forbid")

    path: str
    line: int = Field(description="1-based line number.")
    text: str = Field(description="The line, clipped around the match when long.")


class SearchResult(BaseModel):
    """The first hits of a search and how many lines matched in all."""

    model_config = ConfigDict(extra="forbid")

    hits: list[SearchHit]
    total: int = Field(description="Every matching line, also those past the cap.")
    truncated: bool


class GlobResult(BaseModel):
    """The first paths a glob matched (sorted) and how many it matched in all."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(description="Relative to the workdir when under it, else absolute.")
    total: int
    truncated: bool


class _ClosedOnExit(ABC):
    """`async with x:` gives x and closes it (`aclose`) when the block ends."""

    @abstractmethod
    async def aclose(self) -> None:
        """Releases what it holds; idempotent."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        await self.aclose()


@dataclass(frozen=True)
class ExecRequest:
    """One command as `Workspace.exec` was given it, checked once for every backend.

    Raises (on construction):
        InvalidInput: the command is empty, a limit is not positive, or NUL where none may be.
    """

    cmd: str | Sequence[str]
    timeout: float
    stdin: bytes | str | None
    env: Mapping[str, str] | None
    cwd: str | None
    output_cap: int
    user: str | None
    report: bool

    def __post_init__(self) -> None:
        if not self.argv or (isinstance(self.cmd, str) and not self.cmd.strip()):
            raise errors.InvalidInput("the command is empty")
        if self.timeout <= 0 or self.output_cap <= 0:
            raise errors.InvalidInput("timeout and output_cap must be positive")
        if any("\0" in a for a in self.argv) or any(
            not k or "=" in k or "\0" in k or "\0" in v for k, v in self.variables.items()
        ):
            raise errors.InvalidInput("argv and env may not contain NUL; env names no '='")

    # Cached: the check above and the backend's request both read them (a frozen dataclass
    # still keeps a cached_property, which writes the instance's __dict__ directly).
    @functools.cached_property
    def argv(self) -> list[str]:
        """The program and its arguments (a string command runs by `/bin/sh -c`)."""
        cmd = self.cmd
        return ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else [str(a) for a in cmd]

    @functools.cached_property
    def variables(self) -> dict[str, str]:
        return dict(self.env or {})

    @property
    def input(self) -> bytes | None:
        """`stdin` as bytes."""
        return self.stdin.encode() if isinstance(self.stdin, str) else self.stdin


class Workspace(ABC):
    """A trajectory's private copy-on-write view of an instance.

    Paths are absolute inside the view or relative to the instance's workdir.
    """

    name: str
    #: The machine it lives on, for a backend that spans several (Ray's node id); else None.
    node: str | None = None

    async def exec(
        self,
        cmd: str | Sequence[str],
        *,
        timeout: float = 600.0,  # noqa: ASYNC109 (enforced inside the sandbox)
        stdin: bytes | str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        output_cap: int = 1 << 20,
        user: str | None = None,
        report: bool = False,
    ) -> ExecResult:
        """Runs a command (a string goes to `/bin/sh -c`) in the workspace's namespaces.

        It returns when the command exits: what the command left running (`cmd &`, nohup,
        setsid) keeps running until the workspace is destroyed or restored (or
        `end_processes`), and its output after that exit is not collected. Output beyond
        `output_cap` bytes per stream keeps its head and tail. On timeout the command's
        process group (what it started that did not leave the group) is killed and
        `timed_out` is set. `user` (a name or uid
        of the view's own /etc/passwd) runs it as that user, without capabilities; by default
        it runs as uid 0 with the few capabilities a workspace keeps.

        `report` gives the command a private report channel: the write end of a unix stream
        socket at file descriptor `REPORT_FD`, read to its end by the sandbox and returned as
        `ExecResult.report`, with `report_writers` the number of processes that wrote to it as
        the kernel counts them. No path in the view names it; a process holds it only by
        inheriting it. Strict grading sends pytest's report there.

        Raises:
            InvalidInput: empty command, `cwd` that does not exist in the view, or a `user`
                the view's /etc/passwd does not know.
            NotFound: the workspace was destroyed.
            Conflict: `report` on a backend that cannot give one (no supervisor).
            SandboxUnavailable: the instance is gone.
        """
        request = ExecRequest(cmd, timeout, stdin, env, cwd, output_cap, user, report)
        return await self._exec(request)

    @abstractmethod
    async def _exec(self, request: ExecRequest) -> ExecResult:
        """Runs a checked command: what `exec` says, as each backend does it (raises as it)."""

    @abstractmethod
    async def read_file(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        """Reads a regular file as the trajectory would.

        Raises:
            NotFound: no such file (or workspace).
            InvalidInput: not a regular file, or unreadable.
            LimitExceeded: the file is larger than `max_bytes`.
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def write_file(
        self, path: str, data: bytes | str, *, mode: int | None = None
    ) -> int | None:
        """Writes a file (creating parent directories) as the trajectory would.

        Returns the size in bytes of the file it replaced; None when there was none.

        Raises:
            InvalidInput: the path is read-only or a directory.
            NotFound: the workspace was destroyed.
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def list(self, path: str = ".") -> list[FileEntry]:
        """Lists a directory, sorted by name.

        Raises:
            NotFound: no such directory (or workspace).
            InvalidInput: not a directory.
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def search(
        self, pattern: str, *, path: str = ".", glob: str | None = None, max_hits: int = 200
    ) -> SearchResult:
        """Lines matching `pattern` (Python `re`, line by line) in the text files under `path`
        (a directory, or one file), as ripgrep finds them: `.git`, binary files (a NUL in the
        first 8 KB) and files over 2 MiB skipped, symlinks not followed in the walk; `glob`
        keeps the paths (relative to `path`) it matches, a glob without `/` at any depth.
        The first `max_hits` hits in walk order (names sorted), and the total.

        Read as the trajectory would, bounded in time: a pattern that backtracks forever
        ends in `Timeout`, never in a hung sandbox.

        Raises:
            InvalidInput: an invalid pattern (the message names the error and its position)
                or glob, or `max_hits` out of 1..100,000.
            NotFound: no such path (or workspace).
            Timeout: the search did not finish in time (30 s).
            LimitExceeded: the search ran out of its memory.
            Conflict: this backend cannot search (an image without python3).
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def glob(
        self, pattern: str = "**/*", *, path: str = ".", max_entries: int = 1000
    ) -> GlobResult:
        """What is under directory `path` (anything but directories) whose path relative to it
        matches `pattern` (`**` any depth, `*` and `?` within a name, `[...]`, `{a,b}`; without
        `/`, a name at any depth), sorted: the first `max_entries` and the total. `.git` is
        skipped and symlinks are listed, never followed.

        Raises:
            InvalidInput: a malformed glob, `path` not a directory, or `max_entries` out of
                1..100,000.
            NotFound: no such directory (or workspace).
            Timeout: the walk did not finish in time (30 s).
            Conflict: this backend cannot list (an image without python3).
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def diff(self) -> str:
        """A binary-safe `git diff` of everything changed since the instance's base commit.

        It applies with `git apply` to a fresh checkout of the base.

        Raises:
            Conflict: the workdir is not a git repository.
            LimitExceeded: the diff is larger than the transport allows.
            Timeout: git did not finish.
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def reset(self) -> None:
        """Kills running commands and discards every change.

        Every change since the instance froze, also in a fork or a workspace started from an
        archive: it becomes a fresh workspace of the task. To go back to where a fork began,
        `restore` the checkpoint it was forked at (a fork keeps its parent's checkpoints).

        Raises:
            NotFound: the workspace was destroyed.
            SandboxUnavailable: the instance is gone.
        """

    @abstractmethod
    async def end_processes(self) -> None:
        """Kills every process the workspace's commands left running; its files stay.

        What a command puts in the background (`server &`, nohup, setsid, a double fork)
        outlives its call, as in a container, until the workspace is destroyed or restored,
        or this: a grader calls it before it runs anything it trusts.

        Raises:
            Conflict: a command is running in it.
            NotFound: the workspace was destroyed.
            SandboxUnavailable: the instance is gone.
        """

    async def checkpoint(self) -> str:
        """Freezes the workspace's files as they are now; returns the checkpoint's id.

        Cheap whatever the workspace holds: the changes so far become a read-only layer and
        later writes go to a fresh one. Modes, symlinks, deletions and binary content are kept
        exactly; running processes are not part of a checkpoint: they keep running (the
        changes are then copied, not frozen in place), a fork starts without them and a
        restore ends them.

        Refused while a command runs: its writes would land in the layer being frozen (a
        lower layer that changes under a mounted overlay is undefined behaviour), and its
        processes could not follow the workspace onto its new upper.

        Raises:
            Conflict: a command is running in it (checkpoint when it returns, or cancel it),
                or this backend cannot checkpoint.
            SandboxUnavailable: the instance is gone.
        """
        raise errors.Conflict(f"workspaces of {type(self).__name__} cannot checkpoint or fork")

    async def restore(self, checkpoint: str) -> None:
        """Returns the files to checkpoint `checkpoint` (its own, or one it was forked with).

        Everything written after it is discarded; later checkpoints stay restorable.

        Raises:
            NotFound: no such checkpoint here (the message lists the known ones).
            Conflict: a command is running in it.
            SandboxUnavailable: the instance is gone.
        """
        raise errors.Conflict(f"workspaces of {type(self).__name__} cannot checkpoint or fork")

    async def fork(self, name: str, *, checkpoint: str | None = None) -> Workspace:
        """A new workspace `name` holding this one's files at `checkpoint` (None: now, through
        a new checkpoint of this one). Parent and fork never see each other's later writes;
        the fork may restore any checkpoint this one had.

        Raises:
            Conflict: `name` exists, or (no `checkpoint`) a command is running here.
            NotFound: no such checkpoint.
            SandboxUnavailable: the instance is gone.
        """
        raise errors.Conflict(f"workspaces of {type(self).__name__} cannot checkpoint or fork")

    async def export_checkpoint(self, checkpoint: str, *, max_bytes: int = 256 << 20) -> bytes:
        """Checkpoint `checkpoint` as an archive that outlives this workspace, its supervisor
        and its instance: `Instance.workspace_from_archive` on this instance, or on one
        provisioned anew from the same spec, starts a workspace with exactly these files.

        Costs about the size of what changed since the instance froze, not of the instance.

        Raises:
            NotFound: no such checkpoint here.
            LimitExceeded: the archive would be over `max_bytes`.
            Conflict: this backend cannot checkpoint.
            SandboxUnavailable: the instance is gone.
        """
        raise errors.Conflict(f"workspaces of {type(self).__name__} cannot checkpoint or fork")

    @abstractmethod
    async def destroy(self) -> None:
        """Kills running commands and removes the workspace; idempotent.

        A no-op when the workspace or its instance is already gone (nothing is left to
        remove), so `async with` never masks the error that ended the block.
        """

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        await self.destroy()


class FindsElsewhere(Workspace):
    """A workspace whose `search` and `glob` are one operation run where it lives (a
    container's own python3, a Ray node's workspace): it takes their arguments by name and
    answers their result's JSON. The forwarding, written once."""

    @abstractmethod
    async def _find(self, op: Literal["search", "glob"], **arguments: Any) -> Any:
        """`op` with `arguments`, run where the workspace lives; raises what `search` and
        `glob` say they raise."""

    async def search(
        self, pattern: str, *, path: str = ".", glob: str | None = None, max_hits: int = 200
    ) -> SearchResult:
        found = await self._find("search", pattern=pattern, path=path, glob=glob, max_hits=max_hits)
        return SearchResult.model_validate(found)

    async def glob(
        self, pattern: str = "**/*", *, path: str = ".", max_entries: int = 1000
    ) -> GlobResult:
        found = await self._find("glob", pattern=pattern, path=path, max_entries=max_entries)
        return GlobResult.model_validate(found)


class Instance(_ClosedOnExit):
    """A prepared, frozen environment shared by every workspace of one task."""

    spec: InstanceSpec

    @property
    @abstractmethod
    def base_commit(self) -> str | None:
        """The commit diffs are taken against (None if the workdir is not a git repo)."""

    @property
    def dead(self) -> str | None:
        """Why the instance can no longer serve (its supervisor, container or engine died), or
        None while it can. A dead instance stays dead: its users ask for a new one.
        """
        return None

    @abstractmethod
    async def workspace(self, name: str) -> Workspace:
        """Creates an empty copy-on-write workspace named `name` (e.g. a trajectory id).

        Raises:
            Conflict: a workspace of that name exists.
            InvalidInput: the name has a `/` or starts with `.`.
            SandboxUnavailable: the instance is gone.
        """

    async def workspace_from_archive(self, name: str, archive: bytes) -> Workspace:
        """Creates workspace `name` holding the files of an exported checkpoint
        (`Workspace.export_checkpoint`); it may `restore` the checkpoint its `info` names.

        Raises:
            Conflict: a workspace of that name exists, or this backend cannot checkpoint.
            InvalidInput: `archive` is not an exported checkpoint, or the name is not allowed.
            SandboxUnavailable: the instance is gone.
        """
        raise errors.Conflict(f"instances of {type(self).__name__} cannot checkpoint or fork")

    @abstractmethod
    async def aclose(self) -> None:
        """Destroys every workspace and releases the instance; idempotent."""


class Backend(_ClosedOnExit):
    """Provisions instances; used as `async with backend:` for the life of the server."""

    name: str

    @abstractmethod
    async def instance(self, spec: InstanceSpec) -> Instance:
        """Returns the instance for `spec.key`, provisioning and freezing it the first time.

        Raises:
            InvalidInput: the spec cannot run on this backend (e.g. `image` on `local`).
            InfrastructureError: setup failed.
            SandboxUnavailable: the backend cannot provision (no privileges, no engine).
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Releases every instance this backend provisioned."""

    def nodes(self) -> list[dict[str, Any]] | None:
        """Per machine: its instances, workspaces and commands in flight (None: one machine)."""
        return None
