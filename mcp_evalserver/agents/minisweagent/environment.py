"""mini-swe-agent's `Environment` over one of our workspaces: the sync side of the bridge.

mini-swe-agent is synchronous (its agent loop and model calls block a thread); our workspaces
are async. `WorkspaceEnvironment` runs in mini-swe-agent's thread and hands each command to the
event loop through `call` (`anyio.from_thread.run` inside a campaign, a blocking portal's `call`
in the `EvalserverEnvironment` integration), so commands run in the copy-on-write workspace
while the loop stays free.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import anyio
from pydantic import BaseModel, ConfigDict, Field

from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime import tracing
from mcp_evalserver.sandbox.base import ExecResult, Workspace

_T = TypeVar("_T")

#: The line mini-swe-agent's prompts ask the model to print first to hand in its work.
SUBMIT_LINE = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: Seconds the event loop may take beyond a command's own timeout (enforced in the sandbox)
#: before the waiting thread gives up on it.
_GRACE_S = 30.0


class LoopCall(Protocol):
    """Runs a coroutine function on the event loop from a worker thread and returns its result."""

    def __call__(self, func: Callable[..., Awaitable[_T]], /, *args: Any) -> _T: ...


class Stopped(Exception):
    """The trajectory this environment serves has ended; mini-swe-agent's loop must stop."""


def import_minisweagent() -> None:
    """Imports mini-swe-agent quietly (no banner on stdout, which may be an MCP stdio wire) and
    offline.

    Raises:
        InvalidInput: mini-swe-agent is not installed; the message says how to install it.
    """
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    # litellm would fetch its price table from the internet on import (and wait for it where
    # there is none): the table it ships prices the calls, the same on every run.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    try:
        import minisweagent  # noqa: F401
    except ImportError as exc:
        raise InvalidInput(
            "mini-swe-agent is not installed: `pip install 'mcp-evalserver[minisweagent]'`"
        ) from exc


class WorkspaceEnvironmentConfig(BaseModel):
    """The `environment` section mini-swe-agent passes: LocalEnvironment's fields, same meaning."""

    model_config = ConfigDict(extra="forbid")

    cwd: str = Field("", description="Where commands start; default the workspace's workdir.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")
    timeout: int = Field(30, gt=0, description="Seconds per command; then it is killed.")
    output_cap: int = Field(1 << 20, gt=0, description="Bytes kept per stream (head and tail).")


class WorkspaceEnvironment:
    """Implements mini-swe-agent's `Environment` protocol on a workspace, from a worker thread."""

    def __init__(
        self, workspace: Workspace, call: LoopCall, config: WorkspaceEnvironmentConfig
    ) -> None:
        self.workspace = workspace
        self.config = config
        self._call = call
        #: Set when the trajectory ends (timeout, cancellation): the next command refuses.
        self.stopped = threading.Event()

    def execute(
        self, action: dict[str, Any], cwd: str = "", *, timeout: int | None = None
    ) -> dict[str, Any]:
        """Runs `action["command"]` with `/bin/sh -c` in the workspace, as LocalEnvironment does.

        Raises:
            Submitted: the output's first line is the submit line and the command succeeded.
            Stopped: the trajectory has ended.
        """
        if self.stopped.is_set():
            raise Stopped("the trajectory ended; no more commands run in its workspace")
        from minisweagent.exceptions import Submitted

        limit = timeout or self.config.timeout
        result = self._call(self._exec, action.get("command", ""), cwd or self.config.cwd, limit)
        output = {
            "output": result.stdout + result.stderr,
            "returncode": result.exit_code,
            "exception_info": "",
        }
        if result.timed_out:
            output["returncode"] = -1
            output["exception_info"] = (
                f"An error occurred while executing the command: timed out after {limit} s"
            )
            output["extra"] = {"exception_type": "TimeoutExpired"}
        submission = submitted(output)
        if submission is not None:
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )
        return output

    async def _exec(self, command: str, cwd: str, timeout: int) -> ExecResult:  # noqa: ASYNC109

        # The sandbox enforces `timeout`; this bounds a sandbox that stops answering.
        with (
            tracing.tool("bash", arguments={"command": command}) as span,
            anyio.fail_after(timeout + _GRACE_S),
        ):
            result = await self.workspace.exec(
                command,
                timeout=timeout,
                cwd=cwd or None,
                env=self.config.env or None,
                output_cap=self.config.output_cap,
            )
            tracing.command_result(
                span, result.exit_code, result.duration_s, timed_out=result.timed_out
            )
            tracing.tool_result(span, result.stdout + result.stderr)
            return result

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """What mini-swe-agent's templates may name: the config and the system (`uname`)."""
        uname = {"system": "Linux", "release": "", "version": "", "machine": ""}
        return {**self.config.model_dump(), **uname, **kwargs}

    def serialize(self) -> dict[str, Any]:
        kind = type(self)
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{kind.__module__}.{kind.__qualname__}",
                }
            }
        }


def submitted(output: dict[str, Any]) -> str | None:
    """What a command hands in, as mini-swe-agent's LocalEnvironment decides it: the output
    after a first line that is the submit line, from a command that exited 0; else None."""
    lines = output.get("output", "").lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() == SUBMIT_LINE and output["returncode"] == 0:
        return "".join(lines[1:])
    return None
