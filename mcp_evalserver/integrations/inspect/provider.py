"""`evalserver`: an Inspect sandbox environment whose samples are copy-on-write workspaces.

`task_init` provisions the instance the config names (once per task, shared by its samples);
`sample_init` gives each sample a workspace of it; `sample_cleanup` destroys the workspace and
`task_cleanup` the instance. `exec`, `read_file` and `write_file` keep Inspect's contract
(`SandboxEnvironment`'s docstrings): its exceptions, its output limits, exit codes as a shell
reports them (128 + signal), text and bytes.
"""

from __future__ import annotations

import errno
import logging
import os
import shlex
from typing import Any, Literal, overload

import anyio
from inspect_ai.util import (
    ExecResult,
    OutputLimitExceededError,
    SandboxConnection,
    SandboxEnvironment,
    SandboxEnvironmentConfigType,
    SandboxEnvironmentLimits,
    SandboxUnavailableError,
    sandboxenv,
)
from pydantic import BaseModel
from typing_extensions import override

from mcp_evalserver import errors
from mcp_evalserver.integrations.inspect.config import EvalServerSandboxConfig, load_config
from mcp_evalserver.integrations.inspect.hosting import HostedInstance, host, release
from mcp_evalserver.sandbox.base import Workspace

log = logging.getLogger(__name__)

# Inspect's `timeout=None` means no limit; the sandbox always has one, so: a day.
NO_TIMEOUT_S = 24 * 3600.0
CONFIG_FILE = "evalserver.yaml"
# What the supervisor prints when execve itself fails (the command never ran).
_EXEC_FAILED = "sandbox: cannot run "
_FILE_ERRORS: dict[str, type[OSError]] = {
    "ENOENT": FileNotFoundError,
    "ENOTDIR": FileNotFoundError,
    "EACCES": PermissionError,
    "EPERM": PermissionError,
    "EROFS": PermissionError,
    "EISDIR": IsADirectoryError,
}


