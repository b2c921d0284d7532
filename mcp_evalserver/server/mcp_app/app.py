"""The campaign server assembled: `create_server`, and serving it over stdio or HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette

from mcp_evalserver import __version__
from mcp_evalserver.server.mcp_app.first_use import LoadOnFirstUse, ServiceSlot
from mcp_evalserver.server.mcp_app.json_answers import answer_json_unless_streaming
from mcp_evalserver.server.mcp_app.log_notifications import logging_and_completions
from mcp_evalserver.server.surface import as_models_read_it
from mcp_evalserver.server.tool_profiles import ToolProfile
from mcp_evalserver.server.transport.http import allowed_host_names
from mcp_evalserver.server.transport.stdio_pipes import claim_stdio, end_input_on_signal

if TYPE_CHECKING:
    from mcp_evalserver.server.front.worker_config import WorkerConfig
    from mcp_evalserver.server.privileges import Privileges
    from mcp_evalserver.server.service import EvalService

INSTRUCTIONS = """\
Runs evaluation campaigns for AI agents: tasks x samples x one agent x one scorer, in isolated \
workspaces, recorded in a crash-safe ledger.
To evaluate: start_campaign (the spec's schema is the resource mcp-evalserver://schema/campaign), \
then campaign_status with wait_s to follow progress, then read campaign://<id>/report or call \
score.
To compare several agents on one task set: start_eval_set, then read set://<id>/leaderboard.
To act as the agent of a campaign whose agent is {"type": "external"}: claim_trajectory, work \
with sandbox_exec / read_file / edit_file / write_file / search / list_files / get_diff, then \
submit. checkpoint / restore roll a workspace back; fork_trajectory branches a trajectory into \
several, each scored.
To take results to other tools: export_results (an Inspect AI log, or ATIF trajectories)."""

AGENT_INSTRUCTIONS = """\
Act as the agent of evaluation trajectories: claim_trajectory gives a task's prompt and a \
claim_id; work in its private workspace with the workspace tools, then submit."""


def create_server(
    state_dir: Path,
    *,
    base_dir: Path | None = None,
    ray_address: str | None = None,
    resume_running: bool = False,
    privileges: Privileges | None = None,
    worker: WorkerConfig | None = None,
    tools: ToolProfile = "all",
    service_at_start: bool = False,
) -> MCPServer[ServiceSlot]:
    """The MCP server; its lifespan owns an `EvalService` over `state_dir` (as `worker` of
    `--workers N`, a `FrontService`).

    It answers `initialize` with neither: the first other message registers the tools and
    starts the service (`first_use`), unless `service_at_start` starts the service with the
    lifespan (HTTP: a worker is ready once its service is).

    `base_dir` resolves relative task file paths in specs (default: the working directory);
    with `ray_address`, instances run on that Ray cluster unless a campaign says otherwise;
    with `resume_running`, campaigns that were interrupted resume when the service starts;
    `privileges` says what clients may make it do on its host (default: everything, as for
    the user's own process over stdio). `tools`: every tool, or (`agent`) only what an agent
    that claims trajectories needs.
    """

    def start_service() -> AbstractAsyncContextManager[EvalService]:
        # Imported here: the engine is what the first answer does without.
        from mcp_evalserver.server.front.service import FrontService
        from mcp_evalserver.server.mcp_app.trajectory_server import serve_trajectory
        from mcp_evalserver.server.service import EvalService

        options: dict[str, Any] = {
            "base_dir": base_dir,
            "ray_address": ray_address,
            "resume_running": resume_running,
            "privileges": privileges,
            "trajectory_endpoints": serve_trajectory,
        }
        if worker is None:
            return EvalService(state_dir, **options)
        return FrontService(state_dir, worker=worker, **options)

    @asynccontextmanager
    async def lifespan(_: MCPServer[ServiceSlot]) -> AsyncIterator[ServiceSlot]:
        async with ServiceSlot(start_service) as slot:
            if service_at_start:
                await slot.service()
            yield slot

    def register(app: MCPServer[Any]) -> None:
        from mcp_evalserver.server.mcp_app.registration import register_tools

        register_tools(app, tools)

    instructions = AGENT_INSTRUCTIONS if tools == "agent" else INSTRUCTIONS
    app: MCPServer[ServiceSlot] = MCPServer(
        "mcp-evalserver", version=__version__, instructions=instructions, lifespan=lifespan
    )
    # Eager: the capabilities `initialize` answers with come from the handlers registered.
    logging_and_completions(app)
    app.middleware.append(LoadOnFirstUse(app, register))
    as_models_read_it(app)
    return app


async def serve_stdio(
    state_dir: Path,
    ray_address: str | None = None,
    *,
    resume_running: bool = False,
    tools: ToolProfile = "all",
) -> None:
    """Serves MCP over this process's stdin/stdout until the client closes it or, when they
    are pipes, SIGINT or SIGTERM arrives."""
    server = create_server(
        state_dir, ray_address=ray_address, resume_running=resume_running, tools=tools
    )
    with claim_stdio() as pipes:
        if pipes is None:  # not pipes (a file, a terminal): the SDK's threaded transport
            await server.run_stdio_async()
            return
        # What `run_stdio_async` does, over streams that need no worker thread per line.
        lowlevel = server._lowlevel_server
        async with (
            stdio_server(*pipes) as (read_stream, write_stream),
            anyio.create_task_group() as group,
        ):
            group.start_soon(end_input_on_signal, pipes[0])
            await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
            group.cancel_scope.cancel()


def http_app(
    state_dir: Path,
    host: str,
    allowed_hosts: Sequence[str] = (),
    ray_address: str | None = None,
    *,
    resume_running: bool = False,
    privileges: Privileges | None = None,
    worker: WorkerConfig | None = None,
    tools: ToolProfile = "all",
) -> Starlette:
    """The streamable-HTTP app (MCP at `/mcp`), DNS-rebinding protection on;
    as `worker` of `--workers N`, one worker's.

    Requests must name a loopback host, the bound host, or one of `allowed_hosts` (`name` or
    `name:port`) in their Host header, and a matching Origin if they send one: a web page the
    user visits cannot reach the server through a rebound DNS name. Its clients get
    `privileges` (default: no plugins, no host paths; see `privileges.py`) and the `tools`
    profile.
    """
    from mcp_evalserver.server.privileges import Privileges  # the HTTP server's alone

    hosts = allowed_host_names(host, allowed_hosts)
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=sorted({f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")}),
    )
    server = create_server(
        state_dir,
        ray_address=ray_address,
        resume_running=resume_running,
        privileges=privileges or Privileges.for_http(),
        worker=worker,
        tools=tools,
        service_at_start=True,
    )
    # As many idle sessions (agents whose model thinks) as the machine holds, not the SDK's
    # 10,000: each costs a few kilobytes (bench/front.py); 30 minutes idle still ends one.
    http = server.streamable_http_app(host=host, transport_security=security, max_sessions=None)
    answer_json_unless_streaming(server)
    return http
