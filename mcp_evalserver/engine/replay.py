"""Campaign state (`state.CampaignState`) as a pure replay of ledger records.

The runner decides (retry or give up, timeout or result) and records its decision; replay only
follows the records, so the same records always give the same state and resume needs no policy.

Record kinds and what they do to a trajectory:

    campaign_created     the spec (tasks resolved); every trajectory starts `pending`
    attempt_started      pending -> generating               (attempt n)
    generated            generating -> generated            (submission, usage)
    generation_failed    generating -> pending, or -> done with outcome error/timeout/infra_error
    scoring_started      generated -> scoring
    scored               scoring -> done                    (outcome from the score, score)
    scoring_failed       scoring -> generated, or -> done with outcome infra_error/timeout
    rescore_requested    the named done trajectories that were generated -> generated again
                         (their score and outcome cleared); optionally a new scorer
    retry_requested      the named trajectories that ended in an infrastructure failure go back
                         to where it struck: pending (generation) or generated (scoring); their
                         budget of retries is whole again, their history of failures stays
    instance_reprovisioned  an instance was found dead and provisioned again (health)
    endpoint_limit       an adaptive per-endpoint limit changed (a resume starts from the last)
    endpoint_calls       a run's calls per model endpoint, by how they went (ok, HTTP 429, ...)
    judge_calibrated     the judge's agreement with human labels (`calibrate`), for the report
    campaign_cancelled   the campaign is cancelled until a `run_started` resumes it; `by` says
                         whether a person asked (`request`) or its process stopped (`shutdown`)
    run_started          a process began (or resumed) running the campaign
    ledger_repaired      a torn tail was dropped when the ledger was reopened
    trajectory_branched  a new trajectory (`<parent>.<n>`) forked from `parent` at its
                         workspace's `checkpoint`: same task and sample, pending, scored on
                         its own; replay rebuilds the tree of branches from these
    checkpoint_kept      the files of the `checkpoint` the named branches (`trajectories`)
                         forked at, kept as the artifact `start` that a restarted branch
                         begins from; or `start_missing`: why they could not be kept
    model_usage          model calls made for a trajectory (`source`: its agent, its judge, or
                         usage its program reported) with their cost; summed per trajectory
                         and per campaign (the running total a budget is checked against)
    budget_exhausted     pending or generating -> done with outcome budget_exhausted: the
                         campaign's budget was spent before it could start or finish
    budget_set           the budget is now `budget_usd`; the named trajectories stopped at the
                         budget go back to pending
    samples_planned      adaptive sampling: `added` more samples per task, new trajectories
                         `<task>@<n>` onwards (pending), with the interval and reasons
    sampling_stopped     adaptive sampling is over (`reason`: target_reached or max_reached);
                         until then a campaign whose trajectories are all done is not finished
    branch_restarted     a branch attempt that did not get its fork from this run (a resume
                         after a crash, a retry) began (`source`) at its `checkpoint` or from
                         a `clean` copy of the task, and then `reason` says why
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from mcp_evalserver.engine.records import (
    FIRST_RECORD_FIELDS,
    AttemptStarted,
    BranchRestarted,
    BudgetExhausted,
    BudgetSet,
    CampaignCancelled,
    CampaignCreated,
    CheckpointKept,
    EndpointCalls,
    EndpointLimitChanged,
    Generated,
    GenerationFailed,
    InstanceReprovisioned,
    JudgeCalibrated,
    LedgerRecord,
    LedgerRecordBase,
    LedgerRepaired,
    ModelUsageRecorded,
    Outcome,
    RescoreRequested,
    RetryRequested,
    RunStarted,
    SamplesPlanned,
    SamplingStopped,
    Scored,
    ScoringFailed,
    ScoringStarted,
    StepFailed,
    TrajectoryBranched,
    collector_paused,
    first_record_lacks,
)
from mcp_evalserver.engine.state import (
    INFRA_OUTCOMES,
    CampaignState,
    EndpointLimit,
    Phase,
    SamplingState,
    Spend,
    TrajectoryState,
)
from mcp_evalserver.errors import LedgerCorrupt
from mcp_evalserver.spec.campaign import CampaignSpec, describe_validation_error, trajectory_id
from mcp_evalserver.spec.scorers import ScorerConfig

#: How much of an error message the history of a trajectory's failures keeps.
HISTORY_MESSAGE_CHARS = 300
SCORER_ADAPTER = TypeAdapter[ScorerConfig](ScorerConfig)


def replay(records: Iterable[LedgerRecord]) -> CampaignState:
    """Rebuilds a campaign's state from its records (pure; replaying twice gives the same).

    Raises:
        LedgerCorrupt: the first record is not `campaign_created`, or a record names an
            unknown trajectory or breaks the order of phases.
    """
    iterator = iter(records)
    first = next(iterator, None)
    if not isinstance(first, CampaignCreated):
        raise LedgerCorrupt("a ledger must begin with a campaign_created record")
    if missing := [f for f in FIRST_RECORD_FIELDS if f not in first.model_fields_set]:
        raise first_record_lacks(missing)
    spec = CampaignSpec.model_validate(first.spec)
    trajectories: dict[str, TrajectoryState] = {}
    for task in spec.task_list():
        for sample in range(spec.initial_samples):
            tid = trajectory_id(task.id, sample)
            trajectories[tid] = TrajectoryState(tid, task.id, sample)
    state = CampaignState(
        id=first.campaign,
        spec=spec,
        created_ts=first.ts,
        trajectories=trajectories,
        last_seq=first.seq,
        last_ts=first.ts,
        budget_usd=spec.limits.budget_usd,
    )
    if (adaptive := spec.adaptive) is not None:
        planned = {task.id: adaptive.min for task in spec.task_list()}
        state.sampling = SamplingState(adaptive, planned)
    # A state holds no reference cycles either, but replay makes a few objects per record: over
    # a large ledger the collector's passes over every record already read cost a third of it.
    with collector_paused():
        for record in iterator:
            apply_record(state, record)
    return state


def concerning(records: list[LedgerRecord], trajectory: str) -> list[LedgerRecord]:
    """The records as far as they concern one trajectory: `replay` of them leaves it exactly
    as the whole ledger does, with none of the campaign's other trajectories to build.

    `records` are in ledger order and hold at least the first record, every record that names
    no trajectory or branches one, and the trajectory's own. What stays: the spec with only
    the trajectory's task, the records that name no trajectory (a rescore, retry or kept
    checkpoint naming this trajectory alone), the branching of it and of the ones it descends
    from, and its own records. A record changes no trajectory but the ones it names, and a
    branch takes from its parent only the task and sample: nothing else can matter.
    """
    parents = {r.trajectory: r.parent for r in records if isinstance(r, TrajectoryBranched)}
    lineage = {trajectory}
    root = trajectory
    while isinstance(parent := parents.get(root), str) and parent not in lineage:
        lineage.add(parent)
        root = parent
    # A root is `<task>@<sample>` and a task id holds no `@`.
    task = root.rpartition("@")[0]
    first, *rest = records
    kept: list[LedgerRecord] = [first]
    if isinstance(first, CampaignCreated):
        spec = first.spec
        tasks = [t for t in spec.get("tasks") or [] if isinstance(t, dict) and t.get("id") == task]
        kept = [first.model_copy(update={"spec": {**spec, "tasks": tasks}})]
    for record in rest:
        match record:
            case RescoreRequested() | RetryRequested() | CheckpointKept() | BudgetSet():
                listed = [t for t in record.trajectories if t == trajectory]
                kept.append(record.model_copy(update={"trajectories": listed}))
            case SamplesPlanned():
                # Its task's samples only (the spec kept holds no other task).
                added = {t: n for t, n in record.added.items() if t == task}
                kept.append(record.model_copy(update={"added": added}))
            case TrajectoryBranched():
                if record.trajectory in lineage:
                    kept.append(record)
            case _ if record.trajectory is None or record.trajectory == trajectory:
                kept.append(record)
    return kept


def apply_record(state: CampaignState, record: LedgerRecord) -> None:
    """Applies one record to a state in place (what `replay` does for each record).

    Raises:
        LedgerCorrupt: the record names an unknown trajectory or breaks the phase order.
    """
    kind = type(record)
    # Time between a run's records is running time; the gap before a run (or a rescore request
    # written while none ran) is not.
    if state.runs > 0 and kind is not RunStarted and kind is not RescoreRequested:
        state.run_s += max(0.0, record.ts - state.last_ts)
    state.last_seq = record.seq
    state.last_ts = record.ts
    # One look-up by the record's model, not a `match` trying each in turn: a replay applies
    # every record of a ledger, and nearly all are a trajectory's steps.
    _APPLY.get(kind, _unknown_kind)(state, record)


def _run_started(state: CampaignState, record: RunStarted) -> None:
    state.runs += 1
    state.cancelled = False
    state.cancelled_by = None


def _cancelled(state: CampaignState, record: CampaignCancelled) -> None:
    state.cancelled = True
    # Records written before `by` existed were all asked for.
    state.cancelled_by = record.by or "request"


def _repaired(state: CampaignState, record: LedgerRepaired) -> None:
    state.repaired_bytes += record.dropped_bytes


def _reprovisioned(state: CampaignState, record: InstanceReprovisioned) -> None:
    event = {
        "backend": record.backend,
        "instance": record.instance,
        "task": record.task,
        "reason": record.reason,
        "ts": record.ts,
    }
    state.reprovisioned.append(event)


def _calibrated(state: CampaignState, record: JudgeCalibrated) -> None:
    state.calibrations.append({"ts": record.ts, **record.calibration})


def _endpoint_calls(state: CampaignState, record: EndpointCalls) -> None:
    for endpoint, counts in record.calls.items():
        summed = state.endpoint_calls.setdefault(endpoint, {})
        for how, count in counts.items():
            summed[how] = summed.get(how, 0) + count


def _unknown_kind(state: CampaignState, record: LedgerRecordBase) -> None:
    # Records from a newer version that this one does not know are kept, not fatal; a second
    # campaign_created (never written by us) is counted with them.
    state.extra.setdefault("unknown_kinds", set()).add(record.kind)


def _trajectory(state: CampaignState, record: LedgerRecordBase) -> TrajectoryState:
    tid = record.trajectory
    trajectory = state.trajectories.get(tid) if tid is not None else None
    if trajectory is None:
        raise LedgerCorrupt(f"record seq {record.seq} names unknown trajectory {tid!r}")
    return trajectory


def _attempt_started(state: CampaignState, record: AttemptStarted) -> None:
    trajectory = _trajectory(state, record)
    # A crash may leave an attempt open: the next run starts a new attempt over it.
    _expect(trajectory, record, "pending", "generating")
    trajectory.phase = "generating"
    trajectory.attempts = record.attempt


def _generation_failed(state: CampaignState, record: GenerationFailed) -> None:
    trajectory = _trajectory(state, record)
    _expect(trajectory, record, "generating")
    trajectory.generation_s = record.duration_s
    _failed(trajectory, record, "generation", again="pending")
    _ran_on(trajectory, record)


def _scoring_started(state: CampaignState, record: ScoringStarted) -> None:
    trajectory = _trajectory(state, record)
    _expect(trajectory, record, "generated", "scoring")
    trajectory.phase = "scoring"


def _scoring_failed(state: CampaignState, record: ScoringFailed) -> None:
    trajectory = _trajectory(state, record)
    _expect(trajectory, record, "scoring")
    _failed(trajectory, record, "scoring", again="generated")
    _ran_on(trajectory, record)


def _branch_restarted(state: CampaignState, record: BranchRestarted) -> None:
    trajectory = _trajectory(state, record)
    trajectory.started_clean = str(record.reason) if record.source == "clean" else None


def _budget_exhausted(state: CampaignState, record: BudgetExhausted) -> None:
    trajectory = _trajectory(state, record)
    _expect(trajectory, record, "pending", "generating")
    trajectory.phase = "done"
    trajectory.outcome = "budget_exhausted"
    trajectory.finished_ts = record.ts
    trajectory.error = {
        "type": "BudgetExhausted",
        "message": f"the campaign's budget (${record.budget_usd}) was spent "
        f"(${record.spent_usd}) before this trajectory finished generating",
    }


def _ran_on(trajectory: TrajectoryState, record: Generated | StepFailed | Scored) -> None:
    if record.node is not None:
        trajectory.nodes.append((record.kind, record.node))


def _branched(state: CampaignState, record: TrajectoryBranched) -> None:
    tid, parent = record.trajectory, state.trajectories.get(str(record.parent))
    if parent is None or tid is None or tid in state.trajectories:
        raise LedgerCorrupt(
            f"record seq {record.seq} ({record.kind}) branches {tid!r} from "
            f"{record.parent!r}: the parent must exist and the branch must not"
        )
    state.trajectories[tid] = TrajectoryState(
        tid,
        parent.task_id,
        parent.sample,
        parent=parent.id,
        checkpoint=record.checkpoint,
        branched_ts=record.ts,
    )


def _samples_planned(state: CampaignState, record: SamplesPlanned) -> None:
    sampling = _sampling(state, record)
    for task_id, added in record.added.items():
        planned = sampling.planned.get(task_id)
        if planned is None or added < 1 or planned + added > sampling.config.max:
            raise LedgerCorrupt(
                f"record seq {record.seq} ({record.kind}) adds {added} sample(s) to task "
                f"{task_id!r}: it must be a task of the campaign, below max "
                f"({sampling.config.max}) after them"
            )
        for sample in range(planned, planned + added):
            tid = trajectory_id(task_id, sample)
            state.trajectories[tid] = TrajectoryState(tid, task_id, sample)
        sampling.planned[task_id] = planned + added
    sampling.rounds.append(
        {
            "round": record.round,
            "ts": record.ts,
            "added": dict(record.added),
            "half_width": record.half_width,
            "predicted_half_width": record.predicted_half_width,
            "target_half_width": record.target_half_width,
            "interval": record.interval,
            "basis": dict(record.basis),
            "reasons": dict(record.reasons),
        }
    )


def _sampling_stopped(state: CampaignState, record: SamplingStopped) -> None:
    sampling = _sampling(state, record)
    sampling.stopped = {
        "reason": record.reason,
        "ts": record.ts,
        "half_width": record.half_width,
        "target_half_width": record.target_half_width,
        "interval": record.interval,
        "planned": record.planned,
    }


def _sampling(state: CampaignState, record: LedgerRecordBase) -> SamplingState:
    if state.sampling is None or state.sampling.stopped is not None:
        raise LedgerCorrupt(
            f"record seq {record.seq} ({record.kind}) in a campaign without adaptive sampling "
            "under way; move the ledger aside and inspect it: a ledger is never rewritten"
        )
    return state.sampling


def _checkpoint_kept(state: CampaignState, record: CheckpointKept) -> None:
    for tid in record.trajectories:
        branch = state.trajectories.get(tid)
        if branch is None or branch.parent is None:
            raise LedgerCorrupt(
                f"record seq {record.seq} ({record.kind}) names {tid!r}, which is no "
                "branch of this campaign"
            )
        branch.start, branch.start_missing = record.start, record.start_missing


def _endpoint_limit(state: CampaignState, record: EndpointLimitChanged) -> None:
    limit, previous = record.limit, record.previous
    entry = state.endpoint_limits.setdefault(record.endpoint, EndpointLimit(limit))
    entry.limit = limit
    entry.decreases += limit < previous
    entry.history.append(
        {
            "ts": record.ts,
            "limit": limit,
            "previous": previous,
            "reason": record.reason,
            "retry_after_s": record.retry_after_s,
        }
    )


def rescorable(trajectory: TrajectoryState) -> bool:
    """Finished and generated: there is a submission to grade again."""
    return trajectory.done and trajectory.generated_seq is not None


def _rescore_requested(state: CampaignState, record: RescoreRequested) -> None:
    if record.scorer is not None:
        try:
            scorer = SCORER_ADAPTER.validate_python(record.scorer)
        except ValidationError as exc:
            raise LedgerCorrupt(
                f"record seq {record.seq} ({record.kind}) has an invalid scorer: "
                f"{describe_validation_error(exc)}"
            ) from exc
        state.spec = state.spec.model_copy(update={"scorer": scorer})
    state.rescores += 1
    for tid in record.trajectories:
        trajectory = state.trajectories.get(tid)
        if trajectory is None:
            raise LedgerCorrupt(f"record seq {record.seq} names unknown trajectory {tid!r}")
        # Only finished generations go back; whatever else the run handles as it is.
        if rescorable(trajectory):
            trajectory.phase = "generated"
            trajectory.outcome = None
            trajectory.score = None
            trajectory.error = None
            trajectory.scoring_s = None
            trajectory.scored_seq = None
            trajectory.finished_ts = None
            trajectory.scoring_failures = 0
            trajectory.failure_causes = {}


def _model_usage(state: CampaignState, record: ModelUsageRecorded) -> None:
    tid = record.trajectory
    trajectory = state.trajectories.get(tid) if tid is not None else None
    if tid is not None and trajectory is None:
        raise LedgerCorrupt(f"record seq {record.seq} names unknown trajectory {tid!r}")
    if trajectory is not None:
        if trajectory.spend is None:
            trajectory.spend = Spend()
        trajectory.spend.add(record)
    state.spend.add(record)


def _budget_set(state: CampaignState, record: BudgetSet) -> None:
    state.budget_usd = record.budget_usd
    for tid in record.trajectories:
        trajectory = state.trajectories.get(tid)
        if trajectory is None:
            raise LedgerCorrupt(f"record seq {record.seq} names unknown trajectory {tid!r}")
        if trajectory.outcome != "budget_exhausted":
            continue
        trajectory.phase = "generated" if trajectory.generated_seq is not None else "pending"
        trajectory.outcome = None
        trajectory.error = None
        trajectory.finished_ts = None


def _retry_requested(state: CampaignState, record: RetryRequested) -> None:
    for tid in record.trajectories:
        trajectory = state.trajectories.get(tid)
        if trajectory is None:
            raise LedgerCorrupt(f"record seq {record.seq} names unknown trajectory {tid!r}")
        if trajectory.outcome not in INFRA_OUTCOMES:
            continue  # only infrastructure failures go back; a result stands
        state.retried += 1
        # A generated trajectory can only have failed in scoring: its submission stands.
        trajectory.phase = "generated" if trajectory.generated_seq is not None else "pending"
        trajectory.outcome = None
        trajectory.error = None
        trajectory.finished_ts = None
        trajectory.failure_causes = {}


def _expect(trajectory: TrajectoryState, record: LedgerRecordBase, *phases: Phase) -> None:
    if trajectory.phase not in phases:
        raise LedgerCorrupt(
            f"record seq {record.seq} ({record.kind}) finds trajectory {trajectory.id} "
            f"{trajectory.phase}, expected {' or '.join(phases)}"
        )


def _generated(state: CampaignState, r: Generated) -> None:
    t = _trajectory(state, r)
    _expect(t, r, "generating")
    t.phase = "generated"
    t.submission = r.submission
    t.usage = r.usage
    t.generation_s = r.duration_s
    t.generated_seq = r.seq
    t.error = None
    t.failure_causes = {}
    _ran_on(t, r)


def _failed(t: TrajectoryState, r: StepFailed, phase: str, *, again: Phase) -> None:
    """A generation or scoring attempt failed: final (the trajectory is done with the record's
    outcome), or back to `again` for another attempt. Its infrastructure failures are kept."""
    if r.outcome in INFRA_OUTCOMES:
        error = r.error or {}
        cause = str(error.get("type") or "InfrastructureError")
        message = str(error.get("message") or "")[:HISTORY_MESSAGE_CHARS]
        t.infra_history.append({"phase": phase, "type": cause, "message": message, "seq": r.seq})
        if not r.final:
            t.failure_causes[cause] = t.failure_causes.get(cause, 0) + 1
    t.error = r.error
    if r.final:
        if r.outcome is None:
            raise LedgerCorrupt(
                f"ledger record seq {r.seq!r} ({r.kind!r}) lacks or garbles a field (outcome: "
                "a final failure names it); move the ledger aside and inspect it: a ledger is "
                "never rewritten"
            )
        t.phase = "done"
        t.outcome = r.outcome
        t.finished_ts = r.ts
    else:
        t.phase = again
        if again == "pending":
            t.generation_failures += 1
        else:
            t.scoring_failures += 1


def _scored(state: CampaignState, r: Scored) -> None:
    t = _trajectory(state, r)
    _expect(t, r, "scoring")
    t.phase = "done"
    t.score = r.score
    # Scores recorded before scorers named their outcome hold only `resolved`.
    outcome = r.score.get("outcome") or ("resolved" if r.score.get("resolved") else "failed")
    if outcome not in _SCORED_OUTCOMES:
        raise LedgerCorrupt(f"record seq {r.seq} (scored) has unknown outcome {outcome!r}")
    t.outcome = _SCORED_OUTCOMES[outcome]
    t.scoring_s = r.duration_s
    t.scored_seq = r.seq
    t.finished_ts = r.ts
    t.error = None
    t.failure_causes = {}
    _ran_on(t, r)


_SCORED_OUTCOMES: dict[str, Outcome] = {
    "resolved": "resolved",
    "failed": "failed",
    "error": "error",
    "infra_error": "infra_error",
}


#: How each kind of record changes a state (a kind not here: `_unknown_kind`).
_APPLY: dict[type[LedgerRecordBase], Callable[[CampaignState, Any], None]] = {
    AttemptStarted: _attempt_started,
    Generated: _generated,
    GenerationFailed: _generation_failed,
    ScoringStarted: _scoring_started,
    Scored: _scored,
    ScoringFailed: _scoring_failed,
    BranchRestarted: _branch_restarted,
    RunStarted: _run_started,
    CampaignCancelled: _cancelled,
    LedgerRepaired: _repaired,
    RescoreRequested: _rescore_requested,
    RetryRequested: _retry_requested,
    SamplesPlanned: _samples_planned,
    SamplingStopped: _sampling_stopped,
    InstanceReprovisioned: _reprovisioned,
    EndpointLimitChanged: _endpoint_limit,
    JudgeCalibrated: _calibrated,
    TrajectoryBranched: _branched,
    CheckpointKept: _checkpoint_kept,
    EndpointCalls: _endpoint_calls,
    ModelUsageRecorded: _model_usage,
    BudgetExhausted: _budget_exhausted,
    BudgetSet: _budget_set,
}
