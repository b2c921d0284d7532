"""The services behind the MCP tools: campaigns in the background, and external trajectories.

One `EvalService` lives as long as the server (its lifespan): it owns the campaign store, the
sandbox pool every campaign shares, the task group the campaigns run in, and the claim board of
external trajectories. Tools call it and get models or `EvalServerError`s back; nothing here
knows about MCP.
"""

from __future__ import annotations

import inspect
import logging
import secrets
from collections.abc import Callable, Collection, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Self

import anyio
import anyio.abc

from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.agents.external import ClaimBoard
from mcp_evalserver.agents.factory import build_agent
from mcp_evalserver.engine.parts import CampaignParts
from mcp_evalserver.engine.records import LedgerRecord
from mcp_evalserver.engine.report import CONFIDENCE, RESAMPLES, SEED, verdicts
from mcp_evalserver.engine.rescoring import request_rescore
from mcp_evalserver.engine.runner import CampaignRunner, check_new_budget
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import Conflict, EvalServerError, ExcInfo
from mcp_evalserver.runtime.limits import Limiters
from mcp_evalserver.runtime.sandboxes import SandboxPool
from mcp_evalserver.scoring.stats.summary import summarise_campaign
from mcp_evalserver.server.campaign_queries import CampaignQueries, CampaignRun, EventFn
from mcp_evalserver.server.events import EventHub, record_event, stopped_event
from mcp_evalserver.server.models import CampaignStatus, ScoringStatus, SweepStatus
from mcp_evalserver.server.privileges import Privileges
from mcp_evalserver.server.sweeps import Sweeps
from mcp_evalserver.server.trajectories import ExternalTrajectories
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.scorers import ScorerConfig

logger = logging.getLogger(__name__)

#: How long `resume`/`start_campaign` wait for a run to open its ledger (to report a Conflict).
_START_TIMEOUT_S = 30.0


