"""The MCP surface: every `mcp` import of the project lives in this module.

Each campaign tool is a thin function over `EvalService`. The workspace tools are registered
from their one declaration (`agents.tool_table`): over `ExternalTrajectories` with a claim id
(externally driven trajectories), and by `create_trajectory_server` over one trajectory's
`ScopedTrajectory` for a `command` agent's program. One decorator turns
errors into tool errors: an `EvalServerError` carries its message (which says what to do
next); anything else is logged with a reference id that the error text repeats, and the server
keeps serving.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import json
import logging
import secrets
import typing
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar, get_args, overload

import anyio
from mcp.server.connection import Connection, allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import (
    LOG_LEVEL_META_KEY,
    CallToolResult,
    CompleteRequestParams,
    CompleteResult,
    Completion,
    EmptyResult,
    LoggingLevel,
    LoggingMessageNotification,
    LoggingMessageNotificationParams,
    SetLevelRequestParams,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from mcp_evalserver import __version__
from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.agents.tool_table import WORKSPACE_TOOLS, Audience, Effect, WorkspaceTool
from mcp_evalserver.engine.calibration import calibrate_campaign, parse_labels
from mcp_evalserver.engine.exports import ExportFormat, ExportPage, export_page
from mcp_evalserver.engine.planning import build_plan, render_plan_markdown
from mcp_evalserver.engine.rescoring import parse_scorer
from mcp_evalserver.engine.state import Outcome
from mcp_evalserver.engine.sweep import DEFAULT_LEVELS
from mcp_evalserver.errors import EvalServerError, NotFound
from mcp_evalserver.server.events import CampaignEvent
from mcp_evalserver.server.front.service import FrontService, WorkerConfig
from mcp_evalserver.server.models import (
    CampaignList,
    CampaignStatus,
    Claim,
    Comparison,
    Published,
    ReadByModels,
    ScoringStatus,
    SweepStatus,
    published_model,
)
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.set_tools import LEADERBOARD_URI, SET_TOOLS, ServiceTool, leaderboard
from mcp_evalserver.server.surface import (
    SPEC_SCHEMA_URI,
    SpecArgument,
    ToolProfile,
    as_models_read_it,
)
from mcp_evalserver.server.trajectories import ExternalTrajectories
from mcp_evalserver.server.trajectory.endpoint import ServedTrajectory, serve_trajectory_endpoint
from mcp_evalserver.server.trajectory.scoped import ScopedTrajectory
from mcp_evalserver.server.transport.answers import JsonUnlessStreaming, answering_json
from mcp_evalserver.server.transport.http import allowed_host_names
from mcp_evalserver.server.transport.stdio_pipes import claim_stdio, end_input_on_signal
from mcp_evalserver.spec.campaign import spec_json_schema, validate_spec

logger = logging.getLogger(__name__)

#: MCP's log levels, lowest first.
_LEVELS: tuple[LoggingLevel, ...] = get_args(LoggingLevel)

_P = ParamSpec("_P")
_R = TypeVar("_R")

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

CampaignId = Annotated[str, Field(description="A campaign id, as list_campaigns shows them.")]
ClaimId = Annotated[str, Field(description="From claim_trajectory.")]
# At most 300 s: HTTP clients (the SDK's default) stop reading a silent response after that.
WaitSeconds = Annotated[float, Field(ge=0, le=300, description="Seconds to wait at most.")]

# Every tool says all three hints (a client must not guess the spec's defaults): whether it
# changes anything, whether what it changes is lost (destructive), whether calling it again
# with the same arguments changes nothing more (idempotent).
_READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
#: Adds something (a campaign, a claim, a checkpoint, a submission); loses nothing.
_MUTATES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
#: Brings something to a state (running, stopped); again changes nothing more.
_SETS = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
#: Replaces workspace files with given ones: what they held is lost; again, nothing more.
_OVERWRITES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
#: Runs a command in a workspace (or edits a file there): it may delete anything there, and
#: twice is not once.
_RUNS = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
#: The hints of each workspace tool's declared effect (`agents.tool_table.Effect`).
_EFFECTS: dict[Effect, ToolAnnotations] = {
    "reads": _READ_ONLY, "adds": _MUTATES, "overwrites": _OVERWRITES, "edits": _RUNS,
    "runs": _RUNS,
}  # fmt: skip

_KEYWORD = inspect.Parameter.KEYWORD_ONLY
# Subscripted with a type made at run time: a value to the type checker, not a type expression.
_ANNOTATED: Any = Annotated


def tool_errors(fn: Callable[_P, Awaitable[_R]]) -> Callable[_P, Awaitable[_R]]:
    """Turns every failure into a tool error whose text says what went wrong and what next."""

    @functools.wraps(fn)
    async def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await fn(*args, **kwargs)
        except EvalServerError as exc:
            raise ToolError(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            raise ToolError("Timeout: the server gave up waiting; try again") from exc
        except Exception as exc:
            reference = secrets.token_hex(4)
            logger.exception("tool %s failed unexpectedly (reference %s)", fn.__name__, reference)
            raise ToolError(
                f"internal error (reference {reference}): {type(exc).__name__}. The server logged "
                "the details under that reference and keeps serving; retry, or report it."
            ) from exc

    return wrapper


@contextmanager
def _resource_errors() -> Iterator[None]:
    """Our errors as resource errors; their text says what went wrong and what next."""
    try:
        yield
    except EvalServerError as exc:
        raise ResourceError(str(exc)) from exc


def _service(ctx: Context[EvalService, Any]) -> EvalService:
    return ctx.request_context.lifespan_context


@overload
async def _call(
    ctx: Context[EvalService, Any], operation: Callable[..., Awaitable[_R]], **arguments: Any
) -> _R: ...
@overload
async def _call(
    ctx: Context[EvalService, Any], operation: Callable[..., _R], **arguments: Any
) -> _R: ...
async def _call(
    ctx: Context[EvalService, Any], operation: Callable[..., Any], **arguments: Any
) -> Any:
    """`operation` (an `EvalService` method) run where campaigns are driven: here, or by the
    worker that drives them (`EvalService.call`)."""
    return await _service(ctx).call(operation, **arguments)


def create_server(
    state_dir: Path,
    *,
    base_dir: Path | None = None,
    ray_address: str | None = None,
    resume_running: bool = False,
    privileges: Privileges | None = None,
    worker: WorkerConfig | None = None,
    tools: ToolProfile = "all",
) -> MCPServer[EvalService]:
    """The MCP server; its lifespan owns an `EvalService` over `state_dir` (as `worker` of
    `--workers N`, a `FrontService`).

    `base_dir` resolves relative task file paths in specs (default: the working directory);
    with `ray_address`, instances run on that Ray cluster unless a campaign says otherwise;
    with `resume_running`, campaigns that were interrupted resume when the server starts;
    `privileges` says what clients may make it do on its host (default: everything, as for
    the user's own process over stdio). `tools`: every tool, or (`agent`) only what an agent
    that claims trajectories needs.
    """

    @asynccontextmanager
    async def lifespan(_: MCPServer[EvalService]) -> AsyncIterator[EvalService]:
        options: dict[str, Any] = {
            "base_dir": base_dir,
            "ray_address": ray_address,
            "resume_running": resume_running,
            "privileges": privileges,
            "trajectory_endpoints": serve_trajectory,
        }
        service = (
            EvalService(state_dir, **options)
            if worker is None
            else FrontService(state_dir, worker=worker, **options)
        )
        async with service:
            yield service

    instructions = AGENT_INSTRUCTIONS if tools == "agent" else INSTRUCTIONS
    app: MCPServer[EvalService] = MCPServer(
        "mcp-evalserver", version=__version__, instructions=instructions, lifespan=lifespan
    )
    if tools == "all":
        _campaign_tools(app)
    _trajectory_tools(app)
    if tools == "all":
        _export_tools(app)
        _campaign_resources(app)
        _add_service_tools(app, SET_TOOLS)
    _logging_and_completions(app)
    as_models_read_it(app)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__})

    # Called, not decorated: the SDK's decorator is untyped.
    app.custom_route("/healthz", methods=["GET"], include_in_schema=False)(healthz)

    return app


def _campaign_resources(app: MCPServer[EvalService]) -> None:
    @app.resource(SPEC_SCHEMA_URI, mime_type="application/schema+json")
    def campaign_schema() -> str:
        """The JSON schema of a campaign spec: what start_campaign and sweep_concurrency take
        as `spec` (and a spec file of `mcp-evalserver run`)."""
        return json.dumps(spec_json_schema(), indent=1)

    @app.resource("campaign://{campaign_id}/report", mime_type="text/markdown")
    async def campaign_report(campaign_id: str, ctx: Context[EvalService, Any]) -> str:
        """A campaign's report in Markdown: status, pass rate, one row per task."""
        with _resource_errors():
            return await _call(ctx, EvalService.report, campaign_id=campaign_id)

    @app.resource(
        "campaign://{campaign_id}/trajectories/{trajectory_id}", mime_type="application/json"
    )
    async def campaign_trajectory(
        campaign_id: str, trajectory_id: str, ctx: Context[EvalService, Any]
    ) -> str:
        """Where one trajectory stands: phase, outcome, score, attempts, usage."""
        with _resource_errors():
            found = await _call(
                ctx, EvalService.trajectory, campaign_id=campaign_id, trajectory_id=trajectory_id
            )
            return json.dumps(found, indent=2)

    @app.resource("campaign://{campaign_id}/tasks/{task_id}", mime_type="application/json")
    async def campaign_task(campaign_id: str, task_id: str, ctx: Context[EvalService, Any]) -> str:
        """One task's trajectories in a campaign, with their outcomes."""
        with _resource_errors():
            found = await _call(ctx, EvalService.task, campaign_id=campaign_id, task_id=task_id)
            return json.dumps(found, indent=2)

    @app.resource(LEADERBOARD_URI, mime_type="text/markdown")
    def set_leaderboard(set_id: str, ctx: Context[EvalService, Any]) -> str:
        """An evaluation set's leaderboard: per agent status, pass rate with its interval,
        cost, tokens, time; every pair's paired difference with Holm-adjusted p-values."""
        with _resource_errors():
            return leaderboard(_service(ctx), set_id)


def _add_service_tools(app: MCPServer[EvalService], tools: Sequence[ServiceTool]) -> None:
    """Registers tools declared as functions over the service (`ServiceTool`): the service
    comes from the request's context, every other parameter is the tool's."""
    for declared in tools:
        run = declared.run
        # Resolved here: the SDK evaluates string annotations in this module, not in theirs.
        signature = inspect.signature(run, eval_str=True)
        ctx = inspect.Parameter("ctx", _KEYWORD, annotation=Context[EvalService, Any])
        rest = list(signature.parameters.values())[1:]
        parameters = [ctx, *(p.replace(kind=_KEYWORD) for p in rest)]

        call = _on_service(run)
        call.__name__ = run.__name__
        call.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        call.__annotations__ = {p.name: p.annotation for p in parameters} | {
            "return": signature.return_annotation
        }
        description = inspect.cleandoc(run.__doc__ or "").split("\n\n")[0]
        annotations = _SETS if declared.idempotent else _MUTATES
        app.add_tool(tool_errors(call), description=description, annotations=annotations)


def _on_service(run: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """`run` (a function over the service) on the service of the server that serves `ctx`."""

    async def on_service(ctx: Context[EvalService, Any], **arguments: Any) -> Any:
        return await run(_service(ctx), **arguments)

    return on_service


def _campaign_tools(app: MCPServer[EvalService]) -> None:
    @app.tool(annotations=_MUTATES)
    @tool_errors
    async def start_campaign(
        spec: SpecArgument,
        ctx: Context[EvalService, Any],
        campaign_id: Annotated[
            str | None, Field(description="Optional id; default `<name>-<time>-<random>`.")
        ] = None,
    ) -> CampaignStatus:
        """Start an evaluation campaign: every task x `samples` trajectories, run by the agent
        and graded by the scorer the spec names. Returns at once with the campaign id while it
        runs in the background; follow it with campaign_status (wait_s > 0 streams progress).
        With agent {"type": "external"}, trajectories wait for clients to claim_trajectory."""
        parsed = validate_spec(spec)
        return await _call(ctx, EvalService.start, spec=parsed, campaign_id=campaign_id)

    @app.tool(annotations=_READ_ONLY)
    @tool_errors
    async def campaign_status(
        campaign_id: CampaignId,
        ctx: Context[EvalService, Any],
        wait_s: WaitSeconds = 0.0,
    ) -> CampaignStatus:
        """Where a campaign stands: trajectories done, outcomes, pass rate, what to do next.
        With wait_s > 0 the call waits until the campaign stops or wait_s passes, sending a
        progress notification each time a trajectory finishes; call it again to keep following.
        """
        if wait_s <= 0:
            return await _call(ctx, EvalService.status, campaign_id=campaign_id)

        async def progress(done: float, total: float, message: str) -> None:
            await ctx.report_progress(done, total, message)

        return await _call(
            ctx,
            EvalService.wait,
            campaign_id=campaign_id,
            wait_s=wait_s,
            progress=progress,
            log=_request_log(ctx),
        )

    @app.tool(annotations=_MUTATES)
    @tool_errors
    async def sweep_concurrency(
        spec: SpecArgument,
        ctx: Context[EvalService, Any],
        levels: Annotated[
            list[int] | None, Field(description="Concurrency levels; default 1, 10, 50, 100.")
        ] = None,
        tasks: Annotated[int, Field(ge=1, description="The spec's first N tasks.")] = 20,
        samples: Annotated[int | None, Field(ge=1, description="Default: the spec's.")] = None,
        sweep_id: Annotated[
            str | None, Field(description="Optional id; an existing sweep's id resumes it.")
        ] = None,
    ) -> SweepStatus:
        """Find the provider's real ceiling: run the spec's first `tasks` tasks as one recorded
        campaign per concurrency level, then write sweep.json (throughput, task and
        infrastructure error rates, 429/5xx counts, latency, tokens/s per level) and sweep.png,
        and recommend the level where errors start to climb. Returns at once; follow it with
        sweep_status (wait_s > 0), or a level's campaign with campaign_status."""
        return await _call(
            ctx,
            EvalService.start_sweep,
            spec=validate_spec(spec),
            levels=levels or list(DEFAULT_LEVELS),
            tasks=tasks,
            samples=samples,
            sweep_id=sweep_id,
        )

    @app.tool(annotations=_READ_ONLY)
    @tool_errors
    async def sweep_status(
        sweep_id: Annotated[str, Field(description="The id sweep_concurrency returned.")],
        ctx: Context[EvalService, Any],
        wait_s: WaitSeconds = 0.0,
    ) -> SweepStatus:
        """Where a concurrency sweep stands: the level running now, or (finished) the figures
        per level, the recommended level and why, and the paths of sweep.json and sweep.png.
        With wait_s > 0 the call waits until the sweep finishes or wait_s passes."""
        return await _call(ctx, EvalService.wait_sweep, sweep_id=sweep_id, wait_s=wait_s)

    @app.tool(annotations=_MUTATES)
    @tool_errors
    async def calibrate_judge(
        campaign_id: CampaignId,
        labels: Annotated[
            list[dict[str, Any]],
            Field(
                description='Human labels: {"trajectory": "t1@0", "label": 0.5} per trajectory, '
                'or with "requirement": "<rubric text>" per requirement; label true/false or 0..1.'
            ),
        ],
        ctx: Context[EvalService, Any],
    ) -> dict[str, Any]:
        """Check whether a campaign's llm_judge can be trusted: Spearman and Kendall between its
        scores and human labels (95% bootstrap intervals), agreement and confusion at the
        scorer's threshold, and whether Spearman clears 0.80. Recorded in the campaign's ledger,
        so its report shows it. The campaign must not be running."""
        parsed = parse_labels(labels)
        source = {"file": None, "sha256": None, "rows": len(parsed)}
        return await calibrate_campaign(_service(ctx).store, campaign_id, parsed, source=source)

    @app.tool(annotations=_READ_ONLY)
    @tool_errors
    async def list_campaigns(
        ctx: Context[EvalService, Any],
        limit: Annotated[int, Field(ge=1, le=1000, description="Newest N campaigns.")] = 50,
    ) -> CampaignList:
        """List the campaigns this server knows (oldest first, the newest `limit`), each with its
        status. Use it to find a campaign id."""
        return await _call(ctx, EvalService.list, limit=limit)

    @app.tool(annotations=_SETS)
    @tool_errors
    async def cancel_campaign(
        campaign_id: CampaignId, ctx: Context[EvalService, Any]
    ) -> CampaignStatus:
        """Stop a running campaign. Everything it recorded stays; resume continues it later."""
        return await _call(ctx, EvalService.cancel, campaign_id=campaign_id)

    @app.tool(annotations=_SETS)
    @tool_errors
    async def resume(
        campaign_id: CampaignId,
        ctx: Context[EvalService, Any],
        budget_usd: Annotated[
            float | None,
            Field(
                gt=0,
                allow_inf_nan=False,
                description="A new budget (US dollars), larger than what it spent: the "
                "trajectories the old one stopped (budget_exhausted) run again.",
            ),
        ] = None,
    ) -> CampaignStatus:
        """Continue a cancelled or interrupted campaign where its ledger left off: finished
        trajectories are kept, generated ones are only scored, the rest run again. Trajectories
        whose last outcome is an infrastructure failure run again from the phase that failed;
        `retrying` says how many. A campaign already running is left running and its status
        returned (a restarted server resumes interrupted campaigns by itself)."""
        return await _call(ctx, EvalService.resume, campaign_id=campaign_id, budget_usd=budget_usd)

    @app.tool(annotations=_MUTATES)
    @tool_errors
    async def score(
        campaign_id: CampaignId,
        ctx: Context[EvalService, Any],
        rescore: Annotated[
            bool, Field(description="Grade finished submissions again (not re-generated).")
        ] = False,
        scorer: Annotated[
            dict[str, Any] | None,
            Field(
                description="With rescore: grade with this scorer from now on, an object as a "
                f'spec\'s `scorer` ({{"type": "tests"}}; schema: {SPEC_SCHEMA_URI}).'
            ),
        ] = None,
        outcomes: Annotated[
            list[Outcome] | None,
            Field(description="With rescore: only trajectories with these outcomes."),
        ] = None,
    ) -> ScoringStatus:
        """Scoring progress and statistics of a campaign: pass rate with a confidence interval,
        pass@k, error rates, tokens. Scoring runs by itself as trajectories finish; with
        rescore=true the finished submissions are graded again in the background (e.g. after
        fixing a grader, or with another `scorer`), without generating them again."""
        return await _call(
            ctx,
            EvalService.score,
            campaign_id=campaign_id,
            rescore=rescore,
            scorer=parse_scorer(scorer) if scorer is not None else None,
            outcomes=outcomes,
        )

    @app.tool(annotations=_READ_ONLY)
    @tool_errors
    async def compare_campaigns(
        campaign_a: CampaignId, campaign_b: CampaignId, ctx: Context[EvalService, Any]
    ) -> Comparison:
        """Compare campaign B against campaign A on the tasks both scored (paired by task):
        mean difference with a bootstrap interval, wins/losses, permutation and sign tests."""
        return await _call(ctx, EvalService.compare, campaign_a=campaign_a, campaign_b=campaign_b)

    @app.tool(annotations=_READ_ONLY)
    @tool_errors
    async def plan_sample_size(
        campaign_id: CampaignId,
        ctx: Context[EvalService, Any],
        campaign_b: Annotated[
            str | None,
            Field(description="A second campaign on the same tasks: their correlation counts."),
        ] = None,
        delta: Annotated[
            float, Field(gt=0, le=1, description="Difference in pass rate to detect.")
        ] = 0.02,
        power: Annotated[float, Field(gt=0, lt=1)] = 0.8,
        alpha: Annotated[float, Field(gt=0, lt=1, description="Two-sided level.")] = 0.05,
        cluster_by: Annotated[
            str | None,
            Field(description="Task field or metadata key clustering tasks (default: repo)."),
        ] = None,
    ) -> dict[str, Any]:
        """How many tasks x samples per task detect a difference `delta` in pass rate between
        two campaigns, from a pilot campaign's variance between tasks and within a task (and,
        given two campaigns on the same tasks, their correlation); and the difference the
        pilot's own design detects. `markdown` says it as a person reads it."""
        store = _service(ctx).store
        plan = build_plan(
            store.load(campaign_id),
            store.load(campaign_b) if campaign_b is not None else None,
            delta=delta,
            power=power,
            alpha=alpha,
            cluster_by=cluster_by,
        )
        return {**plan, "markdown": render_plan_markdown(plan)}


#: Where a connection keeps the level its client set with `logging/setLevel`.
_LOG_LEVEL = "mcp_evalserver.log_level"
#: The `logger` of every log notification.
LOGGER = "mcp-evalserver"


def _log_params(event: CampaignEvent) -> dict[str, Any]:
    return {"level": event.level, "logger": LOGGER, "data": event.data}


def _logging_and_completions(app: MCPServer[EvalService]) -> None:
    """Serves `logging/setLevel` (campaign events as log notifications) and
    `completion/complete` (campaign, trajectory and task ids).

    Both are low-level handlers: the SDK's `completion` decorator hands its function no
    context (so no service), and `MCPServer` has no logging handler of its own.
    """
    lowlevel = app._lowlevel_server

    async def set_level(
        ctx: ServerRequestContext[EvalService, Any], params: SetLevelRequestParams
    ) -> EmptyResult:
        # Handshake-era clients (2026-07-28 has no `logging/setLevel`: it answers "method not
        # found", and clients opt in per request instead; see `_request_log`).
        connection = session_connection(ctx.session)
        following = _LOG_LEVEL in connection.state
        connection.state[_LOG_LEVEL] = params.level
        if not following:
            sessions = getattr(lowlevel, "_session_manager", None)  # None: not over HTTP
            if isinstance(sessions, _PerRequestSessions) and connection.session_id is not None:
                sessions.following_logs.add(connection.session_id)  # answered in SSE now
                connection.exit_stack.callback(sessions.following_logs.discard,
                                               connection.session_id)  # fmt: skip

            async def deliver(event: CampaignEvent) -> None:
                threshold = connection.state[_LOG_LEVEL]
                if _LEVELS.index(event.level) >= _LEVELS.index(threshold):
                    await connection.notify("notifications/message", _log_params(event))

            connection.exit_stack.callback(ctx.lifespan_context.forward_events(deliver))
        return EmptyResult()

    async def complete(
        ctx: ServerRequestContext[EvalService, Any], params: CompleteRequestParams
    ) -> CompleteResult:
        known = params.context.arguments if params.context is not None else None
        values, total = ctx.lifespan_context.complete(
            params.argument.name, params.argument.value, (known or {}).get("campaign_id")
        )
        completion = Completion(values=values, total=total, has_more=total > len(values))
        return CompleteResult(completion=completion)

    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)
    lowlevel.add_request_handler("completion/complete", CompleteRequestParams, complete)


def session_connection(session: object) -> Connection:
    """The connection of a request's session, whose state outlives the request.

    The SDK gives a handler no public way to it: this reads its private
    `ServerSession._connection` (mcp 2.3; pyproject pins the SDK below 2.4).

    Raises:
        RuntimeError: the SDK moved it: say so, rather than fail somewhere else.
    """
    connection = getattr(session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError(
            f"mcp {importlib.metadata.version('mcp')} keeps no `ServerSession._connection`: "
            "logging/setLevel cannot reach its connection; install the mcp version "
            "pyproject.toml names, or adapt `session_connection` to the SDK's public hook"
        )
    return connection


def _request_log(ctx: Context[EvalService, Any]) -> Callable[[CampaignEvent], Awaitable[None]]:
    """Sends campaign events as log notifications on this request's own stream, to a
    2026-07-28 client that asked for them (`io.modelcontextprotocol/logLevel` in the request's
    `_meta`) at or above the level it asked for. Handshake-era clients get every event on
    their connection once they call `logging/setLevel` instead, never twice."""
    request = ctx.request_context
    modern = request.protocol_version in MODERN_PROTOCOL_VERSIONS
    wanted = allowed_log_levels(request.protocol_version, request.meta) if modern else set()

    async def log(event: CampaignEvent) -> None:
        if event.level in wanted:
            notification = LoggingMessageNotification(
                params=LoggingMessageNotificationParams.model_validate(_log_params(event))
            )
            await request.session.send_notification(notification, request.request_id)

    return log


def _trajectory_tools(app: MCPServer[EvalService]) -> None:
    @app.tool(annotations=_MUTATES)
    @tool_errors
    async def claim_trajectory(
        ctx: Context[EvalService, Any],
        campaign_id: Annotated[
            str | None, Field(description="Only from this campaign; default any.")
        ] = None,
        wait_s: WaitSeconds = 0.0,
    ) -> Annotated[CallToolResult, Claim]:
        """Claim a trajectory of a campaign whose agent is external, to act as its agent: the
        task prompt and a claim_id for the workspace tools and submit. Each call renews the
        claim and a running call holds it; after lease_s with no call another client may take
        it over, workspace as it was. Waits up to wait_s for one; the campaign's
        trajectory_timeout_s bounds the whole trajectory."""
        service = _service(ctx)
        if campaign_id is not None:
            service.require_campaign(campaign_id)
        return _answer(await service.trajectories().claim(campaign_id, wait_s))

    for tool in WORKSPACE_TOOLS:
        method = getattr(ExternalTrajectories, tool.name)
        _add_workspace_tool(app, tool, "claimed", _on_claim(tool.name), _returns(method))


def _on_claim(name: str) -> Callable[..., Awaitable[Any]]:
    """The `ExternalTrajectories` method `name`, on the claims of the server that serves `ctx`."""

    async def on_claim(ctx: Context[EvalService, Any], claim_id: str, **arguments: Any) -> Any:
        return await getattr(_service(ctx).trajectories(), name)(claim_id, **arguments)

    return on_claim


def _returns(method: Callable[..., Any]) -> Any:
    """What `method` returns: the output schema of the tool it serves."""
    return typing.get_type_hints(method)["return"]


def _add_workspace_tool(
    app: MCPServer[Any],
    tool: WorkspaceTool,
    audience: Audience,
    run: Callable[..., Awaitable[Any]],
    returns: Any,
) -> None:
    """Registers `tool` as `WORKSPACE_TOOLS` declares it for `audience`.

    `run` does the work, called with the tool's arguments by name (for `claimed`, also `ctx`
    and `claim_id`); `returns`, what it returns, is the tool's output schema.
    """
    leading = (
        {"claim_id": ClaimId, "ctx": Context[EvalService, Any]} if audience == "claimed" else {}
    )
    parameters = [inspect.Parameter(n, _KEYWORD, annotation=a) for n, a in leading.items()]
    for p in tool.parameters_for(audience):
        nullable: Any = p.type | None if p.default is None else p.type
        field = Field(description=p.description, ge=p.ge, gt=p.gt, le=p.le)
        annotation = _ANNOTATED[nullable, field]
        default = inspect.Parameter.empty if p.required else p.default
        parameters.append(
            inspect.Parameter(p.name, _KEYWORD, annotation=annotation, default=default)
        )

    async def call(**arguments: Any) -> CallToolResult:
        return _answer(await run(**arguments))

    # The SDK reads a tool's parameters and output from its signature (the context parameter
    # from its annotations), and names the schema of its arguments after it. Annotated with
    # the result model, a `CallToolResult` is the answer as built (its structured content
    # validated against the model, whose schema is the tool's output schema).
    answers = _ANNOTATED[CallToolResult, published_model(returns)]
    call.__name__ = tool.name
    call.__signature__ = inspect.Signature(parameters, return_annotation=answers)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in parameters} | {"return": answers}
    annotations = _EFFECTS[tool.effect]
    app.add_tool(tool_errors(call), description=tool.description(audience), annotations=annotations)


def _answer(result: BaseModel) -> CallToolResult:
    """A workspace tool's (or a claim's) answer: what a model reads (`model_text()`: stdout as
    printed, numbered lines) as its text, the result's JSON as its structured content (its
    `published` model where its text already carries a long field)."""
    if isinstance(result, ReadByModels):
        text = result.model_text()
        shown = result.published(text) if isinstance(result, Published) else result
        structured = shown.model_dump(mode="json", by_alias=True)
    else:  # a result model without a text of its own: its JSON, compact
        structured = result.model_dump(mode="json", by_alias=True)
        text = json.dumps(structured, separators=(", ", ": "))
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


def _export_tools(app: MCPServer[EvalService]) -> None:
    @app.tool(annotations=_READ_ONLY)
    @tool_errors
    async def export_results(
        campaign_id: CampaignId,
        format: Annotated[
            ExportFormat,
            Field(
                description="inspect: Inspect AI's JSON log (save it as NAME.json for "
                "`inspect view`); atif: one ATIF trajectory document per trajectory"
            ),
        ],
        ctx: Context[EvalService, Any],
        offset: Annotated[
            int, Field(ge=0, description="Where the page starts: 0, then next_offset.")
        ] = 0,
        max_chars: Annotated[
            int, Field(ge=1000, le=1_000_000, description="Characters per page at most.")
        ] = 20_000,
    ) -> ExportPage:
        """A campaign's results as JSON text for other tools, a page at a time: an Inspect
        AI log (one sample per trajectory: messages, score, usage) or `{"trajectories":
        [...]}` in the Agent Trajectory Interchange Format. Offset 0 exports afresh (from the
        ledger: a running campaign as far as it went) and writes the whole to `path` on the
        server's machine; call again with next_offset until it is null, and join the texts."""
        store = _service(ctx).store
        try:
            # Off the event loop: it reads every artifact, and Inspect writes with a loop of
            # its own.
            return await anyio.to_thread.run_sync(
                export_page, store, campaign_id, format, offset, max_chars
            )
        except NotFound:
            if store.directory(campaign_id).is_dir():
                raise  # its creation was interrupted: that error says how to start it
            raise NotFound(
                f"no campaign {campaign_id!r} on this server; call list_campaigns for every id"
            ) from None


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
    """The streamable-HTTP app (MCP at `/mcp`, `/healthz`), DNS-rebinding protection on;
    as `worker` of `--workers N`, one worker's.

    Requests must name a loopback host, the bound host, or one of `allowed_hosts` (`name` or
    `name:port`) in their Host header, and a matching Origin if they send one: a web page the
    user visits cannot reach the server through a rebound DNS name. Its clients get
    `privileges` (default: no plugins, no host paths; see `privileges.py`) and the `tools`
    profile.
    """
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
    )
    # As many idle sessions (agents whose model thinks) as the machine holds, not the SDK's
    # 10,000: each costs a few kilobytes (bench/front.py); 30 minutes idle still ends one.
    http = server.streamable_http_app(host=host, transport_security=security, max_sessions=None)
    _answer_json_unless_streaming(server)
    return http


