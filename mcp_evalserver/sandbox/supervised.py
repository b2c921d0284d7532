"""`Instance` and `Workspace` implemented over a `SupervisorClient`: shared by every backend.

A backend provisions whatever hosts the supervisor, opens a byte stream to it, and calls
`SupervisedInstance.open`; exec, files, diffs, limits and isolation are the supervisor's.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal

from mcp_evalserver import errors
from mcp_evalserver.sandbox.base import (
    ExecRequest,
    ExecResult,
    FileEntry,
    GlobResult,
    Instance,
    InstanceSpec,
    SearchResult,
    Workspace,
)
from mcp_evalserver.sandbox.client import BlockingConnection, SupervisorClient
from mcp_evalserver.sandbox.supervisor import finder
from mcp_evalserver.sandbox.supervisor.protocol import Op

# How long past a command's own timeout we wait for the supervisor before calling it lost.
REPLY_GRACE_S = 30.0
FILE_OP_TIMEOUT_S = 60.0
SEARCH_TIMEOUT_S = float(finder.TIMEOUT_S)  # a pattern may backtrack forever: killed then
CHECKPOINT_TIMEOUT_S = 300.0  # a checkpoint that squashes a deep chain copies its old layers


def exec_args(request: ExecRequest) -> dict[str, Any]:
    """The supervisor's `exec` arguments for a checked command."""
    data = request.input
    return {
        "argv": request.argv,
        "env": request.variables,
        "cwd": request.cwd,
        "stdin_b64": base64.b64encode(data).decode() if data else None,
        "timeout": request.timeout,
        "output_cap": request.output_cap,
        "user": request.user,
        **({"report": True} if request.report else {}),
    }


def exec_result(result: Mapping[str, Any]) -> ExecResult:
    """A workspace's `ExecResult` from the supervisor's `exec` reply."""
    return ExecResult(
        exit_code=int(result["exit_code"]),
        stdout=result["stdout"].decode(errors="replace"),  # raw, not base64 (Reply.raw)
        stderr=result["stderr"].decode(errors="replace"),
        stdout_truncated=bool(result["stdout_truncated"]),
        stderr_truncated=bool(result["stderr_truncated"]),
        duration_s=float(result["duration_s"]),
        timed_out=bool(result["timed_out"]),
        report=result.get("report"),
        report_truncated=bool(result.get("report_truncated")),
        report_writers=int(result.get("report_writers") or 0),
    )


