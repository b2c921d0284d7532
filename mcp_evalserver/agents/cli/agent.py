"""The CLI agents (`claude-code`, `codex`, `gemini-cli`, `opencode`): the real CLI inside the
trajectory's workspace.

Per attempt: the pinned Node runtime and CLI package are made sure of in the cache (installed
on first use), a model bridge is served for this attempt alone (`bridge.py`), and one exec in
the workspace starts the bridge's forwarder and then the CLI in print / exec mode with the
task's prompt and its deadline. The CLI works with its own tools (shell, edit, ...); what the
workspace holds when it stops is handed in as the patch. Its own session log is read back and
converted into the transcript's messages; the raw log is kept in the transcript too. The tool
calls the `trajectory` scorer judges are the bridge's record, not that log (the agent can
rewrite a file in its workspace, not what the provider streamed through the bridge).

Failures apart: a CLI that cannot start (no runtime, unknown version, npm unreachable with an
empty cache) is `CliUnavailable`, an infrastructure error saying how to install offline; a
CLI that exits non-zero (a crash, out of turns) is `CliFailed`, the trajectory's error, with its
stderr; a budget spent mid-run stops the CLI and ends the trajectory `budget_exhausted`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.agents.base import Agent, TrajectoryContext
from mcp_evalserver.agents.cli import packages
from mcp_evalserver.agents.cli.bridge import ModelBridge, serving
from mcp_evalserver.agents.cli.programs import BRIDGE_PORT, HOME, PROGRAMS
from mcp_evalserver.errors import Conflict, EvalServerError, InvalidInput, NotFound
from mcp_evalserver.runtime.endpoints import PROVIDERS, model_endpoint
from mcp_evalserver.sandbox.agent_paths import VIEW_AGENTS, in_view
from mcp_evalserver.sandbox.base import ExecResult, Workspace
from mcp_evalserver.sandbox.ray import RayWorkspace, driver_address
from mcp_evalserver.spec.agents import CliAgentConfig
from mcp_evalserver.spec.submission import Submission
from mcp_evalserver.spec.transcript_checks import MODEL_BRIDGE

#: Where the wrapper leaves the CLI's session log for the agent to read back.
SESSION_COPY = "/tmp/.mcp-evalserver-session.jsonl"
#: The wrapper's exit status when the forwarder did not start.
FORWARDER_FAILED = 97
#: How much of the CLI's stdout and stderr the transcript and errors keep (tail).
OUTPUT_TAIL = 8000
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# $1 forwarder, $2 socket, $3 port, then the CLI's argv. The session log is copied where the
# agent reads it whatever the CLI's status.
_WRAPPER = f"""python3 "$1" "$2" "$3" || {{ echo "mcp-evalserver: the model bridge's forwarder \
did not start" >&2; exit {FORWARDER_FAILED}; }}
shift 3
{{setup}}
"$@"
status=$?
{{dump}} > {SESSION_COPY} 2>/dev/null
exit $status
"""


class CliFailed(EvalServerError):
    """The CLI exited non-zero: it crashed, or ran out of turns. The trajectory's error."""


def endpoint_of(config: CliAgentConfig, provider: str) -> str:
    """Where the bridge relays: the rule every model caller follows (`model_endpoint`): the
    spec's `base_url`, else the operator's $..._BASE_URL, else the provider's own endpoint."""
    return model_endpoint(config.base_url, provider).url


def _api_key(config: CliAgentConfig, upstream: str) -> str | None:
    name = config.api_key_env
    key = os.environ.get(name) if name else None
    own = [default for default, _ in PROVIDERS.values()]
    if key or config.base_url is not None or upstream not in own:
        return key or None
    raise InvalidInput(
        f"no API key for {upstream}: set ${name}, or give the agent a `base_url` that needs none"
        if name
        else f"no API key: {upstream} needs one; name its variable in `api_key_env`"
    )


def deadline_prompt(prompt: str, timeout_s: float, workdir: str) -> str:
    """The task's prompt with the deadline stated (the CLI is stopped then, unwarned)."""
    until = time.strftime("%H:%M:%S UTC", time.gmtime(time.time() + timeout_s))
    return (
        f"{prompt}\n\nYou work in {workdir}. You have {timeout_s:g} seconds, until {until}; "
        "then you are stopped and the repository's changes as they stand are handed in."
    )