class _PerRequestTransport(StreamableHTTPServerTransport):
    """A session's transport that answers JSON or SSE as `answering_json()` says for the request
    it serves (transport/answers.py), not as its session manager was built."""

    @property
    def is_json_response_enabled(self) -> bool:
        return answering_json()

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        pass  # the SDK's constructor sets it: chosen per request instead


class _PerRequestSessions(StreamableHTTPSessionManager):
    """The SDK's session manager, choosing JSON or SSE per request (2026-07-28 requests
    read `json_response`, handshake-era sessions get `_PerRequestTransport`s)."""

    following_logs: set[str]  # handshake-era sessions whose client set a log level

    @property
    def json_response(self) -> bool:
        return answering_json()

    @json_response.setter
    def json_response(self, value: bool) -> None:
        pass

    def _admit_session(self, requestor: Any) -> StreamableHTTPServerTransport | None:
        transport = super()._admit_session(requestor)
        if transport is not None:
            transport.__class__ = _PerRequestTransport
        return transport


def _answer_json_unless_streaming(server: MCPServer[Any]) -> None:
    """Makes the session manager `server.streamable_http_app()` just built answer each
    request with one JSON response unless it streams (transport/answers.py). The SDK offers the
    choice for a whole app only, and builds its manager itself: its class is swapped for a
    subclass that reads the choice per request, decided by middleware in front of it."""
    sessions = server._lowlevel_server.session_manager
    sessions.__class__ = _PerRequestSessions
    assert isinstance(sessions, _PerRequestSessions)
    sessions.following_logs = set()
    limit = sessions.asgi_app  # the SDK's body limit, in front of its request handler
    limit.app = JsonUnlessStreaming(limit.app, sessions.following_logs, LOG_LEVEL_META_KEY)