class SupervisedInstance(Instance):
    """An instance whose supervisor answers on `client`."""

    def __init__(
        self,
        client: SupervisorClient,
        spec: InstanceSpec,
        base_commit: str | None,
        info: Mapping[str, Any],
        on_close: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.spec = spec
        self.client = client
        self.info = dict(info)  # supervisor version, python, cgroups, which limits are enforced
        self._base = base_commit
        self._on_close = on_close
        self._closed = False

    @classmethod
    async def open(
        cls,
        client: SupervisorClient,
        spec: InstanceSpec,
        *,
        mode: Literal["host", "container"],
        store: str,
        store_tmpfs: bool = False,
        run_setup: bool = True,
        on_close: Callable[[], Awaitable[None]] | None = None,
        holder: str | None = None,
        extra_paths: Sequence[Mapping[str, object]] = (),
    ) -> SupervisedInstance:
        """Initialises a started supervisor, runs the spec's setup and freezes the instance.

        `holder` is the compiled holder's path where the supervisor runs (native.py), or
        None for its Python one. `store` holds the workspaces' upper layers and must not be
        on overlayfs; with
        `store_tmpfs` the supervisor mounts a private tmpfs there itself. `run_setup=False`
        freezes without the spec's setup (it already ran on this environment). `extra_paths`
        are host paths shown besides the spec's own (host mode), not part of its key.

        Raises:
            InvalidInput: the supervisor refused the spec.
            InfrastructureError: setup failed (the message ends with its output).
            SandboxUnavailable: the supervisor died or cannot create namespaces here.
        """
        info = await client.request(
            "init",
            reply_timeout=60,
            mode=mode,
            store=store,
            store_tmpfs=store_tmpfs,
            instance=spec.path or "/",
            workdir=spec.workdir,
            paths=[entry.model_dump() for entry in spec.paths] + [dict(p) for p in extra_paths],
            network=spec.network,
            capabilities=spec.capabilities,
            holder=holder,
        )
        frozen = await client.request(
            "freeze",
            reply_timeout=spec.setup_timeout_s + REPLY_GRACE_S,
            setup=list(spec.setup) if run_setup else [],
            timeout=spec.setup_timeout_s,
        )
        return cls(client, spec, frozen.get("base"), info, on_close)

    @property
    def base_commit(self) -> str | None:
        return self._base

    @property
    def dead(self) -> str | None:
        if self._closed:
            return "the instance was closed"
        return self.client.dead

    async def workspace(self, name: str) -> SupervisedWorkspace:
        limits = self.spec.limits()
        info = await self.client.request("ws_create", reply_timeout=60, ws=name, limits=limits)
        return SupervisedWorkspace(self, name, info)

    async def workspace_from_archive(self, name: str, archive: bytes) -> SupervisedWorkspace:
        limits = self.spec.limits()
        info = await self.client.request(
            "ws_create",
            reply_timeout=CHECKPOINT_TIMEOUT_S,
            ws=name,
            limits=limits,
            start_b64=base64.b64encode(archive).decode(),
        )
        return SupervisedWorkspace(self, name, info)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.client.alive:
                await self.client.request("shutdown", reply_timeout=30)
        except errors.EvalServerError:
            pass  # it is going away either way
        finally:
            await self.client.aclose()
            if self._on_close is not None:
                await self._on_close()


class SupervisedWorkspace(Workspace):
    """One workspace of a `SupervisedInstance`."""

    def __init__(
        self, instance: SupervisedInstance, name: str, info: Mapping[str, Any] | None = None
    ) -> None:
        self.instance = instance
        self.client = instance.client
        self.name = name
        self.info = dict(info or {})  # holder_pid and root: where an operator's shell enters

    async def _call(self, op: Op, reply_timeout: float, **args: Any) -> dict[str, Any]:
        return await self.client.request(op, reply_timeout=reply_timeout, ws=self.name, **args)

    async def _exec(self, request: ExecRequest) -> ExecResult:
        reply_timeout = request.timeout + REPLY_GRACE_S
        return exec_result(await self._call("exec", reply_timeout, **exec_args(request)))

    def exec_on(self, connection: BlockingConnection, request: ExecRequest) -> ExecResult:
        """`exec` over a connection of the caller's own, blocking its thread (ray_node.py)."""
        reply_timeout = request.timeout + REPLY_GRACE_S
        args = exec_args(request)
        return exec_result(connection.request("exec", reply_timeout, ws=self.name, **args))

    async def read_file(self, path: str, *, max_bytes: int = 16 << 20) -> bytes:
        result = await self._call("read", FILE_OP_TIMEOUT_S, path=path, max_bytes=max_bytes)
        data: bytes = result["data"]  # raw, not base64 (protocol.Reply.raw)
        return data

    async def write_file(
        self, path: str, data: bytes | str, *, mode: int | None = None
    ) -> int | None:
        raw = data.encode() if isinstance(data, str) else data
        encoded = base64.b64encode(raw).decode()
        result = await self._call(
            "write", FILE_OP_TIMEOUT_S, path=path, data_b64=encoded, mode=mode
        )
        previous: int | None = result.get("previous_bytes")
        return previous

    async def list(self, path: str = ".") -> list[FileEntry]:
        result = await self._call("list", FILE_OP_TIMEOUT_S, path=path)
        return [FileEntry.model_validate(e) for e in result["entries"]]

    async def search(
        self, pattern: str, *, path: str = ".", glob: str | None = None, max_hits: int = 200
    ) -> SearchResult:
        result = await self._call(
            "search",
            SEARCH_TIMEOUT_S + REPLY_GRACE_S,
            pattern=pattern,
            path=path,
            glob=glob,
            max_hits=max_hits,
            timeout=SEARCH_TIMEOUT_S,
        )
        return SearchResult.model_validate(result)

    async def glob(
        self, pattern: str = "**/*", *, path: str = ".", max_entries: int = 1000
    ) -> GlobResult:
        result = await self._call(
            "glob",
            SEARCH_TIMEOUT_S + REPLY_GRACE_S,
            pattern=pattern,
            path=path,
            max_entries=max_entries,
            timeout=SEARCH_TIMEOUT_S,
        )
        return GlobResult.model_validate(result)

    async def diff(self) -> str:
        """The patch as text; `.encode("utf-8", "surrogateescape")` gives git's exact bytes."""
        result = await self._call("diff", 300 + REPLY_GRACE_S, timeout=300)
        patch: bytes = result["patch"]
        return patch.decode("utf-8", "surrogateescape")

    async def reset(self) -> None:
        await self._call("ws_reset", 60)

    async def checkpoint(self) -> str:
        result = await self._call("ws_checkpoint", CHECKPOINT_TIMEOUT_S)
        self.info["holder_pid"] = result["holder_pid"]  # a new holder mounts the new stack
        return str(result["checkpoint"])

    async def restore(self, checkpoint: str) -> None:
        result = await self._call("ws_restore", CHECKPOINT_TIMEOUT_S, checkpoint=checkpoint)
        self.info["holder_pid"] = result["holder_pid"]

    async def end_processes(self) -> None:
        await self._call("ws_end_processes", 60)

    async def fork(self, name: str, *, checkpoint: str | None = None) -> SupervisedWorkspace:
        info = await self._call("ws_fork", CHECKPOINT_TIMEOUT_S, name=name, checkpoint=checkpoint)
        self.info["holder_pid"] = info.pop("parent_holder_pid", self.info.get("holder_pid"))
        return SupervisedWorkspace(self.instance, name, info)

    async def export_checkpoint(self, checkpoint: str, *, max_bytes: int = 256 << 20) -> bytes:
        result = await self._call(
            "ws_export", CHECKPOINT_TIMEOUT_S, checkpoint=checkpoint, max_bytes=max_bytes
        )
        archive: bytes = result["archive"]
        return archive

    async def destroy(self) -> None:
        """Removes the workspace; a no-op if it or its instance is already gone."""
        if not self.client.alive:
            return
        with contextlib.suppress(errors.NotFound, errors.SandboxUnavailable):
            await self._call("ws_destroy", 60)


class AttachedWorkspace(SupervisedWorkspace):
    """A workspace another process made and owns, reached over a connection of this
    process's own (`SupervisorClient.pass_connection`): exec, files, diffs and checkpoints,
    never its lifecycle (fork, destroy) nor its instance."""

    def __init__(self, client: SupervisorClient, name: str) -> None:
        self.client = client
        self.name = name
        self.info = {}

    async def fork(self, name: str, *, checkpoint: str | None = None) -> SupervisedWorkspace:
        raise errors.Conflict("a workspace of another process cannot be forked here")

    async def destroy(self) -> None:
        raise errors.Conflict("a workspace of another process cannot be destroyed here")
