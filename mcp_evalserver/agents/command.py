"""The `command` agent: a user's program, run once per trajectory, acting through MCP.

For each trajectory it has an MCP endpoint served (streamable HTTP on 127.0.0.1, a random port
and a fresh bearer token) whose tools reach that trajectory's workspace only, then runs the
program with the endpoint and the task in its environment (the least one: see
`program_environment`). The endpoint comes from a factory
handed in where the server is assembled (`server.trajectory_endpoint`): agents never import the
protocol layer. What the program submits is the submission;
a program that exits 0 without submitting hands in its workspace's diff, and one that exits
otherwise without submitting is the trajectory's error. The program runs in a process group of
its own, killed when the program exits (no leftover children) or the trajectory times out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

import anyio
import anyio.abc

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.errors import Conflict, EvalServerError, InvalidInput
from mcp_evalserver.runtime import tracing
from mcp_evalserver.runtime.endpoints import BASE_URL_ENV
from mcp_evalserver.spec.agents import CommandAgentConfig
from mcp_evalserver.spec.submission import Submission

#: What every program gets of the server's environment: where to find programs, a home, a
#: locale, and where model calls go by the one endpoint rule (`runtime/endpoints.py`).
BASE_VARIABLES = ("PATH", "HOME", "LANG", BASE_URL_ENV)
#: What the transcript keeps of each of the program's output streams (head and tail).
OUTPUT_CAP = 64 << 10
# After the program exits, how long its output pipes may stay open (a child that left its
# process group can hold them) before the output is taken as it is.
_DRAIN_GRACE_S = 5.0
#: How long a program may keep running after it submitted; then its process group is killed
#: and the submission stands (a program that lingers must not turn its work into a timeout).
EXIT_GRACE_S = 10.0


class ProgramFailed(EvalServerError):
    """The agent program exited with a non-zero status without submitting."""


class _Output:
    """A stream's bytes, capped: the head and the tail are kept, the middle counted."""

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        self.head += chunk[:room]
        self.tail += chunk[room:]
        if len(self.tail) > self.half:
            del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        skipped = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {skipped} bytes left out ...]\n" if skipped else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")