class CliAgent(Agent):
    """Runs the configured CLI once per trajectory attempt, in its workspace."""

    meters_calls = True

    def __init__(self, config: CliAgentConfig) -> None:
        self.config = config
        self.program = PROGRAMS[config.type]

    async def generate(self, context: TrajectoryContext) -> Submission:
        """Runs the CLI to its end; hands in the workspace's diff.

        Raises:
            InvalidInput: the task has no workspace, or no API key for the provider's endpoint.
            CliUnavailable: the runtime or package cannot be installed (infrastructure).
            CliFailed: the CLI exited non-zero (crashed, or out of turns).
            Exception: what the meter raised once the budget was spent (the runner's stop).
        """
        config, program = self.config, self.program
        if not context.sandbox.available:
            raise InvalidInput(
                f"agent type {config.type!r} works in a repository: give the task a `path` "
                "(local backend) or an `image` (docker)"
            )
        node, package = await packages.ensure(program.name, config.package, config.pinned_version)
        forwarder = await anyio.to_thread.run_sync(packages.helpers_dir) / "forwarder.py"
        upstream = endpoint_of(config, program.provider)
        bridge = ModelBridge(
            provider=program.provider,
            upstream=upstream,
            api_key=_api_key(config, upstream),
            limiter=context.limiters.endpoint(upstream),
            meter=context.meter,
            max_calls=config.max_turns if program.turns_by_bridge else None,
            one_at_a_time=context.budgeted,
            admit=context.admit,
        )
        workspace = await context.sandbox.workspace()
        await _require_runtime_in_view(workspace, in_view(forwarder), program.name)
        workdir = context.task.workdir or context.task.path or "/testbed"
        prompt = deadline_prompt(context.task.prompt, config.timeout_s, workdir)
        # The view shows the cache elsewhere than the host keeps it (agent_paths).
        argv = program.argv(config, _shown(node), _shown(package), prompt)
        # The spec's variables first: the bridge's address and token, and telemetry off, win.
        env = {"PATH": _PATH, "HOME": HOME, "LANG": "C.UTF-8", "TERM": "dumb",
               **config.env, **program.env(bridge.token)}  # fmt: skip
        script = _WRAPPER.replace("{dump}", program.session_dump).replace("{setup}", program.setup)
        # On a Ray node, the bridge (here, on the driver) is reached through the node's relay.
        on_node = isinstance(workspace, RayWorkspace)
        async with (
            serving(bridge, tcp_host=driver_address() if on_node else None) as sock,
            _socket_in_view(workspace, sock, bridge) as shown_sock,
        ):
            shown = [in_view(forwarder), shown_sock, str(BRIDGE_PORT)]
            wrapped = ["/bin/sh", "-c", script, "sh", *shown]
            result = await _run_until_refused(
                workspace, [*wrapped, *argv], env=env, limit_s=config.timeout_s, bridge=bridge
            )
        if bridge.failure is not None:
            raise bridge.failure
        assert result is not None
        log = await _session_log(workspace)
        transcript: list[dict[str, Any]] = [
            {"event": "started", "cli": program.name, "calls_from": MODEL_BRIDGE,
             "package": package.package,
             "version": package.version, "integrity": package.integrity,
             "node": node.version, "endpoint": upstream, "model": config.model},
            *program.messages(log),
            *bridge.calls,
            {"event": "exited", "exit_code": result.exit_code, "timed_out": result.timed_out,
             "stdout": result.stdout[-OUTPUT_TAIL:], "stderr": result.stderr[-OUTPUT_TAIL:]},
            {"event": "session_log", "cli": program.name, "lines": log},
        ]  # fmt: skip
        if result.exit_code == FORWARDER_FAILED:
            raise packages.CliUnavailable(
                f"the model bridge's forwarder did not start in the workspace (is python3 in "
                f"the view?): {result.stderr[-2000:]}"
            )
        if result.exit_code in (126, 127) and not log:
            raise packages.CliUnavailable(
                f"{program.name} could not be started in the workspace (exit "
                f"{result.exit_code}): {result.stderr[-2000:]}; reinstall it with "
                f"`mcp-evalserver agents install {program.name}@{package.version}`"
            )
        if result.exit_code != 0 and not result.timed_out:
            raise CliFailed(
                f"{program.name} exited with status {result.exit_code}; its stderr ends with: "
                f"{result.stderr[-2000:] or '(nothing)'}; its stdout ends with: "
                f"{result.stdout[-1000:] or '(nothing)'}"
            )
        patch = await _diff(workspace)
        return Submission(patch=patch, transcript=transcript)


def _shown(installed: packages.Installed) -> packages.Installed:
    return dataclasses.replace(installed, prefix=Path(in_view(installed.prefix)))


async def _require_runtime_in_view(workspace: Workspace, forwarder: str, name: str) -> None:
    """The cache must be in the view: every backend's views show the cache of the machine the
    workspace runs on (a Ray node's own).

    Raises:
        InvalidInput: it is not (a Ray node where the CLI was not installed, or an instance
            container made before it did: close it to have it made again).
    """
    try:
        await workspace.read_file(forwarder, max_bytes=1 << 20)
    except NotFound:
        raise InvalidInput(
            f"this workspace's view does not show the CLI runtime ({VIEW_AGENTS}): on a Ray "
            f"node, run `mcp-evalserver agents install {name}` on that node first; a docker "
            "instance container made by an older server must be removed first"
        ) from None


@contextlib.asynccontextmanager
async def _socket_in_view(
    workspace: Workspace, sock: Path, bridge: ModelBridge
) -> AsyncIterator[str]:
    """Where the workspace's view shows the bridge's socket: the socket itself where the
    workspace runs on this machine, else a relay on its Ray node to the bridge's TCP port.

    Raises:
        SandboxUnavailable: the workspace's node is gone.
    """
    if not isinstance(workspace, RayWorkspace):
        yield in_view(sock)
        return
    assert bridge.tcp_address is not None
    async with workspace.relayed_socket(*bridge.tcp_address) as shown:
        yield shown


async def _run_until_refused(
    workspace: Workspace,
    argv: list[str],
    *,
    env: dict[str, str],
    limit_s: float,
    bridge: ModelBridge,
) -> ExecResult | None:
    """The exec, cancelled (and with it every process it started) once the bridge refuses."""
    result: ExecResult | None = None
    async with anyio.create_task_group() as group:

        async def stop_when_refused() -> None:
            await bridge.failed.wait()
            group.cancel_scope.cancel()

        group.start_soon(stop_when_refused)
        result = await workspace.exec(argv, env=env, timeout=limit_s, output_cap=1 << 20)
        group.cancel_scope.cancel()
    return result


async def _session_log(workspace: Workspace) -> list[dict[str, Any]]:
    try:
        raw = await workspace.read_file(SESSION_COPY, max_bytes=64 << 20)
    except (NotFound, InvalidInput):
        return []
    lines = []
    for line in raw.decode(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            lines.append(entry)
    return lines


async def _diff(workspace: Workspace) -> str | None:
    try:
        return await workspace.diff() or None
    except Conflict:
        return None  # not a git repository: there is no patch to hand in
