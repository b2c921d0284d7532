"""What the campaign tools read: status, lists, waits, reports, comparisons, trajectories,
tasks and completions, from a campaign's live state when it runs here, else from its ledger.

A part of `service.EvalService` (a mixin: the service's store, claims, events and runs are
its); nothing here starts, stops or changes a campaign.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

from mcp_evalserver.agents.external import ClaimBoard
from mcp_evalserver.engine.comparison import build_comparison, render_comparison_markdown
from mcp_evalserver.engine.records import LedgerRecord, RunStarted
from mcp_evalserver.engine.report import build_report, pass_counts
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState, TrajectoryState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import EvalServerError, NotFound
from mcp_evalserver.runtime.endpoints import model_endpoints
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.scoring.stats.comparison import PairedComparison
from mcp_evalserver.server.events import CampaignEvent, EventHub, drain
from mcp_evalserver.server.models import (
    CampaignList,
    CampaignStatus,
    Comparison,
    InstanceReprovisioned,
    SamplingProgress,
)

logger = logging.getLogger(__name__)

ProgressFn = Callable[[float, float, str], Awaitable[None]]
EventFn = Callable[[CampaignEvent], Awaitable[None]]

#: What one completion answer may list (MCP's cap).
_COMPLETIONS = 100


@dataclass(eq=False)
class CampaignRun:
    """One campaign running in this server."""

    runner: CampaignRunner = field(init=False)
    started: anyio.Event = field(default_factory=anyio.Event)
    finished: anyio.Event = field(default_factory=anyio.Event)
    changed: anyio.Event = field(default_factory=anyio.Event)
    error: str | None = None

    def on_record(self, state: CampaignState, record: LedgerRecord) -> None:
        if isinstance(record, RunStarted):
            self.started.set()
        # Waiters hold the current event; a fresh one is armed for the next change.
        self.changed.set()
        self.changed = anyio.Event()


class CampaignQueries:
    """The service's reads of campaigns; `EvalService` provides what it declares."""

    store: CampaignStore
    claims: ClaimBoard
    events: EventHub
    _runs: dict[str, CampaignRun]
    _pool: SandboxPool | None

    def _interrupted(self, state: CampaignState) -> bool:
        return (
            state.interrupted
            and not self._active(state.id)
            and not self.store.running_elsewhere(state.id)
        )

    def status(self, campaign_id: str) -> CampaignStatus:
        """The campaign's live state (or its ledger's, when it is not running here).

        Raises:
            NotFound: no such campaign; the message lists known ids.
            LedgerCorrupt: its ledger is corrupt before the end.
        """
        run = self._runs.get(campaign_id)
        state = run.runner.state if run is not None else None
        if state is None:
            state = self._load(campaign_id)
        active = run is not None and not run.finished.is_set()
        awaiting, claimed = self.claims.waiting(campaign_id)
        # Counted here rather than by build_report: status is polled on every ledger record
        # while a client follows a campaign, and the report's bootstrap is not cheap.
        phases = Counter(t.phase for t in state.trajectories.values())
        outcomes = Counter(t.outcome for t in state.trajectories.values() if t.outcome)
        resolved, graded = pass_counts(state)  # the report's: a root and its branches once
        error = run.error if run is not None else None
        interrupted = self._interrupted(state)
        return CampaignStatus(
            campaign_id=state.id,
            name=state.spec.name,
            status=state.status,
            active=active,
            interrupted=interrupted,
            trajectories=len(state.trajectories),
            done=phases["done"],
            phases=dict(sorted(phases.items())),
            outcomes=dict(sorted(outcomes.items())),
            resolved=resolved,
            pass_rate=resolved / graded if graded else None,
            awaiting_client=awaiting,
            claimed=claimed,
            error=error,
            nodes=self._pool.nodes() if active and self._pool is not None else None,
            status_text=state.describe_status(),
            infra_failures=len(state.infra_failed),
            instances=state.spec.limits.instances,
            retrying=run.runner.retrying if run is not None else 0,
            reprovisioned=[InstanceReprovisioned(**event) for event in state.reprovisioned[-20:]],
            model_endpoints=model_endpoints(state.spec),
            endpoint_limits={key: e.limit for key, e in state.endpoint_limits.items()},
            cost_usd=state.spend.cost_usd if state.spend.records else None,
            spent_usd=state.spend.priced_usd,
            unpriced_records=state.spend.unpriced,
            cost_per_resolved_usd=(
                cost / resolved
                if (cost := state.spend.cost_usd) is not None and resolved and state.spend.records
                else None
            ),
            budget_usd=state.budget_usd,
            budget_exhausted=len(state.budget_exhausted),
            sampling=_sampling_progress(state),
            next_step=_next_step(
                state, active=active, awaiting=awaiting, error=error, interrupted=interrupted
            ),
        )

    def list(self, limit: int = 50) -> CampaignList:
        """The newest `limit` campaigns (unreadable ledgers are listed with their error)."""
        ids = self.store.list_ids()
        listed: list[CampaignStatus] = []
        for campaign_id in ids[-limit:] if limit > 0 else []:
            try:
                listed.append(self.status(campaign_id))
            except EvalServerError as exc:
                logger.warning("campaign %s is unreadable: %s", campaign_id, exc)
        interrupted = [status.campaign_id for status in listed if status.interrupted]
        hint = None
        if interrupted:
            hint = (
                f"{len(interrupted)} campaign(s) were interrupted (their process died or their "
                "server stopped): call resume with each id to continue it; a server started "
                "without --no-resume-running resumes them itself"
            )
        return CampaignList(campaigns=listed, total=len(ids), interrupted=interrupted, hint=hint)

    async def wait(
        self,
        campaign_id: str,
        wait_s: float,
        progress: ProgressFn,
        log: EventFn | None = None,
    ) -> CampaignStatus:
        """Waits up to `wait_s` for the campaign to stop, reporting progress on every change
        while it runs (never once the answer is ready) and handing `log` each of the
        campaign's events.

        Raises:
            NotFound: no such campaign.
        """
        with self.events.listen() as events:
            return await self._wait(campaign_id, wait_s, progress, events, log)

    async def _wait(
        self,
        campaign_id: str,
        wait_s: float,
        progress: ProgressFn,
        events: MemoryObjectReceiveStream[CampaignEvent],
        log: EventFn | None,
    ) -> CampaignStatus:
        status = self.status(campaign_id)
        run = self._runs.get(campaign_id)
        deadline = time.monotonic() + wait_s
        last = -1

        async def hand_over_events() -> None:
            # Published before the change they wake us for: all of them are here by now.
            for event in drain(events):
                if log is not None and event.campaign_id == campaign_id:
                    await log(event)

        while True:
            await hand_over_events()
            if run is None or run.finished.is_set() or time.monotonic() >= deadline:
                await hand_over_events()  # the run's last, if it ended meanwhile
                return status
            # No progress once the answer is ready (all done: the run is ending): the answer
            # says it all, and a notification just before it races the client's end of the
            # request (the TypeScript SDK drops the stdio session on it). Progress must only
            # grow within one request; re-scoring can lower `done`.
            if last < status.done < status.trajectories:
                last = status.done
                await progress(status.done, status.trajectories, _progress_line(status))
            with anyio.move_on_after(deadline - time.monotonic()):
                await run.changed.wait()
            status = self.status(campaign_id)

    def report(self, campaign_id: str) -> str:
        """The campaign's report as Markdown.

        Raises:
            NotFound: no such campaign.
        """
        return render_markdown(build_report(self._state(campaign_id)))

    def compare(self, campaign_a: str, campaign_b: str) -> Comparison:
        """Paired comparison of B against A on the tasks both scored.

        Raises:
            NotFound: either campaign does not exist.
            InvalidInput: the verdicts cannot be compared.
        """
        figures = build_comparison(self._state(campaign_a), self._state(campaign_b))
        return Comparison(
            campaign_a=campaign_a,
            campaign_b=campaign_b,
            comparison=PairedComparison.model_validate(
                {k: v for k, v in figures.items() if k not in ("a", "b")}
            ),
            markdown=render_comparison_markdown(figures),
        )

    def complete(
        self, argument: str, prefix: str, campaign_id: str | None = None
    ) -> tuple[Sequence[str], int]:
        """Values of a `campaign_id`, `trajectory_id` or `task_id` argument that start with
        `prefix` (trajectories and tasks of `campaign_id`), at most 100, and how many match.
        Anything else, or an unknown campaign, completes to nothing."""
        values: list[str] = []
        if argument == "campaign_id":
            values = list(reversed(self.store.list_ids()))  # the newest first
        elif argument in ("trajectory_id", "task_id") and campaign_id:
            try:
                trajectories = self._state(campaign_id).trajectories.values()
            except EvalServerError:
                return [], 0
            if argument == "trajectory_id":
                values = [t.id for t in trajectories]
            else:
                values = list(dict.fromkeys(t.task_id for t in trajectories))
        matching = [value for value in values if value.startswith(prefix)]
        return matching[:_COMPLETIONS], len(matching)

    def trajectory(self, campaign_id: str, trajectory_id: str) -> dict[str, Any]:
        """Where one trajectory stands: its phase, outcome, score and attempts (never its
        submission: an external agent may be the one asking).

        Raises:
            NotFound: no such campaign or trajectory.
        """
        state = self._state(campaign_id)
        trajectory = state.trajectories.get(trajectory_id)
        if trajectory is None:
            known = ", ".join(list(state.trajectories)[:5])
            raise NotFound(
                f"campaign {campaign_id} has no trajectory {trajectory_id!r} (e.g. {known}); "
                f"its ids are <task_id>@<sample>, as its report lists them"
            )
        return _trajectory_summary(trajectory)

    def task(self, campaign_id: str, task_id: str) -> dict[str, Any]:
        """One task's trajectories in a campaign, each as `trajectory` gives it (the task's
        prompt and gold answer are not shown: an external agent may be the one asking).

        Raises:
            NotFound: no such campaign, or no such task in it.
        """
        state = self._state(campaign_id)
        trajectories = [t for t in state.trajectories.values() if t.task_id == task_id]
        if not trajectories:
            known = ", ".join(dict.fromkeys(t.task_id for t in state.trajectories.values()))
            raise NotFound(f"campaign {campaign_id} has no task {task_id!r}; its tasks: {known}")
        resolved = sum(t.outcome == "resolved" for t in trajectories)
        return {
            "campaign_id": campaign_id,
            "task_id": task_id,
            "resolved": resolved,
            "trajectories": [_trajectory_summary(t) for t in trajectories],
        }

    # Internals.

    def _active(self, campaign_id: str) -> bool:
        run = self._runs.get(campaign_id)
        return run is not None and not run.finished.is_set()

    def _load(self, campaign_id: str) -> CampaignState:
        """The campaign's state from its ledger, with a not-found message for MCP clients.

        Raises:
            NotFound: no such campaign; the message names recent ids and how to list them.
            LedgerCorrupt: its ledger is corrupt before the end.
        """
        try:
            return self.store.load(campaign_id)
        except NotFound:
            known = self.store.list_ids()
            hint = f"recent: {', '.join(known[-5:])}; " if known else ""
            raise NotFound(
                f"no campaign {campaign_id!r} on this server ({hint}call list_campaigns for "
                "every id, or start_campaign to make one)"
            ) from None

    def _state(self, campaign_id: str) -> CampaignState:
        run = self._runs.get(campaign_id)
        if run is not None and run.runner.state is not None:
            return run.runner.state
        return self._load(campaign_id)