class EvalService(CampaignQueries):
    """Campaigns and external trajectories for one server. Use as `async with`."""

    def __init__(
        self,
        state_dir: Path,
        *,
        base_dir: Path | None = None,
        ray_address: str | None = None,
        resume_running: bool = False,
        privileges: Privileges | None = None,
        trajectory_endpoints: EndpointFactory | None = None,
    ) -> None:
        self.store = CampaignStore(state_dir)
        #: Serves a `command` agent's MCP endpoints (the MCP app's; none: such agents refuse).
        self._trajectory_endpoints = trajectory_endpoints
        #: What clients may make the server do on its host (everything, unless told).
        self.privileges = privileges or Privileges()
        self.claims = ClaimBoard()
        self.base_dir = base_dir or Path.cwd()
        self._runs: dict[str, CampaignRun] = {}
        self._stack: AsyncExitStack | None = None
        self._group: anyio.abc.TaskGroup | None = None
        self._pool: SandboxPool | None = None
        self._ray_address = ray_address
        self._resume_running = resume_running
        self.sweeps: Sweeps | None = None
        #: What the running campaigns record, as events for log lines.
        self.events = EventHub()

    async def __aenter__(self) -> Self:
        async with AsyncExitStack() as stack:
            # The pool outlives the campaigns that use it: entered first, left last.
            self._pool = await stack.enter_async_context(SandboxPool(self._ray_address))
            self._group = await stack.enter_async_context(anyio.create_task_group())
            self.sweeps = Sweeps(
                self.store, self._group, self._pool, self.privileges, self._trajectory_endpoints
            )
            stack.callback(self.sweeps.cancel_all)
            stack.callback(self._cancel_all)
            if self._resume_running:
                self._group.start_soon(self._resume_interrupted)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: *ExcInfo) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(*exc_info)
        self._group = self._pool = None

    def _cancel_all(self) -> None:
        # Cancelled runs record `campaign_cancelled` by `shutdown`: the next server started
        # with `resume_running` continues them, and list_campaigns shows them as interrupted.
        for run in self._runs.values():
            run.runner.cancel(shutdown=True)

    async def _resume_interrupted(self) -> None:
        """Resumes, one after the other, the campaigns an earlier process left unfinished."""
        for campaign_id in self.store.list_ids():
            try:
                if self._interrupted(self.store.load(campaign_id)):
                    await self._launch(campaign_id)
                    logger.info("resumed interrupted campaign %s", campaign_id)
            except EvalServerError as exc:
                logger.warning("could not resume interrupted campaign %s: %s", campaign_id, exc)

    # What the MCP tools call.

    #: The operations `call` runs: those a worker of `--workers N` that does not drive
    #: campaigns asks the driving process for (server/front).
    CALLS = frozenset(
        {
            "start", "resume", "cancel", "status", "list", "wait", "report", "score", "compare",
            "trajectory", "task", "complete", "start_sweep", "wait_sweep",
        }
    )  # fmt: skip

    async def call(self, operation: Callable[..., Any], /, **arguments: Any) -> Any:
        """Runs one of `CALLS` (given as `EvalService.status`, say) with `arguments`, in the
        process that drives campaigns (this one; a worker's `FrontService` forwards it).

        Raises:
            EvalServerError: what the operation raises.
        """
        result = operation(self, **arguments)
        return await result if inspect.isawaitable(result) else result

    def trajectories(self) -> ExternalTrajectories:
        """The tools of external trajectories, over this server's claims."""
        return ExternalTrajectories(self.claims)

    def require_campaign(self, campaign_id: str) -> None:
        """Returns when the campaign exists (its ledger is not read): a claim on a mistyped
        id is refused at once, not after waiting for a trajectory that cannot come.

        Raises:
            NotFound: no such campaign; the message names recent ids and how to list them.
        """
        if campaign_id not in self._runs and not self.store.exists(campaign_id):
            self._load(campaign_id)

    def start_sweep(
        self,
        spec: CampaignSpec,
        *,
        levels: list[int],
        tasks: int,
        samples: int | None,
        sweep_id: str | None,
    ) -> SweepStatus:
        """Starts (or resumes) a concurrency sweep of `spec` (see `Sweeps.start`).

        Raises:
            InvalidInput: bad levels, task count or id, or a privilege the clients lack.
            Conflict: the sweep is running already, or the server is starting or stopping.
        """
        return self._running_sweeps().start(
            self.admit(spec), levels=levels, tasks=tasks, samples=samples, sweep_id=sweep_id
        )

    async def wait_sweep(self, sweep_id: str, wait_s: float) -> SweepStatus:
        """Waits up to `wait_s` for a sweep to finish, then says where it stands.

        Raises:
            NotFound: no such sweep.
        """
        return await self._running_sweeps().wait(sweep_id, wait_s)

    def _running_sweeps(self) -> Sweeps:
        if self.sweeps is None:
            raise Conflict("the server is not running (it is starting or stopping)")
        return self.sweeps

    # Campaigns.

    async def start(self, spec: CampaignSpec, campaign_id: str | None = None) -> CampaignStatus:
        """Records a campaign and starts running it in the background.

        Raises:
            InvalidInput: the spec's task file, agent or scorer is invalid, needs a privilege
                the server does not grant its clients, or the id is taken.
        """
        resolved = self.admit(spec)
        # Built now so a bad plugin path fails this call, not the background run; the run
        # uses them.
        parts = CampaignParts.build(
            resolved,
            claims=self.claims,
            trajectory_endpoints=self._trajectory_endpoints,
            ray_address=self._ray_address,
        )
        new_id = await self.store.create(resolved, campaign_id, scorer=parts.scorer)
        await self._launch(new_id, parts)
        return self.status(new_id)

    def admit(self, spec: CampaignSpec) -> CampaignSpec:
        """The spec resolved, once this server's clients may ask for all of it.

        Raises:
            InvalidInput: the task file is invalid, or the spec needs a privilege the server
                does not grant its clients (`Privileges.admit`).
        """
        return self.privileges.admit(spec, self.base_dir, ray_address=self._ray_address)

    async def resume(self, campaign_id: str, budget_usd: float | None = None) -> CampaignStatus:
        """Continues a campaign that is not finished and not running here; trajectories whose
        last outcome is an infrastructure failure run again (`retrying` says how many).
        `budget_usd` replaces its budget: larger than what it spent, it runs again what the old
        budget stopped.

        Idempotent: a campaign already running here (as one is after a restarted server
        resumed it by itself) is left running, and its status returned.

        Raises:
            NotFound: no such campaign.
            Conflict: another process runs it, it is finished with nothing left to retry, it
                stopped at its budget and no larger one is given, or it is running here and a
                new budget is given.
            InvalidInput: `budget_usd` is not more than it has spent.
        """
        if self._active(campaign_id):
            if budget_usd is not None:
                raise Conflict(
                    f"campaign {campaign_id} is running: a new budget applies from a resume; "
                    "cancel it, then resume it with budget_usd"
                )
            return self.status(campaign_id)
        state = self._load(campaign_id)
        check_new_budget(state, budget_usd)
        stopped = state.budget_exhausted
        if stopped and budget_usd is None and state.over_budget and not state.infra_failed:
            raise Conflict(
                f"campaign {campaign_id} {state.describe_status()}: ${state.spend.priced_usd:.4f}"
                " spent; call resume with a budget_usd larger than that"
            )
        if state.status == "finished" and not state.infra_failed and not stopped:
            raise Conflict(
                f"campaign {campaign_id} is finished: nothing to resume. Read its report "
                f"(resource campaign://{campaign_id}/report) or start a new campaign"
            )
        await self._launch(campaign_id, budget_usd=budget_usd)
        # From the ledger as it was: the run may not have recorded its retries (or its new
        # budget) yet.
        update: dict[str, Any] = {"retrying": len(state.infra_failed)}
        if budget_usd is not None:
            update["budget_usd"] = budget_usd
        return self.status(campaign_id).model_copy(update=update)

    async def cancel(self, campaign_id: str) -> CampaignStatus:
        """Stops a campaign running here; what it recorded stays, `resume` continues it.

        Raises:
            NotFound: no such campaign.
            Conflict: it is finished, or not running in this server.
        """
        run = self._runs.get(campaign_id)
        if run is None or run.finished.is_set():
            state = self._load(campaign_id)
            if state.status == "finished":
                raise Conflict(f"campaign {campaign_id} is finished: there is nothing to cancel")
            raise Conflict(
                f"campaign {campaign_id} is not running in this server (status {state.status}); "
                "nothing to cancel. Continue it with resume"
            )
        run.runner.cancel()
        with anyio.fail_after(_START_TIMEOUT_S):
            await run.finished.wait()
        return self.status(campaign_id)

    async def score(
        self,
        campaign_id: str,
        *,
        rescore: bool = False,
        scorer: ScorerConfig | None = None,
        outcomes: Collection[str] | None = None,
    ) -> ScoringStatus:
        """Scoring progress and statistics; with `rescore`, grades submissions again first.

        Re-scoring records the request in the ledger and runs the campaign in the background
        (only the chosen trajectories are scored again, with `scorer` if given).

        Raises:
            NotFound: no such campaign.
            Conflict: re-scoring while the campaign runs (here or elsewhere).
            InvalidInput: the scorer cannot be built, or needs a privilege the server does not
                grant its clients.
        """
        if scorer is not None:
            self.privileges.admit_plugins(scorer, "scorer")
        chosen: list[str] = []
        if rescore:
            if self._active(campaign_id):
                raise Conflict(
                    f"campaign {campaign_id} is running: re-score it once it stops (follow it "
                    "with campaign_status), or cancel_campaign it first"
                )
            # Checked before the request is recorded: the run it starts would send the keys.
            spec = self._load(campaign_id).spec
            if scorer is not None:
                spec = spec.model_copy(update={"scorer": scorer})
            self.privileges.admit_endpoints(spec, f"campaign {campaign_id}")
            config = scorer.model_dump(mode="json") if scorer is not None else None
            chosen = await request_rescore(
                self.store, campaign_id, scorer=config, outcomes=outcomes
            )
            if chosen:
                await self._launch(campaign_id)
        state = self._state(campaign_id)
        phases = [t.phase for t in state.trajectories.values()]
        finished = verdicts(state)
        summary = summarise_campaign(
            finished, confidence=CONFIDENCE, resamples=RESAMPLES, seed=SEED
        )
        if rescore:
            note = (
                f"re-scoring {len(chosen)} trajectories in the background; follow with "
                "campaign_status (wait_s > 0), then call score again for the new figures"
                if chosen
                else "no finished trajectory matched: nothing to re-score"
            )
        else:
            note = (
                "Scoring runs as each trajectory is generated. To grade submissions again "
                "(a fixed grader, another scorer), call score with rescore=true."
            )
        return ScoringStatus(
            campaign_id=campaign_id,
            awaiting_scoring=phases.count("generated"),
            scoring=phases.count("scoring"),
            scored=phases.count("done"),
            rescoring=len(chosen),
            summary=summary if finished else None,
            note=note,
        )

    def forward_events(self, deliver: EventFn) -> Callable[[], None]:
        """Hands every campaign event to `deliver`, in the background, until the function it
        returns is called (or the server stops).

        Raises:
            Conflict: the server is starting or stopping.
        """
        if self._group is None:
            raise Conflict("the server is not running (it is starting or stopping)")
        scope = anyio.CancelScope()

        async def forward() -> None:
            with scope, self.events.listen() as events:
                async for event in events:
                    await deliver(event)

        self._group.start_soon(forward)
        return scope.cancel

    # Internals.

    async def _launch(
        self,
        campaign_id: str,
        parts: CampaignParts | None = None,
        *,
        budget_usd: float | None = None,
        sandboxes: SandboxPool | None = None,
        capacity: Limiters | None = None,
    ) -> None:
        """Starts a run in the server's task group and waits until it has opened its ledger.

        `parts`: what a new campaign's spec built (else the agent is built here and the runner
        builds the scorer from the spec its ledger holds). `budget_usd`: its budget from now on.
        `sandboxes` and `capacity`: an evaluation set's pool and limits (`launch_together`).

        Raises:
            Conflict: the server is shutting down, or another process runs the campaign.
            InvalidInput: the campaign's agent or scorer cannot be built, or would send a key
                this server does not send for its clients (a campaign recorded elsewhere).
        """
        if self._group is None or self._pool is None:
            raise Conflict("the server is not running campaigns (it is starting or stopping)")
        state = self._load(campaign_id)
        self.privileges.admit_endpoints(state.spec, f"campaign {campaign_id}")
        if parts is None:
            agent = build_agent(
                state.spec.agent,
                claims=self.claims,
                trajectory_endpoints=self._trajectory_endpoints,
            )
            scorer = None
        else:
            agent, scorer = parts.agent, parts.scorer
        run = CampaignRun()

        def on_record(state: CampaignState, record: LedgerRecord) -> None:
            self.events.publish(record_event(state, record))
            run.on_record(state, record)

        run.runner = CampaignRunner(
            self.store,
            campaign_id,
            agent=agent,
            scorer=scorer,
            sandboxes=sandboxes or self._pool,
            on_record=on_record,
            budget_usd=budget_usd,
            capacity=capacity,
        )
        self._runs[campaign_id] = run
        self._group.start_soon(self._drive, run)
        with anyio.fail_after(_START_TIMEOUT_S):
            async with anyio.create_task_group() as group:

                async def stop_on(event: anyio.Event) -> None:
                    await event.wait()
                    group.cancel_scope.cancel()

                group.start_soon(stop_on, run.started)
                group.start_soon(stop_on, run.finished)
        if run.error is not None and not run.started.is_set():
            self._runs.pop(campaign_id, None)
            raise Conflict(f"campaign {campaign_id} could not start: {run.error}")

    async def launch_together(self, campaign_ids: Sequence[str]) -> None:
        """Runs campaigns as one evaluation set, each as `resume` would: on a sandbox pool of
        their own that provisions each task's instance once for all of them and closes it when
        the last has finished with it, under the first one's limits shared by all (so they
        interleave); returns once each has started.

        Raises:
            Conflict: the server is stopping, or a campaign cannot start (those before it run).
            InvalidInput: as `_launch`.
        """
        if self._group is None:
            raise Conflict("the server is not running campaigns (it is starting or stopping)")
        capacity = Limiters(self._load(campaign_ids[0]).spec.limits)
        launched: list[CampaignRun] = []
        launching = anyio.Event()

        async def host(*, task_status: anyio.abc.TaskStatus[SandboxPool]) -> None:
            async with SandboxPool(self._ray_address, sharers=len(campaign_ids)) as pool:
                task_status.started(pool)
                await launching.wait()
                for run in launched:
                    await run.finished.wait()

        pool = await self._group.start(host)
        try:
            for campaign_id in campaign_ids:
                await self._launch(campaign_id, sandboxes=pool, capacity=capacity)
                launched.append(self._runs[campaign_id])
        finally:
            launching.set()

    async def _drive(self, run: CampaignRun) -> None:
        campaign_id = run.runner.campaign_id
        try:
            await run.runner.run()
        except EvalServerError as exc:
            run.error = str(exc)
            logger.warning("campaign %s stopped: %s", campaign_id, exc)
        except Exception as exc:
            reference = secrets.token_hex(4)
            run.error = f"internal error (reference {reference}): {type(exc).__name__}"
            logger.exception("campaign %s failed (reference %s)", campaign_id, reference)
        finally:
            self.events.publish(stopped_event(run.runner.state, campaign_id, run.error))
            run.finished.set()
            run.changed.set()
