"""The runner: drives one campaign to completion.

The runner replays the ledger, then drives every unfinished trajectory in an anyio task group:
generation (bounded per instance and globally, timed out, retried with backoff on
infrastructure errors only), then scoring as its own phase (bounded separately), each step
recorded in the ledger before it counts. Running a campaign again is resuming it: scored
trajectories are done, generated ones are only scored, interrupted generations start a new
attempt, and trajectories that ended in an infrastructure failure run again from the phase it
struck (a harness's fault is never a result). Nothing completed runs twice. What one run does
to each trajectory is `drive.RunDrive`'s.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from mcp_evalserver.agents.base import Agent
from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.engine.costs import check_budget_prices, price_table
from mcp_evalserver.engine.drive import RecordObserver, RunDrive
from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter
from mcp_evalserver.engine.parts import CampaignParts
from mcp_evalserver.engine.records import (
    BudgetSet,
    CampaignCancelled,
    EndpointCalls,
    RetryRequested,
    RunStarted,
)
from mcp_evalserver.engine.replay import replay
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import NODES_FILE, CampaignStore
from mcp_evalserver.errors import EvalServerError, InvalidInput, sole_error
from mcp_evalserver.runtime import tracing
from mcp_evalserver.runtime.limits import Limiters, RetryPolicy
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.scoring.base import Scorer


def resumed_endpoints(state: CampaignState) -> dict[str, tuple[int, bool]]:
    """Where each adaptive endpoint limit was left: a resumed run starts from there."""
    return {key: (e.limit, e.decreases > 0) for key, e in state.endpoint_limits.items()}


NODES_INTERVAL_S = 1.0


@dataclass
class RunProgress:
    """Counters a progress display reads while a run goes on (the total it reads from the
    live state: branches join it as they are made)."""

    started_monotonic: float
    done_at_start: int


class CampaignRunner:
    """Drives one campaign to completion (or until cancelled). One runner per process."""

    def __init__(
        self,
        store: CampaignStore,
        campaign_id: str,
        *,
        agent: Agent | None = None,
        scorer: Scorer | None = None,
        on_record: RecordObserver | None = None,
        sandboxes: SandboxPool | None = None,
        ray_address: str | None = None,
        trajectory_endpoints: EndpointFactory | None = None,
        budget_usd: float | None = None,
        capacity: Limiters | None = None,
    ) -> None:
        """The agent and the scorer are built from the spec the ledger holds
        (`CampaignParts.build`) unless given (built when the campaign was created, or a
        test's). `trajectory_endpoints` serves a `command` agent's MCP endpoints (given by the
        CLI and the server, the layers that know MCP). `budget_usd` replaces the campaign's
        budget from this run on (a resume that raises it continues what the old one stopped).
        `capacity`: an evaluation set's limiters, shared with its other campaigns (`Limiters`).
        """
        self.store = store
        self._capacity = capacity
        self._budget_usd = budget_usd
        self._trajectory_endpoints = trajectory_endpoints
        self._ray_address = ray_address  # for a pool of its own, when not given one
        self._sandboxes = sandboxes
        self.campaign_id = campaign_id
        self.directory = store.directory(campaign_id)
        self._agent = agent
        self._scorer = scorer
        self._on_record = on_record
        self._cancel_scope: anyio.CancelScope | None = None
        self._cancel_requested = False
        self._stopped_by: Literal["request", "shutdown"] = "request"
        self.state: CampaignState | None = None
        self.progress: RunProgress | None = None
        #: Trajectories this run sent back because their last outcome was an infrastructure
        #: failure (set once the run has started).
        self.retrying = 0

    def cancel(self, *, shutdown: bool = False) -> None:
        """Stops the run: in-flight trajectories are cancelled, the ledger stays consistent.

        `shutdown`: the process is stopping, nobody asked to stop the campaign; the record says
        so, and a server started with `resume_running` continues it.
        """
        self._stopped_by = "shutdown" if shutdown else "request"
        self._cancel_requested = True
        if self._cancel_scope is not None:
            self._cancel_scope.cancel()

    async def run(self) -> CampaignState:
        """Runs (or resumes) the campaign until every trajectory is done or it is cancelled.

        Raises:
            NotFound: the campaign does not exist, or its creation was interrupted.
            Conflict: another process is running it.
            InvalidInput: its agent or scorer cannot be built, or it places instances on Ray
                and Ray is not installed.
        """
        if not (self.directory / LEDGER_FILE).is_file():
            self.store.load(self.campaign_id)  # raises NotFound with the list of campaigns
        try:
            if self._sandboxes is not None:
                return await self._run(self._sandboxes)
            async with SandboxPool(self._ray_address) as sandboxes:
                return await self._run(sandboxes)
        except BaseExceptionGroup as group:
            # Task groups (the pool's, the trajectories') wrap what the run raises; callers
            # catch our errors themselves and show their message.
            error = sole_error(group)
            if isinstance(error, EvalServerError):
                raise error from None
            raise

    async def _write_nodes(self, sandboxes: SandboxPool) -> None:
        """Keeps `nodes.json` (where sandbox work runs now) fresh for `status` in other processes.

        Written only when instances run on a cluster; a snapshot, not a record: the ledger
        keeps which node each step ran on.
        """
        path = self.directory / NODES_FILE
        last = None
        while True:
            nodes = sandboxes.nodes()
            if nodes is not None and nodes != last:
                snapshot = json.dumps({"ts": time.time(), "nodes": nodes}, indent=1)
                await anyio.to_thread.run_sync(_replace_file, path, snapshot)
                last = nodes
            await anyio.sleep(NODES_INTERVAL_S)

    async def _run(self, sandboxes: SandboxPool) -> CampaignState:
        async with await LedgerWriter.open(self.directory, self.campaign_id) as ledger:
            if not ledger.recovered:
                raise self.store.never_created(self.campaign_id)
            state = replay(ledger.recovered)
            ledger.recovered = []
            self.state = state
            spec = state.spec
            prices = price_table(spec)
            budget = check_new_budget(state, self._budget_usd)
            check_budget_prices(spec, prices, budget)
            # Resumed where Ray is missing: say so before this run records anything.
            parts = CampaignParts.build(
                spec,
                agent=self._agent,
                scorer=self._scorer,
                trajectory_endpoints=self._trajectory_endpoints,
                ray_address=sandboxes.ray_address,
            )
            drive = RunDrive(
                ledger=ledger,
                state=state,
                agent=parts.agent,
                scorer=parts.scorer,
                limiters=Limiters(
                    spec.limits,
                    resumed_endpoints=resumed_endpoints(state),
                    capacity=self._capacity,
                ),
                policy=RetryPolicy.of(spec.limits),
                tasks={task.id: task for task in spec.task_list()},
                directory=self.directory,
                on_record=self._on_record,
                sandboxes=sandboxes,
                prices=prices,
            )
            # Entered before the run records anything: a missing `otel` extra is said first.
            async with tracing.campaign_run(self.campaign_id, _run_attributes(state)) as span:
                await self._drive(drive, state, budget)
                span.set_attribute("mcp_evalserver.campaign.status", state.status)
                span.set_attribute("mcp_evalserver.campaign.done", state.done_count)
                return state

    async def _drive(self, drive: RunDrive, state: CampaignState, budget: float | None) -> None:
        """Runs the unfinished trajectories of `state`, each step recorded by `drive`, under
        `budget` from now on."""
        self.progress = RunProgress(time.monotonic(), state.done_count)
        await drive.record(RunStarted(pid=os.getpid(), resumed=state.runs > 0))
        stopped = state.budget_exhausted
        if budget != state.budget_usd or (stopped and not state.over_budget):
            # What the budget stopped runs again when the budget now allows it (adaptive
            # sampling decides its next round once they are done, as if never stopped).
            again = stopped if budget is None or state.spend.priced_usd < budget else []
            await drive.record(BudgetSet(budget_usd=budget, trajectories=again))
        if infra_failed := state.infra_failed:
            await drive.record(RetryRequested(trajectories=infra_failed))
            self.retrying = len(infra_failed)
        with anyio.CancelScope() as self._cancel_scope:
            if self._cancel_requested:
                self._cancel_scope.cancel()
            async with anyio.create_task_group() as watching:
                watching.start_soon(self._write_nodes, drive.sandboxes)
                # Adaptive sampling plans rounds: each starts once the last is scored.
                while True:
                    await drive.unfinished()
                    if not await drive.plan_samples():
                        break
                watching.cancel_scope.cancel()
        if calls := drive.limiters.endpoint_calls():
            # Per run, not per call: a count of refusals (429, 5xx) for the sweep and the
            # report. A run killed outright loses its counts, never a trajectory.
            with anyio.CancelScope(shield=True):
                await drive.record(EndpointCalls(calls=calls))
        if self._cancel_requested and state.status != "finished":
            with anyio.CancelScope(shield=True):
                cancelled = CampaignCancelled(done=state.done_count, by=self._stopped_by)
                await drive.record(cancelled)


def _run_attributes(state: CampaignState) -> dict[str, Any]:
    spec = state.spec
    return {
        "mcp_evalserver.campaign.name": spec.name,
        "mcp_evalserver.campaign.resumed": state.runs > 0,
        "mcp_evalserver.campaign.run": state.runs + 1,
        "mcp_evalserver.campaign.trajectories": len(state.trajectories),
        "gen_ai.agent.name": spec.agent.type,
        "mcp_evalserver.scorer": spec.scorer.type,
    }


def check_new_budget(state: CampaignState, budget_usd: float | None) -> float | None:
    """The budget a run continues with: `budget_usd` when given, else the ledger's.

    Raises:
        InvalidInput: `budget_usd` is not more than what the campaign has spent.
    """
    if budget_usd is None:
        return state.budget_usd
    spent = state.spend.priced_usd
    if budget_usd <= spent:
        raise InvalidInput(
            f"budget_usd ${budget_usd:g} is not more than the ${spent:.4f} campaign "
            f"{state.id} has spent; give a larger budget"
        )
    return budget_usd


def _replace_file(path: Path, text: str) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)