def _trajectory_summary(trajectory: TrajectoryState) -> dict[str, Any]:
    score = trajectory.score or {}
    return {
        "trajectory_id": trajectory.id,
        "task_id": trajectory.task_id,
        "sample": trajectory.sample,
        "phase": trajectory.phase,
        "outcome": trajectory.outcome,
        "resolved": score.get("resolved"),
        "score": score.get("score"),
        "attempts": trajectory.attempts,
        "error": (trajectory.error or {}).get("message"),
        "usage": trajectory.usage,
        "cost_usd": trajectory.spend.cost_usd if trajectory.spend is not None else None,
        "spend": trajectory.spend.as_json() if trajectory.spend is not None else None,
        "generation_s": trajectory.generation_s,
        "scoring_s": trajectory.scoring_s,
        "parent": trajectory.parent,
    }


def _sampling_progress(state: CampaignState) -> SamplingProgress | None:
    sampling = state.sampling
    if sampling is None:
        return None
    last = sampling.stopped or (sampling.rounds[-1] if sampling.rounds else None)
    return SamplingProgress(
        planned=sampling.total,
        most=sampling.most,
        rounds=len(sampling.rounds),
        half_width=last["half_width"] if last is not None else None,
        target_half_width=sampling.config.target_half_width,
        stopped=sampling.stopped["reason"] if sampling.stopped is not None else None,
    )