class TrajectoryEndpoint(Protocol):
    """One trajectory's MCP endpoint while it is served."""

    @property
    def url(self) -> str:
        """Where the program reaches it."""
        ...

    @property
    def token(self) -> str:
        """The bearer token it accepts (this trajectory's only)."""
        ...

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The tool calls made through it, for the transcript."""
        ...

    @property
    def submission(self) -> Submission | None:
        """What the program submitted, if it did."""
        ...

    @property
    def submitted(self) -> anyio.Event:
        """Set once the program has submitted."""
        ...


#: Serves a trajectory's endpoint for the life of the `async with`.
EndpointFactory = Callable[[TrajectoryContext], AbstractAsyncContextManager[TrajectoryEndpoint]]


class CommandAgent(Agent):
    """Runs the configured program once per trajectory."""

    def __init__(self, config: CommandAgentConfig, endpoints: EndpointFactory) -> None:
        self.config = config
        self.endpoints = endpoints

    async def generate(self, context: TrajectoryContext) -> Submission:
        """Has the trajectory's endpoint served, runs the program, returns what it handed in.

        Raises:
            ProgramFailed: the program exited non-zero without submitting.
            InvalidInput: the program cannot be started (not found, not executable).
            InfrastructureError: the sandbox is gone (when handing in the workspace's diff).
        """
        async with self.endpoints(context) as endpoint:
            exit_code, stdout, stderr = await self._run(context, endpoint)
        transcript: list[dict[str, Any]] = [
            {"event": "started", "command": self.config.command, "url": endpoint.url},
            *endpoint.calls,
            {"event": "exited", "exit_code": exit_code, "stdout": stdout, "stderr": stderr},
        ]
        if endpoint.submission is not None:
            return endpoint.submission.model_copy(update={"transcript": transcript})
        if exit_code != 0:
            raise ProgramFailed(
                f"the agent program exited with status {exit_code} without submitting; "
                f"its stderr ends with: {stderr[-2000:]}"
            )
        transcript.append({"event": "handed_in_unsubmitted"})
        return Submission(patch=await _workspace_diff(context), transcript=transcript)

    async def _run(
        self, context: TrajectoryContext, endpoint: TrajectoryEndpoint
    ) -> tuple[int, str, str]:
        """Runs the program to its end; returns its exit status and its (capped) output.

        Raises:
            InvalidInput: the program cannot be started.
        """
        with tempfile.TemporaryDirectory(prefix="mcp-evalserver-command-") as scratch:
            prompt_file = Path(scratch, "prompt.txt")
            await anyio.Path(prompt_file).write_text(context.task.prompt)
            env = _environment(context, endpoint, prompt_file, self.config)
            stdout, stderr = _Output(), _Output()
            try:
                process = await anyio.open_process(
                    self.config.command,
                    env=env,
                    cwd=self.config.cwd,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as exc:
                raise _not_started(self.config.command, exc) from exc
            drained = (anyio.Event(), anyio.Event())
            try:
                async with anyio.create_task_group() as group:
                    assert process.stdout is not None
                    assert process.stderr is not None
                    group.start_soon(_drain, process.stdout, stdout, drained[0])
                    group.start_soon(_drain, process.stderr, stderr, drained[1])
                    group.start_soon(_stop_after_submit, endpoint, process.pid)
                    exit_code = await process.wait()
                    _kill_group(process.pid)
                    with anyio.move_on_after(_DRAIN_GRACE_S):
                        for event in drained:
                            await event.wait()
                    group.cancel_scope.cancel()
            finally:
                with anyio.CancelScope(shield=True):
                    _kill_group(process.pid)
                    await process.aclose()
        return exit_code, stdout.text(), stderr.text()


def program_environment(passed: Sequence[str], extra: Mapping[str, str]) -> dict[str, str]:
    """What a program the server starts gets of the server's environment: `BASE_VARIABLES`
    and the variables `passed` names (those set), then `extra` (the spec's values), then the
    current trajectory's `TRACEPARENT` when it is traced. Never the rest: API keys, OTLP
    exporter headers and the server's token stay with the server."""
    names = [*BASE_VARIABLES, *passed]
    inherited = {name: os.environ[name] for name in names if name in os.environ}
    parent = tracing.traceparent()
    return {**inherited, **extra, **({"TRACEPARENT": parent} if parent else {})}


def _environment(
    context: TrajectoryContext,
    endpoint: TrajectoryEndpoint,
    prompt_file: Path,
    config: CommandAgentConfig,
) -> dict[str, str]:
    # The trajectory's own variables last: the program must never see the main server's
    # token, only its trajectory's, whatever the spec says.
    return {
        **program_environment(config.pass_env, config.env),
        "MCP_EVALSERVER_URL": endpoint.url,
        "MCP_EVALSERVER_TOKEN": endpoint.token,
        "MCP_EVALSERVER_CAMPAIGN": context.campaign_id,
        "MCP_EVALSERVER_TRAJECTORY": context.trajectory_id,
        "MCP_EVALSERVER_ATTEMPT": str(context.attempt),
        "MCP_EVALSERVER_IDEMPOTENCY_KEY": context.idempotency_key,
        "MCP_EVALSERVER_TASK_ID": context.task.id,
        "MCP_EVALSERVER_PROMPT": context.task.prompt,
        "MCP_EVALSERVER_PROMPT_FILE": str(prompt_file),
    }


async def _stop_after_submit(endpoint: TrajectoryEndpoint, pid: int) -> None:
    await endpoint.submitted.wait()
    await anyio.sleep(EXIT_GRACE_S)
    _kill_group(pid)


async def _drain(stream: anyio.abc.ByteReceiveStream, output: _Output, done: anyio.Event) -> None:
    try:
        async for chunk in stream:
            output.add(chunk)
    finally:
        done.set()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _not_started(command: list[str] | str, exc: OSError) -> InvalidInput:
    return InvalidInput(f"cannot start the agent program {command!r}: {exc.strerror or exc}")


async def _workspace_diff(context: TrajectoryContext) -> str | None:
    if not context.sandbox.available:
        return None
    try:
        return await (await context.sandbox.workspace()).diff() or None
    except Conflict:
        return None  # not a git repository: there is no patch to hand in
