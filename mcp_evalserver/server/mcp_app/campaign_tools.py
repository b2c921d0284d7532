"""The campaign tools: thin functions over `EvalService`, and the export of results."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from mcp_evalserver.engine.calibration import calibrate_campaign, parse_labels
from mcp_evalserver.engine.exports import ExportFormat, ExportPage, export_page
from mcp_evalserver.engine.planning import build_plan, render_plan_markdown
from mcp_evalserver.engine.rescoring import parse_scorer
from mcp_evalserver.engine.state import Outcome
from mcp_evalserver.engine.sweep import DEFAULT_LEVELS
from mcp_evalserver.errors import NotFound
from mcp_evalserver.server.mcp_app.calls import CampaignId, WaitSeconds, call_service, service_of
from mcp_evalserver.server.mcp_app.failures import tool_errors
from mcp_evalserver.server.mcp_app.hints import MUTATES, READ_ONLY, SETS
from mcp_evalserver.server.mcp_app.log_notifications import request_log
from mcp_evalserver.server.models import (
    CampaignList,
    CampaignStatus,
    Comparison,
    ScoringStatus,
    SweepStatus,
)
from mcp_evalserver.server.service import EvalService
from mcp_evalserver.server.surface import SPEC_SCHEMA_URI, SpecArgument
from mcp_evalserver.spec.campaign import validate_spec


def campaign_tools(app: MCPServer[Any]) -> None:
    @app.tool(annotations=MUTATES)
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
        return await call_service(ctx, EvalService.start, spec=parsed, campaign_id=campaign_id)

    @app.tool(annotations=READ_ONLY)
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
            return await call_service(ctx, EvalService.status, campaign_id=campaign_id)

        async def progress(done: float, total: float, message: str) -> None:
            await ctx.report_progress(done, total, message)

        return await call_service(
            ctx,
            EvalService.wait,
            campaign_id=campaign_id,
            wait_s=wait_s,
            progress=progress,
            log=request_log(ctx),
        )

    @app.tool(annotations=MUTATES)
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
        return await call_service(
            ctx,
            EvalService.start_sweep,
            spec=validate_spec(spec),
            levels=levels or list(DEFAULT_LEVELS),
            tasks=tasks,
            samples=samples,
            sweep_id=sweep_id,
        )

    @app.tool(annotations=READ_ONLY)
    @tool_errors
    async def sweep_status(
        sweep_id: Annotated[str, Field(description="The id sweep_concurrency returned.")],
        ctx: Context[EvalService, Any],
        wait_s: WaitSeconds = 0.0,
    ) -> SweepStatus:
        """Where a concurrency sweep stands: the level running now, or (finished) the figures
        per level, the recommended level and why, and the paths of sweep.json and sweep.png.
        With wait_s > 0 the call waits until the sweep finishes or wait_s passes."""
        return await call_service(ctx, EvalService.wait_sweep, sweep_id=sweep_id, wait_s=wait_s)

    @app.tool(annotations=MUTATES)
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
        return await calibrate_campaign(service_of(ctx).store, campaign_id, parsed, source=source)

    @app.tool(annotations=READ_ONLY)
    @tool_errors
    async def list_campaigns(
        ctx: Context[EvalService, Any],
        limit: Annotated[int, Field(ge=1, le=1000, description="Newest N campaigns.")] = 50,
    ) -> CampaignList:
        """List the campaigns this server knows (oldest first, the newest `limit`), each with its
        status. Use it to find a campaign id."""
        return await call_service(ctx, EvalService.list, limit=limit)

    @app.tool(annotations=SETS)
    @tool_errors
    async def cancel_campaign(
        campaign_id: CampaignId, ctx: Context[EvalService, Any]
    ) -> CampaignStatus:
        """Stop a running campaign. Everything it recorded stays; resume continues it later."""
        return await call_service(ctx, EvalService.cancel, campaign_id=campaign_id)

    @app.tool(annotations=SETS)
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
        return await call_service(
            ctx, EvalService.resume, campaign_id=campaign_id, budget_usd=budget_usd
        )

    @app.tool(annotations=MUTATES)
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
        return await call_service(
            ctx,
            EvalService.score,
            campaign_id=campaign_id,
            rescore=rescore,
            scorer=parse_scorer(scorer) if scorer is not None else None,
            outcomes=outcomes,
        )

    @app.tool(annotations=READ_ONLY)
    @tool_errors
    async def compare_campaigns(
        campaign_a: CampaignId, campaign_b: CampaignId, ctx: Context[EvalService, Any]
    ) -> Comparison:
        """Compare campaign B against campaign A on the tasks both scored (paired by task):
        mean difference with a bootstrap interval, wins/losses, permutation and sign tests."""
        return await call_service(
            ctx, EvalService.compare, campaign_a=campaign_a, campaign_b=campaign_b
        )

    @app.tool(annotations=READ_ONLY)
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
        store = service_of(ctx).store
        plan = build_plan(
            store.load(campaign_id),
            store.load(campaign_b) if campaign_b is not None else None,
            delta=delta,
            power=power,
            alpha=alpha,
            cluster_by=cluster_by,
        )
        return {**plan, "markdown": render_plan_markdown(plan)}


def export_tools(app: MCPServer[Any]) -> None:
    @app.tool(annotations=READ_ONLY)
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
        store = service_of(ctx).store
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