TRAJECTORY_INSTRUCTIONS = """\
You are the agent of one evaluation trajectory. Work in its private workspace with \
sandbox_exec / read_file / edit_file / write_file / search / list_files / get_diff, then submit \
(the workspace's diff is handed in, with an answer if you give one). These tools reach this \
trajectory only."""


def create_trajectory_server(trajectory: ScopedTrajectory) -> MCPServer[Any]:
    """An MCP server whose tools act on one trajectory only: no tool takes a trajectory id."""
    app: MCPServer[Any] = MCPServer(
        "mcp-evalserver-trajectory", version=__version__, instructions=TRAJECTORY_INSTRUCTIONS
    )

    for tool in WORKSPACE_TOOLS:
        run = functools.partial(trajectory.call, tool)
        _add_workspace_tool(
            app, tool, "scoped", run, _returns(getattr(ScopedTrajectory, tool.name))
        )
    as_models_read_it(app)
    return app


def trajectory_http_app(trajectory: ScopedTrajectory) -> Starlette:
    """The streamable-HTTP app (MCP at `/mcp`) of one trajectory, for a loopback listener.

    DNS-rebinding protection is on: only loopback Host (and Origin) headers are accepted.
    """
    hosts = [entry for name in ("127.0.0.1", "localhost") for entry in (name, f"{name}:*")]
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=hosts,
        allowed_origins=[f"http://{h}" for h in hosts],
    )
    server = create_trajectory_server(trajectory)
    http = server.streamable_http_app(host="127.0.0.1", transport_security=security)
    _answer_json_unless_streaming(server)
    return http


def serve_trajectory(context: TrajectoryContext) -> AbstractAsyncContextManager[ServedTrajectory]:
    """A `command` agent's endpoint for one trajectory, serving `create_trajectory_server`."""
    return serve_trajectory_endpoint(context, trajectory_http_app)
