"""The runner: drives one campaign to completion.

The runner replays the ledger, then drives every unfinished trajectory in an anyio task group:
generation (bounded per instance and globally, timed out, retried with backoff on
infrastructure errors only), then scoring as its own phase (bounded separately), each step
recorded in the ledger before it counts. Running a campaign again is resuming it: scored
trajectories are done, generated ones are only scored, interrupted generations start a new
attempt, and trajectories that ended in an infrastructure failure run again from the phase it
struck (a harness's fault is never a result). Nothing completed runs twice.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
import anyio.abc
import anyio.lowlevel

from mcp_evalserver.agents.base import Agent, Recorded, TrajectoryContext
from mcp_evalserver.agents.command import EndpointFactory
from mcp_evalserver.engine.agent_files import AgentFiles, KeptBoxes, export_agent_files
from mcp_evalserver.engine.costs import check_budget_prices, price_table
from mcp_evalserver.engine.ledger import LEDGER_FILE, LedgerWriter
from mcp_evalserver.engine.parts import CampaignParts
from mcp_evalserver.engine.records import (
    AttemptStarted,
    BranchRestarted,
    BudgetExhausted,
    BudgetSet,
    CampaignCancelled,
    CheckpointKept,
    EndpointCalls,
    EndpointLimitChanged,
    Generated,
    GenerationFailed,
    InstanceReprovisioned,
    LedgerRecord,
    ModelUsageRecorded,
    RetryRequested,
    RunStarted,
    SamplesPlanned,
    Scored,
    ScoringFailed,
    ScoringStarted,
    TrajectoryBranched,
)
from mcp_evalserver.engine.sampling import next_decision
from mcp_evalserver.engine.state import CampaignState, TrajectoryState, apply_record, replay
from mcp_evalserver.engine.store import NODES_FILE, CampaignStore
from mcp_evalserver.errors import (
    Conflict,
    EvalServerError,
    InfrastructureError,
    InvalidInput,
    LedgerCorrupt,
    LimitExceeded,
    NotFound,
    sole_error,
)
from mcp_evalserver.runtime import tracing
from mcp_evalserver.runtime.adaptive import LimitChange
from mcp_evalserver.runtime.artifacts import read_artifact
from mcp_evalserver.runtime.limits import Limiters, RetryPolicy
from mcp_evalserver.runtime.pricing import Priced, PriceTable
from mcp_evalserver.runtime.sandboxes import (
    InstanceCheck,
    Reprovisioned,
    SandboxPool,
    Slot,
    TrajectorySandbox,
    workspace_name,
)
from mcp_evalserver.sandbox.base import Workspace
from mcp_evalserver.scoring.base import Scorer, ScoreResult, ScoringContext
from mcp_evalserver.spec.campaign import CampaignSpec, Task
from mcp_evalserver.spec.submission import (
    MAX_COST_USD,
    MAX_TOKENS,
    ModelUsage,
    Submission,
    Usage,
    UsageSource,
)

logger = logging.getLogger(__name__)

#: Branches one `fork_trajectory` call may make.
MAX_BRANCHES = 64
#: The largest checkpoint kept with the ledger for branches that must start again.
MAX_KEPT_BYTES = 256 << 20

_T = TypeVar("_T")
RecordObserver = Callable[[CampaignState, LedgerRecord], None]


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
            drive = _Drive(
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

    async def _drive(self, drive: _Drive, state: CampaignState, budget: float | None) -> None:
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


def _agent_attributes(spec: CampaignSpec) -> dict[str, Any]:
    model = getattr(spec.agent, "model", None)
    return {"gen_ai.request.model": model} if isinstance(model, str) else {}


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


def _why_not_generated(trajectory: TrajectoryState) -> str:
    """Why an attempt ended without a `generated` record, from what its failure recorded."""
    if trajectory.outcome == "budget_exhausted":
        return "the campaign's budget was spent first"
    error = trajectory.error or {}
    what = f"{error.get('type', 'error')}: {error.get('message', 'no message')}"
    return f"its attempt ended first ({what})"


def _replace_file(path: Path, text: str) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


class _BudgetStop(Exception):
    """A generation stopped because the campaign's budget was spent."""


