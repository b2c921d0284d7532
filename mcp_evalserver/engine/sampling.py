"""Adaptive sampling's decisions, made from a campaign's state and recorded in its ledger.

When every trajectory planned so far is finished (scored, or failed for good), the runner asks
`next_decision` for the next record: `samples_planned` (more samples for the tasks that narrow
the interval most, `scoring.stats.sampling`) or `sampling_stopped` (the interval is as narrow
as asked, or every task is at `max`). The decision reads the trajectories' outcomes and
nothing else a trajectory produced (no answer, patch, transcript or score detail), so an agent
moves the plan only through what it resolves. Same outcomes, same records: a resumed campaign
decides as the uninterrupted one would have, and replay rebuilds the plan from the records.
A trajectory the campaign's budget stopped (`budget_exhausted`) is no outcome: while one is,
nothing is decided, and a resume with a larger budget runs it before the next decision.

The interval is the one the report gives the mean pass rate: the cluster-robust one when the
tasks are clustered (by `cluster_by`, else `repo` when every task has one) and it has a
standard error, otherwise the bootstrap over tasks (same confidence, seed and resamples).
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

from mcp_evalserver.engine.records import SamplesPlanned, SamplingStopped
from mcp_evalserver.engine.report import CONFIDENCE, RESAMPLES, SEED, clusters_of, verdicts
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.scoring.stats.clustered import cluster_robust_mean
from mcp_evalserver.scoring.stats.distributions import t_quantile
from mcp_evalserver.scoring.stats.sampling import TaskSamples, plan_samples
from mcp_evalserver.scoring.stats.summary import TaskStats, bootstrap_mean_ci, task_stats


@dataclass(frozen=True)
class CampaignInterval:
    """The mean pass rate's interval as the report gives it, and what the planner needs."""

    half_width: float
    method: str
    #: The multiplier of its standard error (z, or t with clusters - 1 df).
    quantile: float
    clusters: int


def campaign_interval(
    state: CampaignState, figures: list[TaskStats] | None = None
) -> CampaignInterval | None:
    """The report's interval of the mean pass rate over tasks (None: no task graded yet).

    `figures`: `task_stats(verdicts(state))` when the caller has them.
    """
    if figures is None:
        figures = task_stats(verdicts(state))
    rates = {s.task_id: s.pass_rate for s in figures if s.pass_rate is not None}
    if not rates:
        return None
    cluster_by = state.sampling.config.cluster_by if state.sampling is not None else None
    field, labels, missing = clusters_of(state, cluster_by, rates)
    if field is not None:
        clustered = cluster_robust_mean(
            rates, labels, confidence=CONFIDENCE, cluster_field=field, tasks_without_field=missing
        )
        if clustered.low is not None and clustered.high is not None:
            quantile = t_quantile(1 - (1 - CONFIDENCE) / 2, clustered.degrees_of_freedom)
            half_width = (clustered.high - clustered.low) / 2
            return CampaignInterval(half_width, clustered.method, quantile, clustered.clusters)
    # The report's bootstrap: task_stats' order (by task id), seed and resamples.
    values = list(rates.values())
    interval = bootstrap_mean_ci(values, confidence=CONFIDENCE, resamples=RESAMPLES, seed=SEED)
    quantile = NormalDist().inv_cdf(1 - (1 - CONFIDENCE) / 2)
    return CampaignInterval((interval.high - interval.low) / 2, "bootstrap", quantile, len(values))


def next_decision(state: CampaignState) -> SamplesPlanned | SamplingStopped | None:
    """The record that continues adaptive sampling, once every planned trajectory is done.

    None: no adaptive sampling, it is over, trajectories are still running, the budget
    stopped trajectories (they are no outcome; a resume with a larger budget runs them, then
    decides as an unstopped run would have), or no task has a graded outcome yet
    (infrastructure failures only: a resume retries them, then decides).
    """
    sampling = state.sampling
    if sampling is None or sampling.stopped is not None or state.budget_stopped:
        return None
    if not all(t.done for t in state.trajectories.values()):
        return None
    figures = task_stats(verdicts(state))
    interval = campaign_interval(state, figures)
    if interval is None:
        return None
    config = sampling.config
    target = config.target_half_width
    stopped = {
        "half_width": round(interval.half_width, 9),
        "target_half_width": target,
        "interval": interval.method,
        "planned": sampling.total,
    }
    if interval.half_width <= target:
        return SamplingStopped(reason="target_reached", **stopped)
    counts = {s.task_id: s for s in figures}
    tasks = []
    for task_id, planned in sampling.planned.items():
        stats = counts.get(task_id)
        graded = stats.attempts if stats is not None else 0
        resolved = stats.successes if stats is not None else 0
        tasks.append(TaskSamples(task_id, planned, graded, resolved))
    plan = plan_samples(
        tasks,
        half_width=interval.half_width,
        quantile=interval.quantile,
        clusters=interval.clusters,
        target=target,
        max_samples=config.max,
    )
    if plan is None:
        return SamplingStopped(reason="max_reached", **stopped)
    return SamplesPlanned(
        round=len(sampling.rounds) + 1,
        added=plan.added,
        half_width=round(interval.half_width, 9),
        predicted_half_width=round(plan.predicted_half_width, 9),
        target_half_width=target,
        interval=interval.method,
        basis={t.task_id: [t.resolved, t.graded] for t in tasks if t.task_id in plan.added},
        reasons=plan.reasons,
    )
