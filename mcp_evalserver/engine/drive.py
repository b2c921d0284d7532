"""One run's work: every trajectory's generation and scoring, through one failure path.

`RunDrive` holds what the trajectory tasks of one run share (the ledger writer, the live state,
the agent, the scorer, the limiters, the sandboxes) and drives each trajectory from where the
ledger left it: generation attempts, then scoring attempts, each recorded before it counts; the
campaign's budget stops generations where they stand. Branching is `branching.Branching`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
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
from mcp_evalserver.engine.agent_files import AgentFiles, KeptBoxes, export_agent_files
from mcp_evalserver.engine.branching import Branching
from mcp_evalserver.engine.ledger import LedgerWriter
from mcp_evalserver.engine.records import (
    AttemptStarted,
    BudgetExhausted,
    EndpointLimitChanged,
    Generated,
    GenerationFailed,
    InstanceReprovisioned,
    LedgerRecord,
    ModelUsageRecorded,
    SamplesPlanned,
    Scored,
    ScoringFailed,
    ScoringStarted,
)
from mcp_evalserver.engine.replay import apply_record
from mcp_evalserver.engine.sampling import next_decision
from mcp_evalserver.engine.state import CampaignState, TrajectoryState
from mcp_evalserver.errors import InfrastructureError, InvalidInput
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

_T = TypeVar("_T")
RecordObserver = Callable[[CampaignState, LedgerRecord], None]


def _agent_attributes(spec: CampaignSpec) -> dict[str, Any]:
    model = getattr(spec.agent, "model", None)
    return {"gen_ai.request.model": model} if isinstance(model, str) else {}


def _why_not_generated(trajectory: TrajectoryState) -> str:
    """Why an attempt ended without a `generated` record, from what its failure recorded."""
    if trajectory.outcome == "budget_exhausted":
        return "the campaign's budget was spent first"
    error = trajectory.error or {}
    what = f"{error.get('type', 'error')}: {error.get('message', 'no message')}"
    return f"its attempt ended first ({what})"


class _BudgetStop(Exception):
    """A generation stopped because the campaign's budget was spent."""


@dataclass(frozen=True)
class _Failed:
    """A step that failed (recorded): the delay before its next attempt, if there is one."""

    delay: float


@dataclass
class RunDrive(Branching):
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

    def admit(self) -> None:
        """Lets a model call of an agent that meters its calls start, unless the budget is spent.

        Raises:
            _BudgetStop: the ledger's running total has reached the budget.
        """
        if self.over_budget:
            raise _BudgetStop("the campaign's budget is spent")

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
            budgeted=self.state.budget_usd is not None,
            admit=self.admit,
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