@dataclass(frozen=True)
class _Failed:
    """A step that failed (recorded): the delay before its next attempt, if there is one."""

    delay: float


@dataclass
class _Drive:
    """The work of one run: what every trajectory task shares."""

    ledger: LedgerWriter
    state: CampaignState
    agent: Agent
    scorer: Scorer
    limiters: Limiters
    policy: RetryPolicy
    tasks: dict[str, Task]
    directory: Path
    on_record: RecordObserver | None
    sandboxes: SandboxPool
    prices: PriceTable
    fresh_submissions: dict[str, Submission] = field(default_factory=dict)
    # What scorers that grade the agent's box get of it (`Scorer.agent_state`).
    kept: KeptBoxes = field(default_factory=KeptBoxes)
    #: Per task, what the scorer checks on each new instance (before generation uses it).
    instance_checks: dict[str, InstanceCheck | None] = field(default_factory=dict)
    group: anyio.abc.TaskGroup | None = None
    #: The trajectories sharing each instance (by key), as of `sharing_indexed` trajectories.
    sharing_index: dict[str, list[TrajectoryState]] = field(default_factory=dict)
    sharing_indexed: int = -1
    #: Forked workspaces waiting for the first attempt of their branch.
    forks: dict[str, Workspace] = field(default_factory=dict)
    #: Set once the checkpoint a branch of this run starts from is kept (or known not to be).
    keeping: dict[str, anyio.Event] = field(default_factory=dict)
    #: Per generating trajectory, the scope the budget cancels it by.
    generating: dict[str, anyio.CancelScope] = field(default_factory=dict)
    #: Trajectories whose current attempt metered its agent's calls.
    metered: set[str] = field(default_factory=set)
    #: Cost of `model_usage` records written but not yet applied (waiting to be durable).
    unapplied_usd: float = 0.0

    def __post_init__(self) -> None:
        self.limiters.on_endpoint_limit = self._endpoint_limit_changed
        self.instance_checks = {
            t: self.scorer.instance_check(task) for t, task in self.tasks.items()
        }

    async def unfinished(self) -> None:
        """Drives every unfinished trajectory (and the branches they make) to its end."""
        async with anyio.create_task_group() as group:
            self.group = group  # branches join the run's trajectories
            unfinished = [t for t in self.state.trajectories.values() if not t.done]
            for number, trajectory in enumerate(unfinished, start=1):
                group.start_soon(self.trajectory, trajectory)
                # Let the first trajectories start while the rest are spawned.
                if number % 16 == 0:
                    await anyio.lowlevel.checkpoint()
        self.group = None

    async def plan_samples(self) -> bool:
        """Records adaptive sampling's next decision, made on scored outcomes only (every
        trajectory is done by now); whether it planned samples to run."""
        decision = next_decision(self.state)
        if decision is None:
            return False
        await self.record(decision)
        if isinstance(decision, SamplesPlanned):
            return True
        # Instances kept for more samples are not needed any more.
        for task in {task.instance_key: task for task in self.tasks.values()}.values():
            await self._release_if_finished(task)
        return False

    async def _endpoint_limit_changed(self, change: LimitChange) -> None:
        await self.record(EndpointLimitChanged(**dataclasses.asdict(change)), durable=False)

    async def record(self, record: LedgerRecord, *, durable: bool = True) -> None:
        """Makes a step durable, then applies it to the live state (same code as replay)."""
        written = await self.ledger.append(record, durable=durable)
        apply_record(self.state, written)
        if self.on_record is not None:
            self.on_record(self.state, written)

    @property
    def over_budget(self) -> bool:
        """The ledger's running total (with what it is writing) has reached the budget."""
        budget = self.state.budget_usd
        return budget is not None and self.state.spend.priced_usd + self.unapplied_usd >= budget

    async def meter(self, trajectory_id: str, usage: ModelUsage, source: UsageSource) -> Priced:
        """Records model usage of a trajectory and what it cost; once the total reaches the
        budget, stops every generation: an agent that meters its calls at its next call (here:
        what it paid for is recorded), any other where it stands.

        Raises:
            InvalidInput: the campaign has a budget and the cost is unknown (recorded as
                unknown, unless the agent's program reported it: then refused unrecorded).
            _BudgetStop: the budget is spent and `source` is an agent that meters its calls.
        """
        priced = self.prices.price(usage)
        unknown = priced.cost_usd is None and self.state.budget_usd is not None
        if unknown and source == "reported":
            raise InvalidInput(
                f"report_usage: this campaign has a budget, and the usage of model "
                f"{usage.model!r} has no cost: give `cost_usd` (what your provider charged), "
                "or a model the campaign's prices name"
            )
        record = ModelUsageRecorded(
            trajectory=trajectory_id,
            source=source,
            model=usage.model,
            input_tokens=usage.input_tokens,
            cached_input_tokens=usage.cached_input_tokens,
            output_tokens=usage.output_tokens,
            requests=usage.requests,
            cost_usd=priced.cost_usd,
            priced_by=priced.priced_by,
        )
        cost = priced.cost_usd or 0.0
        # Counted before it is durable: a trajectory that starts meanwhile must see it. And
        # shielded: the budget may cancel the very generation that reports it.
        self.unapplied_usd += cost
        try:
            with anyio.CancelScope(shield=True):
                await self.record(record)
        finally:
            self.unapplied_usd -= cost
        if source == "agent":
            self.metered.add(trajectory_id)
        if self.over_budget:
            if not self.agent.meters_calls:
                for scope in self.generating.values():
                    scope.cancel()
            elif source == "agent":
                raise _BudgetStop
        if unknown:
            raise InvalidInput(
                f"the usage of model {usage.model!r} has no cost: the provider gave none and "
                "the price table has no price for it, and this campaign has a budget; give "
                "`cost_usd`, or a model the spec's `prices` name"
            )
        return priced

    async def trajectory(self, trajectory: TrajectoryState) -> None:
        # Resumed: an earlier run left it part done (its trace there never ended).
        resumed = trajectory.attempts > 0 or trajectory.phase != "pending"
        attributes = {
            "mcp_evalserver.task.id": trajectory.task_id,
            "mcp_evalserver.trajectory.sample": trajectory.sample,
            "mcp_evalserver.trajectory.resumed": resumed,
        }
        if resumed:
            attributes["mcp_evalserver.trajectory.resumed_from"] = trajectory.phase
        if trajectory.parent is not None:
            attributes["mcp_evalserver.trajectory.parent"] = trajectory.parent
        with tracing.trajectory(self.state.id, trajectory.id, attributes) as span:
            await self._drive_trajectory(trajectory)
            if trajectory.outcome is not None:
                span.set_attribute("mcp_evalserver.trajectory.outcome", trajectory.outcome)

    async def _drive_trajectory(self, trajectory: TrajectoryState) -> None:
        task = self.tasks[trajectory.task_id]
        # Tasks without an environment share no instance, so no instance limit applies to them.
        # The instance limiter comes first: a trajectory waiting for its instance then holds no
        # global slot that trajectories of other instances could use.
        has_instance = task.image is not None or task.path is not None
        instance = self.limiters.instance(task.instance_key) if has_instance else nullcontext()
        try:
            while trajectory.phase in ("pending", "generating"):
                async with instance, Slot(self.limiters.trajectories) as slot:
                    delay = await self._generate_once(trajectory, task, slot)
                if delay:
                    await anyio.sleep(delay)
            # Evaluations have a limit of their own: queued behind the instance's pending
            # generations (FIFO), they would wait until every generation had started.
            while trajectory.phase in ("generated", "scoring"):
                async with Slot(self.limiters.scoring) as slot:
                    delay = await self._score_once(trajectory, task, slot)
                if delay:
                    await anyio.sleep(delay)
        finally:
            with anyio.CancelScope(shield=True):
                await self.kept.discard(trajectory.id)
        await self._release_if_finished(task)

    def _sharing(self, key: str) -> list[TrajectoryState]:
        """The trajectories whose tasks share the instance `key` names.

        Asked each time a trajectory finishes: a scan of every trajectory (and a key made for
        each) per finish made a campaign's bookkeeping grow with the square of its size. The
        index is made again only when trajectories were added (branches, adaptive samples).
        """
        trajectories = self.state.trajectories
        if self.sharing_indexed != len(trajectories):
            keys = {task_id: task.instance_key for task_id, task in self.tasks.items()}
            index: dict[str, list[TrajectoryState]] = {}
            for trajectory in trajectories.values():
                index.setdefault(keys[trajectory.task_id], []).append(trajectory)
            self.sharing_index, self.sharing_indexed = index, len(trajectories)
        return self.sharing_index.get(key, [])

    async def _release_if_finished(self, task: Task) -> None:
        """Closes the task's instance once every trajectory of every task sharing it is done
        (idle now, or when its last step ends): the campaign moves on without it."""
        sharing = self._sharing(task.instance_key)
        # A task that adaptive sampling may give more samples keeps its instance.
        sampling = self.state.sampling
        growing = sampling is not None and any(sampling.may_grow(t.task_id) for t in sharing)
        if not growing and all(t.done for t in sharing):
            await self.sandboxes.release(task, self.state.spec.sandbox, by=self.state.id)

    async def _generate_once(self, trajectory: TrajectoryState, task: Task, slot: Slot) -> float:
        """One generation attempt (in `slot`); returns the backoff delay before the next."""
        attempt = trajectory.attempts + 1
        tid = trajectory.id
        if self.over_budget:
            await self._budget_exhausted(trajectory)
            return 0.0
        await self.record(AttemptStarted(trajectory=tid, attempt=attempt), durable=False)
        self.metered.discard(tid)
        sandbox = self._sandbox(task, tid, f"a{attempt}", slot)
        restart = False
        if (fork := self.forks.pop(tid, None)) is not None:
            sandbox.adopt(fork)  # a branch starts from its parent's checkpoint
        else:
            restart = trajectory.parent is not None and sandbox.available

        async def branch(n: int) -> list[str]:
            return await self.branch(trajectory, sandbox, n)

        recorded = Recorded(tid)
        wanted = self.scorer.agent_state(task)
        files = AgentFiles()
        context = TrajectoryContext(
            campaign_id=self.state.id,
            trajectory_id=tid,
            task=task,
            sample=trajectory.sample,
            attempt=attempt,
            campaign_dir=self.directory,
            limiters=self.limiters,
            sandbox=sandbox,
            branch=branch,
            meter=functools.partial(self.meter, tid),
            recorded=recorded,
        )

        spec = self.state.spec
        traced = {"mcp_evalserver.attempt": attempt, **_agent_attributes(spec)}

        async def generate() -> Submission:
            with anyio.CancelScope() as stop:
                self.generating[tid] = stop
                try:
                    with tracing.invoke_agent(spec.agent.type, traced) as span:
                        if restart:
                            await self._restart_branch(trajectory, sandbox)
                        submission = await self.agent.generate(context)
                        if wanted != "none":
                            nonlocal files
                            files = await export_agent_files(sandbox)
                        if (usage := submission.usage) is not None:
                            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
                            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
                        return submission
                finally:
                    del self.generating[tid]
            raise _BudgetStop

        timeout = self.state.spec.limits.trajectory_timeout_s
        try:
            keep = wanted == "workspace"
            done = await self._step(
                trajectory, GenerationFailed, sandbox, timeout, generate, keep=keep
            )
            if isinstance(done, _Failed):
                recorded.fail(_why_not_generated(trajectory))
                return done.delay
            submission, duration = done
            if keep:
                self.kept.sandboxes[tid] = sandbox  # the scorer grades in it
            if wanted != "none":
                self.kept.files[tid] = files
            # Shielded: what was handed in is recorded even when the run stops meanwhile
            # (a few writes and an fsync), so its acknowledgement can say it counts.
            with anyio.CancelScope(shield=True):
                await self._record_generated(
                    tid, attempt, submission, duration, sandbox.node, files
                )
        except anyio.get_cancelled_exc_class():
            recorded.fail("the campaign stopped (cancelled, or its server shut down) first")
            raise
        except BaseException as exc:
            recorded.fail(f"writing it failed ({type(exc).__name__}: {exc})")
            raise
        recorded.succeed()
        self.fresh_submissions[tid] = submission
        return 0.0

    async def _record_generated(
        self,
        tid: str,
        attempt: int,
        submission: Submission,
        duration: float,
        node: str | None,
        files: AgentFiles,
    ) -> None:
        """Records what an attempt handed in: its usage (unless metered), artifacts, record."""
        if submission.usage is not None and tid not in self.metered:
            # An agent that metered none of its calls gives their sum when it hands in.
            await self._record_handed_in(tid, submission.usage)
        generated = Generated(
            trajectory=tid,
            attempt=attempt,
            submission=await self._store_submission(submission, files),
            usage=submission.usage.model_dump() if submission.usage else None,
            duration_s=duration,
            node=node or None,
        )
        await self.record(generated)

    async def _score_once(self, trajectory: TrajectoryState, task: Task, slot: Slot) -> float:
        """One scoring attempt (in `slot`); returns the backoff delay before the next."""
        tid = trajectory.id
        await self.record(ScoringStarted(trajectory=tid), durable=False)
        # Scored straight from memory when this run generated it; from its artifacts on resume.
        submission = self.fresh_submissions.pop(tid, None)
        if submission is None:
            submission = await anyio.to_thread.run_sync(self._load_submission, trajectory)
        kept = self.kept.sandboxes.pop(tid, None)
        sandbox = kept or self._sandbox(task, tid, f"eval{trajectory.scoring_failures}", slot)
        files = AgentFiles()
        if self.scorer.agent_state(task) != "none":
            if tid in self.kept.files:  # generated in this run
                files = self.kept.files.pop(tid)
            else:
                files = await anyio.to_thread.run_sync(
                    AgentFiles.load, self.directory, trajectory.submission or {}
                )
        context = ScoringContext(
            campaign_id=self.state.id,
            trajectory_id=tid,
            task=task,
            submission=submission,
            campaign_dir=self.directory,
            limiters=self.limiters,
            sandbox=sandbox,
            meter=functools.partial(self.meter, tid),
            agent_files=files.archive,
            agent_files_missing=files.missing,
            in_agent_workspace=kept is not None,
        )
        timeout = self.state.spec.limits.scoring_timeout_s

        async def evaluate() -> ScoreResult:
            traced = {"mcp_evalserver.attempt": trajectory.scoring_failures + 1}
            with tracing.scoring(self.state.spec.scorer.type, traced) as span:
                result = await self.scorer.score(context)
                span.set_attribute("mcp_evalserver.score.status", result.status)
                span.set_attribute("mcp_evalserver.score.resolved", result.resolved)
                span.set_attribute("mcp_evalserver.score.value", result.score)
                return result

        done = await self._step(trajectory, ScoringFailed, sandbox, timeout, evaluate)
        if isinstance(done, _Failed):
            return done.delay
        result, duration = done
        score = result.model_dump(mode="json")
        await self.record(
            Scored(trajectory=tid, score=score, duration_s=duration, node=sandbox.node or None)
        )
        return 0.0

    async def _step(
        self,
        trajectory: TrajectoryState,
        failed: type[GenerationFailed] | type[ScoringFailed],
        sandbox: TrajectorySandbox,
        limit_s: float,
        work: Callable[[], Awaitable[_T]],
        *,
        keep: bool = False,
    ) -> tuple[_T, float] | _Failed:
        """One attempt of a phase (generation or scoring) in its own sandbox, under its
        timeout: its result and how long it took, or, once the failure is recorded (`failed`),
        the delay before the next attempt.

        An infrastructure error is retried with backoff until its cause's budget is spent;
        any other error, and a timeout, end the trajectory (a result, never retried). With
        `keep`, a sandbox whose work succeeded stays open (the caller closes it).
        """
        started = time.monotonic()
        phase = "generation" if failed is GenerationFailed else "scoring"
        succeeded = False
        try:
            with anyio.move_on_after(limit_s) as scope:
                try:
                    result = await work()
                    succeeded = True
                finally:
                    if not (keep and succeeded):
                        await sandbox.aclose()
        except _BudgetStop:
            await self._budget_exhausted(trajectory)
            return _Failed(0.0)
        except InfrastructureError as exc:
            failures = trajectory.failure_causes.get(type(exc).__name__, 0) + 1
            final = self.policy.gives_up_after(failures)
            await self._failed(failed, trajectory, exc, started, final=final, node=sandbox.node)
            return _Failed(0.0 if final else self.policy.delay(failures))
        except Exception as exc:
            await self._failed(failed, trajectory, exc, started, outcome="error", node=sandbox.node)
            return _Failed(0.0)
        duration = round(time.monotonic() - started, 6)
        if scope.cancelled_caught:
            message = f"{phase} exceeded {limit_s:g}s"
            await self.record(
                failed(
                    trajectory=trajectory.id,
                    outcome="timeout",
                    final=True,
                    error={"type": "Timeout", "message": message},
                    duration_s=duration,
                )
            )
            return _Failed(0.0)
        return result, duration

    async def _budget_exhausted(self, trajectory: TrajectoryState) -> None:
        spent = round(self.state.spend.priced_usd, 10)
        budget = self.state.budget_usd
        await self.record(
            BudgetExhausted(trajectory=trajectory.id, spent_usd=spent, budget_usd=budget)
        )

    async def _record_handed_in(self, trajectory_id: str, usage: Usage) -> None:
        """The usage an agent gave with its submission, as one record (bounded like a report)."""
        reported = ModelUsage(
            model=usage.model,
            input_tokens=min(usage.input_tokens, MAX_TOKENS),
            output_tokens=min(usage.output_tokens, MAX_TOKENS),
            requests=min(usage.requests, 1_000_000),
            cost_usd=None if usage.cost_usd is None else min(usage.cost_usd, MAX_COST_USD),
        )
        if reported.requests or reported.input_tokens or reported.output_tokens or usage.cost_usd:
            try:
                await self.meter(trajectory_id, reported, "agent")
            except (InvalidInput, _BudgetStop) as exc:
                # Recorded all the same (an unknown cost as unknown); the work is done: it is
                # handed in.
                logger.warning("trajectory %s: %s", trajectory_id, exc)

    async def branch(
        self, parent: TrajectoryState, sandbox: TrajectorySandbox, n: int
    ) -> list[str]:
        """Forks `parent` into `n` new trajectories at a checkpoint of its workspace.

        Each branch (`<parent>.<k>`) is recorded before it runs and is then driven like any
        trajectory of the run, starting in its own fork of the workspace.

        Raises:
            InvalidInput: `n` out of range, or the task has no workspace.
            Conflict: the run is not accepting trajectories, or a command is running.
        """
        if not 1 <= n <= MAX_BRANCHES:
            raise InvalidInput(f"n must be between 1 and {MAX_BRANCHES}, got {n}")
        if self.group is None:
            raise Conflict("this run does not start new trajectories now; try again shortly")
        workspace = await sandbox.workspace()
        checkpoint = await workspace.checkpoint()
        siblings = sum(t.parent == parent.id for t in self.state.trajectories.values())
        branches = []
        kept = anyio.Event()
        for k in range(siblings + 1, siblings + n + 1):
            tid = f"{parent.id}.{k}"
            name = workspace_name(self.state.id, tid, "a1")
            self.forks[tid] = await workspace.fork(name, checkpoint=checkpoint)
            await self.record(
                TrajectoryBranched(trajectory=tid, parent=parent.id, checkpoint=checkpoint)
            )
            self.keeping[tid] = kept
            self.group.start_soon(self.trajectory, self.state.trajectories[tid])
            branches.append(tid)
        # Off the fork's path (it takes about the size of the changes): until it is recorded,
        # a restart of these branches waits for it, and a crash restarts them clean.
        self.group.start_soon(self._keep_checkpoint, workspace, checkpoint, branches, kept)
        return branches

    async def _keep_checkpoint(
        self, workspace: Workspace, checkpoint: str, branches: list[str], kept: anyio.Event
    ) -> None:
        """Keeps the checkpoint's files with the ledger (a `checkpoint_kept` record), for
        `branches` that must start again after their forks are gone (a supervisor died, the
        run crashed)."""
        start: dict[str, Any] | None = None
        start_missing: str | None = None
        try:
            archive = await workspace.export_checkpoint(checkpoint, max_bytes=MAX_KEPT_BYTES)
            start = (await self.ledger.put_artifact(archive, ".tar")).as_json()
        except EvalServerError as exc:
            # The branches run from their forks all the same; only a restart starts clean.
            # Said so that a reader of the ledger knows what a restart will do, and why.
            why = f"its checkpoint could not be kept (a restart starts these branches clean): {exc}"
            start_missing = why[:4000]
        try:
            await self.record(
                CheckpointKept(
                    trajectories=branches,
                    checkpoint=checkpoint,
                    start=start,
                    start_missing=start_missing,
                )
            )
        finally:
            kept.set()

    async def _restart_branch(
        self, trajectory: TrajectoryState, sandbox: TrajectorySandbox
    ) -> None:
        """Starts a branch that has no fork from this run at its recorded checkpoint; when that
        is not to be had, from a clean copy of the task, and the ledger says why.

        Raises:
            InfrastructureError: the instance is unavailable (the attempt is retried).
        """
        if (keeping := self.keeping.get(trajectory.id)) is not None:
            await keeping.wait()
        reason = trajectory.start_missing or "its checkpoint was not kept before the run ended"
        if trajectory.start is not None:
            try:
                archive = await anyio.to_thread.run_sync(
                    read_artifact, self.directory, trajectory.start
                )
                await sandbox.start_at(archive)
            except (NotFound, LedgerCorrupt, InvalidInput, Conflict, LimitExceeded) as exc:
                reason = f"its checkpoint could not be restored: {exc}"
            else:
                checkpoint = trajectory.checkpoint
                await self.record(
                    BranchRestarted(
                        trajectory=trajectory.id, source="checkpoint", checkpoint=checkpoint
                    )
                )
                return
        logger.warning("branch %s starts from a clean copy of its task: %s", trajectory.id, reason)
        await self.record(BranchRestarted(trajectory=trajectory.id, source="clean", reason=reason))

    def _sandbox(self, task: Task, trajectory_id: str, step: str, slot: Slot) -> TrajectorySandbox:
        name = workspace_name(self.state.id, trajectory_id, step)
        provisioning = self.limiters.provisioning
        return TrajectorySandbox(
            self.sandboxes,
            task,
            name,
            provisioning,
            self._reprovisioned,
            self.state.spec.sandbox,
            self.instance_checks.get(task.id),
            self.state.spec.limits.instances,
            slot,
        )

    async def _reprovisioned(self, event: Reprovisioned) -> None:
        reprovisioned = InstanceReprovisioned(
            backend=event.backend,
            instance=event.instance_key,
            task=event.task_id,
            reason=event.reason[:4000],
        )
        await self.record(reprovisioned, durable=False)

    async def _failed(
        self,
        failed: type[GenerationFailed] | type[ScoringFailed],
        trajectory: TrajectoryState,
        exc: Exception,
        started: float,
        *,
        final: bool = True,
        outcome: Literal["error", "infra_error"] = "infra_error",
        node: str | None = None,
    ) -> None:
        await self.record(
            failed(
                trajectory=trajectory.id,
                outcome=outcome,
                final=final,
                error={"type": type(exc).__name__, "message": str(exc)[:4000]},
                duration_s=round(time.monotonic() - started, 6),
                node=node or None,
            )
        )

    async def _store_submission(
        self, submission: Submission, files: AgentFiles | None = None
    ) -> dict[str, Any]:
        """Writes the artifacts first, so the record that names them never dangles."""
        stored: dict[str, Any] = {"answer": submission.answer, "empty": submission.empty}
        if files is not None:
            stored.update(await files.stored(self.ledger))
        if submission.patch:
            ref = await self.ledger.put_artifact(submission.patch.encode(), ".diff")
            stored["patch"] = ref.as_json()
        if submission.transcript is not None:
            data = json.dumps(submission.transcript, ensure_ascii=False).encode()
            stored["transcript"] = (await self.ledger.put_artifact(data, ".json")).as_json()
        return stored

    def _load_submission(self, trajectory: TrajectoryState) -> Submission:
        stored = trajectory.submission or {}
        patch_ref = stored.get("patch")
        patch = read_artifact(self.directory, patch_ref).decode() if patch_ref else None
        # Scorers that judge the trajectory itself need its transcript on resume too.
        transcript_ref = stored.get("transcript")
        transcript = (
            json.loads(read_artifact(self.directory, transcript_ref)) if transcript_ref else None
        )
        return Submission(answer=stored.get("answer"), patch=patch, transcript=transcript)