@sandboxenv(name="evalserver")
class EvalServerSandboxEnvironment(SandboxEnvironment):
    """One sample's workspace: a private copy-on-write view of its task's shared instance."""

    def __init__(self, workspace: Workspace, hosted: HostedInstance) -> None:
        super().__init__()
        self.workspace = workspace
        self._hosted = hosted

    # -- lifecycle --
    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return EvalServerSandboxConfig.model_validate(config)

    @classmethod
    def config_files(cls) -> list[str]:
        """`sandbox="evalserver"` alone uses this file of the task's directory."""
        return [CONFIG_FILE]

    @override
    @classmethod
    async def task_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None) -> None:
        await host(task_name, _config(task_name, config))

    @override
    @classmethod
    async def sample_init(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        metadata: dict[str, str],
    ) -> dict[str, SandboxEnvironment]:
        hosted = await host(task_name, _config(task_name, config))
        return {"default": cls(await hosted.workspace(), hosted)}

    @override
    @classmethod
    async def sample_cleanup(
        cls,
        task_name: str,
        config: SandboxEnvironmentConfigType | None,
        environments: dict[str, SandboxEnvironment],
        interrupted: bool,
    ) -> None:
        for environment in environments.values():
            with anyio.CancelScope(shield=True):
                await environment.as_type(cls).workspace.destroy()

    @override
    @classmethod
    async def task_cleanup(
        cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool
    ) -> None:
        # Workspaces and local instances live in this process: there is nothing to keep
        # for `--no-sandbox-cleanup` once it exits, so the instance always goes.
        await release(task_name, _config(task_name, config))
        if isinstance(config, str):
            _loaded.pop((task_name, config), None)

    # -- commands and files --
    @override
    async def exec(
        self,
        cmd: list[str],
        input: str | bytes | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        timeout: int | None = None,  # enforced inside the sandbox
        timeout_retry: bool = True,  # a timeout here is the command's, never a transport hiccup
        concurrency: bool = True,
    ) -> ExecResult[str]:
        limit = SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE
        try:
            result = await self.workspace.exec(
                list(cmd),
                timeout=float(timeout) if timeout else NO_TIMEOUT_S,
                stdin=input,
                env=env,
                cwd=cwd,
                output_cap=limit,
                user=user,
            )
        except errors.InvalidInput as exc:
            # A user the view does not know, a cwd that does not exist: the command's failure,
            # reported as `docker exec` does (exit 126, the reason on stderr).
            return ExecResult(success=False, returncode=126, stdout="", stderr=f"{exc}\n")
        except errors.Timeout as exc:
            raise TimeoutError(str(exc)) from exc
        except errors.EvalServerError as exc:  # workspace or instance gone
            raise SandboxUnavailableError(f"evalserver sandbox: {exc}") from exc
        if result.timed_out:
            error = TimeoutError(f"Command timed out after {timeout} seconds")
            error.truncated_output = result.stdout + result.stderr  # type: ignore[attr-defined]
            raise error
        if result.stdout_truncated or result.stderr_truncated:
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_EXEC_OUTPUT_SIZE_STR,
                truncated_output=result.stdout if result.stdout_truncated else result.stderr,
            )
        if (
            result.exit_code == 126
            and result.stderr.startswith(_EXEC_FAILED)
            and "Permission denied" in result.stderr
        ):
            raise PermissionError(errno.EACCES, "Permission denied", cmd[0] if cmd else "")
        code = result.exit_code if result.exit_code >= 0 else 128 - result.exit_code
        return ExecResult(
            success=code == 0, returncode=code, stdout=result.stdout, stderr=result.stderr
        )

    @override
    async def write_file(self, file: str, contents: str | bytes) -> None:
        try:
            await self.workspace.write_file(file, contents)
        except errors.EvalServerError as exc:
            raise _file_error(exc, file) from exc

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    @override
    async def read_file(self, file: str, text: bool = True) -> str | bytes:
        try:
            data = await self.workspace.read_file(
                file, max_bytes=SandboxEnvironmentLimits.MAX_READ_FILE_SIZE
            )
        except errors.LimitExceeded as exc:
            raise OutputLimitExceededError(
                SandboxEnvironmentLimits.MAX_READ_FILE_SIZE_STR, truncated_output=None
            ) from exc
        except errors.EvalServerError as exc:
            raise _file_error(exc, file) from exc
        # Newlines stay as they are (Inspect asks for `newline=""` semantics).
        return data.decode("utf-8") if text else data

    @override
    async def connection(self, *, user: str | None = None) -> SandboxConnection:
        """A root shell in this sample's view (the operator's: no caps dropped, no seccomp).

        Raises:
            NotImplementedError: the instance does not report its workspaces' holders.
            ConnectionError: the workspace is gone.
        """
        info: dict[str, Any] = getattr(self.workspace, "info", {})
        pid, root = info.get("holder_pid"), info.get("root")
        if not pid or not root:
            raise NotImplementedError("this evalserver instance offers no connection")
        instance = self._hosted.instance
        if instance is None:
            raise ConnectionError("the evalserver instance is gone")
        workdir = instance.spec.workdir
        shell = f"cd {shlex.quote(workdir)} 2>/dev/null; exec bash -l 2>/dev/null || exec sh"
        login = ["su", "-", user, "-s", "/bin/sh", "-c", shell] if user else ["sh", "-c", shell]
        enter = ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "chroot", root, *login]
        container = getattr(instance, "info", {}).get("container")
        if container:
            return SandboxConnection(
                type="evalserver",
                command=shlex.join(["docker", "exec", "-it", str(container), *enter]),
                container=str(container),
            )
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        return SandboxConnection(type="evalserver", command=shlex.join([*sudo, *enter]))


_loaded: dict[tuple[str, str], EvalServerSandboxConfig] = {}


def _config(task_name: str, config: SandboxEnvironmentConfigType | None) -> EvalServerSandboxConfig:
    """The task's config; a file is read once per task, at `task_init`.

    Inspect calls `task_init` from the task's directory, where a relative file name resolves,
    but the other hooks from wherever it runs.
    """
    if not isinstance(config, str):
        return load_config(config)
    if (task_name, config) not in _loaded:
        _loaded[task_name, config] = load_config(config)
    return _loaded[task_name, config]


def _file_error(exc: errors.EvalServerError, file: str) -> Exception:
    """The OSError Inspect's contract names for a failed file operation, else unavailable."""
    if isinstance(exc, errors.Timeout):
        return TimeoutError(f"{file}: {exc}")
    kind = _FILE_ERRORS.get(exc.errno_name or "")
    if kind is None and isinstance(exc, errors.InvalidInput) and "is a directory" in str(exc):
        kind = IsADirectoryError  # the supervisor refuses directories before any syscall
    if kind is not None:
        code = getattr(errno, exc.errno_name or "", errno.EISDIR)
        return kind(code, os.strerror(code), file)
    if isinstance(exc, errors.InvalidInput):
        return OSError(errno.EINVAL, str(exc), file)
    return SandboxUnavailableError(f"evalserver sandbox: {exc}")