def _progress_line(status: CampaignStatus) -> str:
    rate = "-" if status.pass_rate is None else f"{100 * status.pass_rate:.1f}%"
    waiting = f", {status.awaiting_client} awaiting a client" if status.awaiting_client else ""
    planned = ""
    if (sampling := status.sampling) is not None and sampling.stopped is None:
        planned = f" planned so far (at most {sampling.most})"
    return (
        f"{status.campaign_id}: {status.done}/{status.trajectories}{planned} done, "
        f"{status.resolved} resolved (pass rate {rate}){waiting}"
    )


def _next_step(
    state: CampaignState, *, active: bool, awaiting: int, error: str | None, interrupted: bool
) -> str:
    cid = state.id
    if state.status == "finished" and state.budget_exhausted and not active:
        return (
            f"{state.describe_status()}: call resume with {cid!r} and a budget_usd larger than "
            f"${state.spend.priced_usd:.4f}, or read the report (resource campaign://{cid}/report)"
        )
    if state.status == "finished" and state.infra_failed and not active:
        return (
            f"{state.describe_status()}: call resume with {cid!r} to run them again, or read "
            f"the report (resource campaign://{cid}/report)"
        )
    if state.status == "finished":
        return f"finished: read the report (resource campaign://{cid}/report) or call score"
    if active and awaiting:
        return "external trajectories are waiting: call claim_trajectory, work, then submit"
    if active:
        return "running: call campaign_status with wait_s > 0 to follow its progress"
    if error:
        return f"stopped by an error; fix the cause, then call resume with {cid!r}"
    if interrupted:
        return (
            f"interrupted (its process died or its server stopped): call resume with {cid!r} "
            "to continue it"
        )
    return f"not running in this server: call resume with {cid!r} to continue it"
