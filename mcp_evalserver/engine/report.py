"""Campaign reports from the ledger, as a JSON-ready dict (`report_markdown` renders it;
`comparison` pairs two campaigns).

The one place reports are built (CLI, MCP resource, server). The statistics come from
`scoring.stats` and `scoring.comparison`; here they are gathered from a campaign's state.

Infrastructure failures (outcome `infra_error`) and trajectories the budget stopped
(`budget_exhausted`) are kept apart in every figure: they are not attempts, so pass rates,
pass@k, pass^k and intervals are over the trajectories the infrastructure let run, and the
infrastructure's error rate is shown beside the task's.
Trajectories not finished yet are left out (the report of a running campaign is partial).
Intervals are 95%: a bootstrap over tasks with seed 0 (so the same ledger gives the same
report), and Wilson's when every task has exactly one attempt.

The mean pass rate also carries a cluster-robust standard error and t interval: tasks are
clustered by their `repo` when every task has one, or by the task field `cluster_by` names (a
task attribute or a `metadata` key); otherwise each task is its own cluster. `retries` splits
the pass rate by whether a trajectory needed a retry after an infrastructure failure.

Branches (trajectories forked from another, `fork_trajectory`) are not samples: a root and
its branches count once, resolved when any of them is (best of branches), and only once all of
them are finished. `branches` lists each root's tree; `branches_as_samples=True` counts every
trajectory on its own instead.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from typing import Any

from mcp_evalserver.engine.costs import cost_report
from mcp_evalserver.engine.state import (
    INFRA_OUTCOMES,
    UNGRADED_OUTCOMES,
    CampaignState,
    Spend,
    TrajectoryState,
)
from mcp_evalserver.engine.validation import validation_report
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.endpoints import model_endpoints
from mcp_evalserver.scoring.stats.clustered import cluster_robust_mean, task_clusters
from mcp_evalserver.scoring.stats.retries import retry_split
from mcp_evalserver.scoring.stats.summary import (
    Verdict,
    flaky_graders,
    percentile,
    summarise_campaign,
    task_stats,
)
from mcp_evalserver.spec.agents import ValidationAgentConfig

CONFIDENCE = 0.95
SEED = 0
RESAMPLES = 2000


def samples(
    state: CampaignState, *, branches_as_samples: bool = False
) -> list[tuple[TrajectoryState, list[TrajectoryState]]]:
    """(trajectory, its branches) per sample the statistics count: every root with its tree,
    or (`branches_as_samples`) every trajectory alone."""
    if branches_as_samples:
        return [(t, []) for t in state.trajectories.values()]
    # One pass over the trajectories: `state.branches(root)` per root would be quadratic (a
    # 10,000-trajectory campaign took seconds). Order within a tree stays the ledger's.
    trees: dict[str, list[TrajectoryState]] = {}
    for t in state.trajectories.values():
        if t.parent is None:
            trees.setdefault(t.id, [])
    for t in state.trajectories.values():
        if t.parent is not None:
            trees[state.root_of(t.id)].append(t)
    return [(state.trajectories[root], branches) for root, branches in trees.items()]


def best_of(root: TrajectoryState, branches: list[TrajectoryState]) -> TrajectoryState:
    """The tree as one trajectory: finished when all are, resolved when any is."""
    if not branches:
        return root
    members = [root, *branches]
    if not all(m.done for m in members):
        return dataclasses.replace(root, phase="generating", outcome=None)
    resolved = [m for m in members if m.outcome == "resolved"]
    real = [m for m in members if m.outcome not in UNGRADED_OUTCOMES]
    best = resolved[0] if resolved else (real[0] if real else root)
    usage: dict[str, Any] = {}
    for m in members:
        for key, value in (m.usage or {}).items():
            if isinstance(value, int | float):
                usage[key] = usage.get(key, 0) + value
    spend = None
    for m in members:
        if m.spend is not None:
            spend = m.spend.merged(spend)
    generation = [m.generation_s for m in members if m.generation_s is not None]
    scoring = [m.scoring_s for m in members if m.scoring_s is not None]
    return dataclasses.replace(
        best,
        id=root.id,
        usage=usage or None,
        spend=spend,
        generation_s=sum(generation) if generation else None,
        scoring_s=sum(scoring) if scoring else None,
        finished_ts=max(m.finished_ts or 0.0 for m in members) or None,
    )


def is_graded(trajectory: TrajectoryState) -> bool:
    """Whether a sample counts in the pass rate: finished, and neither an infrastructure
    failure nor stopped by the budget."""
    return trajectory.done and trajectory.outcome not in UNGRADED_OUTCOMES


def pass_counts(state: CampaignState) -> tuple[int, int]:
    """(resolved, graded) samples as the report counts them: a root and its forked branches
    once (resolved when any is). Cheap enough for every status (no statistics)."""
    resolved = counted = 0
    for root, branches in samples(state):
        trajectory = best_of(root, branches)
        resolved += trajectory.outcome == "resolved"
        counted += is_graded(trajectory)
    return resolved, counted


def verdicts(state: CampaignState, *, branches_as_samples: bool = False) -> list[Verdict]:
    """The finished trajectories as the statistics take them (a tree of branches as one).

    A verdict's latency is the trajectory's active time (generation plus scoring, the last
    attempt of each), ending when its final record was written.
    """
    found = []
    numbers: Counter[str] = Counter()  # counted as samples, branches are numbered after
    for root, branches in samples(state, branches_as_samples=branches_as_samples):
        trajectory = best_of(root, branches)
        if not trajectory.done or trajectory.outcome in (None, "budget_exhausted"):
            continue  # unfinished, or never let finish: no attempt at the task
        numbers[trajectory.task_id] += 1
        usage = trajectory.usage or {}
        active = _active_s(trajectory)
        finished = trajectory.finished_ts
        found.append(
            Verdict(
                task_id=trajectory.task_id,
                sample=numbers[trajectory.task_id] - 1
                if branches_as_samples
                else trajectory.sample,
                outcome=trajectory.outcome,
                started_at=finished - active if finished is not None and active else None,
                finished_at=finished if active else None,
                input_tokens=usage.get("input_tokens") if usage else None,
                output_tokens=usage.get("output_tokens") if usage else None,
                cost_usd=_cost(trajectory.spend, usage),
            )
        )
    return found


def _cost(spend: Spend | None, usage: dict[str, Any]) -> float | None:
    """Its recorded cost; for a ledger from before `model_usage` records, its agent's figure."""
    if spend is not None:
        return spend.cost_usd
    cost = usage.get("cost_usd")
    return float(cost) if isinstance(cost, int | float) and cost >= 0 else None


def _active_s(trajectory: TrajectoryState) -> float | None:
    parts = [p for p in (trajectory.generation_s, trajectory.scoring_s) if p is not None]
    return sum(parts) if parts else None


def branch_trees(state: CampaignState) -> dict[str, Any] | None:
    """Each root that has branches: how many, how many resolved, and the best of them."""
    if all(t.parent is None for t in state.trajectories.values()):
        return None
    roots: list[dict[str, Any]] = []
    for root, branches in samples(state):
        if not branches:
            continue
        best = best_of(root, branches)
        roots.append(
            {
                "root": root.id,
                "task": root.task_id,
                "root_outcome": root.outcome,
                "branches": [
                    {
                        "trajectory": b.id,
                        "parent": b.parent,
                        "checkpoint": b.checkpoint,
                        "branched_ts": b.branched_ts,
                        "outcome": b.outcome or b.phase,
                        # Restarted from a clean copy of the task, not its checkpoint: why.
                        "started_clean": b.started_clean,
                    }
                    for b in branches
                ],
                "resolved_branches": sum(b.outcome == "resolved" for b in branches),
                "resolved": best.outcome == "resolved",
                "finished": best.done,
            }
        )
    if not roots:
        return None
    finished = [r for r in roots if r["finished"]]
    resolved = sum(bool(r["resolved"]) for r in finished)
    return {
        "roots": roots,
        "best_of_branches": {
            "roots": len(finished),
            "resolved": resolved,
            "pass_rate": resolved / len(finished) if finished else None,
        },
    }


def build_report(
    state: CampaignState,
    *,
    branches_as_samples: bool = False,
    finished: list[Verdict] | None = None,
    cluster_by: str | None = None,
) -> dict[str, Any]:
    """The figures of a campaign (JSON-ready). Infrastructure failures are counted apart.

    A root and its branches count as one sample (best of branches) unless
    `branches_as_samples`. `finished`: `verdicts(state, branches_as_samples=...)` when the
    caller has them already. `cluster_by`: the task field whose values cluster the tasks for
    the clustered standard error (default `repo` when every task has one).

    Raises:
        InvalidInput: no task has the field `cluster_by`.
    """
    outcomes = Counter(t.outcome or t.phase for t in state.trajectories.values())
    if finished is None:
        finished = verdicts(state, branches_as_samples=branches_as_samples)
    task_figures = task_stats(finished)
    summary = summarise_campaign(
        finished, confidence=CONFIDENCE, resamples=RESAMPLES, seed=SEED, per_task=task_figures
    ).model_dump(mode="json")
    stats_by_task = {s.task_id: s for s in task_figures}
    per_task: dict[str, dict[str, Any]] = {}
    for root, branches in samples(state, branches_as_samples=branches_as_samples):
        trajectory = best_of(root, branches)
        row = per_task.setdefault(
            trajectory.task_id, {"samples": 0, "resolved": 0, "graded": 0, "infra_errors": 0}
        )
        if trajectory.outcome == "budget_exhausted":
            row["budget_exhausted"] = row.get("budget_exhausted", 0) + 1
        row["samples"] += 1
        row["resolved"] += trajectory.outcome == "resolved"
        row["infra_errors"] += trajectory.outcome in INFRA_OUTCOMES
        row["graded"] += is_graded(trajectory)
    for task_id, row in per_task.items():
        row["pass_rate"] = row["resolved"] / row["graded"] if row["graded"] else None
        stats = stats_by_task.get(task_id)
        row["pass_at_k"] = {str(k): v for k, v in stats.pass_at_k.items()} if stats else {}
        row["pass_hat_k"] = {str(k): v for k, v in stats.pass_hat_k.items()} if stats else {}
    graded = sum(row["graded"] for row in per_task.values())
    resolved = sum(row["resolved"] for row in per_task.values())
    scores = [t.score for t in state.trajectories.values() if t.score is not None]
    oracle = getattr(state.spec.agent, "type", None) == "oracle"
    rates = {s.task_id: s.pass_rate for s in task_figures if s.pass_rate is not None}
    if cluster_by is None and state.sampling is not None:
        cluster_by = state.sampling.config.cluster_by  # what adaptive sampling measured by
    field, labels, missing = clusters_of(state, cluster_by, rates)
    return {
        "campaign": state.id,
        "name": state.spec.name,
        "status": state.status,
        "status_text": state.describe_status(),
        "agent": getattr(state.spec.agent, "type", None),
        "scorer": getattr(state.spec.scorer, "type", None),
        "trajectories": len(state.trajectories),
        "done": state.done_count,
        "outcomes": dict(sorted(outcomes.items())),
        "pass_rate": resolved / graded if graded else None,
        "resolved": resolved,
        "graded": graded,
        "runs": state.runs,
        "rescores": state.rescores,
        "infrastructure": infrastructure_health(state),
        "model_endpoints": model_endpoints(state.spec),
        "endpoint_limits": endpoint_limits(state),
        "judge_calibration": state.calibrations[-1] if state.calibrations else None,
        "summary": summary,
        "mean_pass_rate_clustered": (
            cluster_robust_mean(
                rates,
                labels,
                confidence=CONFIDENCE,
                cluster_field=field,
                tasks_without_field=missing,
            ).model_dump(mode="json")
            if rates
            else None
        ),
        "retries": retry_split(
            (t.task_id, needed_retry, t.outcome == "resolved")
            for t, needed_retry in graded_trees(state, branches_as_samples)
        ).model_dump(mode="json"),
        "phases": {
            "generation": _percentiles(t.generation_s for t in state.trajectories.values()),
            "scoring": _percentiles(t.scoring_s for t in state.trajectories.values()),
        },
        "score_statuses": dict(sorted(Counter(str(s.get("status")) for s in scores).items())),
        # Which grading mode decided the scores (the `tests` scorer's `details.mode`:
        # `swebench` or `strict`); a rescore may grade in another mode than the first run.
        "grading_modes": dict(
            sorted(
                Counter(m for s in scores if (m := (s.get("details") or {}).get("mode"))).items()
            )
        ),
        # What a verifier that ran in the agent's own box (Harbor's `in_place`) found the
        # agent had done that could decide its reward: a reviewer's list, per trajectory.
        "evidence": {
            tid: {"resolved": t.outcome == "resolved", "evidence": ev}
            for tid, t in sorted(state.trajectories.items())
            if t.score is not None and (ev := (t.score.get("details") or {}).get("evidence"))
        },
        "partially_resolved": sum(
            (s.get("details") or {}).get("resolution") == "RESOLVED_PARTIAL" for s in scores
        ),
        # A gold solution that does not always pass means the grader cannot be trusted.
        "flaky_graders": (
            [f.model_dump(mode="json") for f in flaky_graders(finished)] if oracle else None
        ),
        "confidence": {"level": CONFIDENCE, "bootstrap_seed": SEED, "resamples": RESAMPLES},
        "nodes": where_it_ran(state),
        "tasks": per_task,
        "branches": branch_trees(state),
        "branches_as_samples": branches_as_samples,
        "cost": cost_report(state, {task: row["resolved"] for task, row in per_task.items()}),
        "sampling": adaptive_sampling(state),
        "validation": (
            validation_report(state)
            if isinstance(state.spec.agent, ValidationAgentConfig)
            else None
        ),
        # A `tests` scorer's excluded tests (a validation's flaky ones), named wherever used.
        "ignored_tests": getattr(state.spec.scorer, "ignore_tests", None) or None,
    }


def adaptive_sampling(state: CampaignState) -> dict[str, Any] | None:
    """Adaptive sampling's plan: its settings, each round, the stop, and per task how many
    samples it got and why (None: a fixed number of samples)."""
    sampling = state.sampling
    if sampling is None:
        return None
    config = sampling.config
    tasks: dict[str, dict[str, Any]] = {
        task_id: {"samples": config.min, "why": [f"{config.min} to start (min)"]}
        for task_id in sampling.planned
    }
    for decision in sampling.rounds:
        for task_id, added in decision["added"].items():
            tasks[task_id]["samples"] += added
            reason = decision["reasons"].get(task_id, "")
            tasks[task_id]["why"].append(f"+{added} in round {decision['round']}: {reason}")
    stopped = sampling.stopped
    for row in tasks.values():
        if row["samples"] >= config.max:
            row["why"].append(f"at max ({config.max})")
        elif stopped is not None and stopped["reason"] == "target_reached":
            row["why"].append("no more: the interval reached its target")
    return {
        "min": config.min,
        "max": config.max,
        "target_half_width": config.target_half_width,
        "planned": sampling.total,
        "most": sampling.most,
        "rounds": [{k: v for k, v in r.items() if k != "basis"} for r in sampling.rounds],
        "stopped": stopped,
        "tasks": tasks,
    }


def clusters_of(
    state: CampaignState, cluster_by: str | None, tasks: Iterable[str]
) -> tuple[str | None, dict[str, str], int]:
    """(field, task id -> cluster, tasks without the field) over `tasks`: by `cluster_by` (a
    task attribute or a `metadata` key), else by `repo` when every one of them has a repo.

    Raises:
        InvalidInput: no task has the field `cluster_by`.
    """
    by_id = {task.id: task for task in state.spec.task_list()}
    fields: dict[str, dict[str, object]] = {}
    for task_id in tasks:
        task = by_id.get(task_id)
        if task is None:
            continue
        row: dict[str, object] = {"repo": task.repo}
        if cluster_by is not None:
            row[cluster_by] = (
                getattr(task, cluster_by)
                if cluster_by in type(task).model_fields
                else task.metadata.get(cluster_by)
            )
        fields[task_id] = row
    field, labels, missing = task_clusters(fields, cluster_by)
    if cluster_by is not None and fields and not labels:
        known = sorted({key for task in by_id.values() for key in task.metadata})
        raise InvalidInput(
            f"no task has a field {cluster_by!r} to cluster by; use `repo` or a metadata key"
            + (f" ({', '.join(known[:20])})" if known else " (these tasks have no metadata)")
        )
    return field, labels, missing


def graded_trees(
    state: CampaignState, branches_as_samples: bool = False
) -> list[tuple[TrajectoryState, bool]]:
    """Each graded sample (a tree of branches as one) and whether any of its trajectories
    needed a retry after an infrastructure failure."""
    found = []
    for root, branches in samples(state, branches_as_samples=branches_as_samples):
        trajectory = best_of(root, branches)
        if trajectory.done and trajectory.outcome not in (None, *UNGRADED_OUTCOMES):
            retried = any(m.infra_history for m in (root, *branches))
            found.append((trajectory, retried))
    return found


def where_it_ran(state: CampaignState) -> dict[str, dict[str, Any]] | None:
    """Per cluster node, the instances (task ids) and the steps that ran there (None: every
    step ran on one machine)."""
    nodes: dict[str, Counter[str]] = {}
    instances: dict[str, set[str]] = {}
    for trajectory in state.trajectories.values():
        for node in {node for _, node in trajectory.nodes}:
            nodes.setdefault(node, Counter())["trajectories"] += 1
            instances.setdefault(node, set()).add(trajectory.task_id)
        for kind, node in trajectory.nodes:
            nodes[node][_STEP_COLUMNS.get(kind, "failed_steps")] += 1
    if not nodes:
        return None
    columns = ("trajectories", "generated", "scored", "failed_steps")
    return {
        node: {"instances": sorted(instances[node]), **{c: counts.get(c, 0) for c in columns}}
        for node, counts in sorted(nodes.items())
    }


_STEP_COLUMNS = {"generated": "generated", "scored": "scored"}


def infrastructure_health(state: CampaignState) -> dict[str, Any]:
    """What the infrastructure did to a campaign: failed attempts by cause (retried or not),
    trajectories sent back by a resume, instances re-provisioned and why.
    """
    history = [event for t in state.trajectories.values() for event in t.infra_history]
    causes = Counter(f"{event['phase']}: {event['type']}" for event in history)
    return {
        "failed_attempts": len(history),
        "failed_attempts_by_cause": dict(sorted(causes.items())),
        "trajectories_hit": sum(1 for t in state.trajectories.values() if t.infra_history),
        "unresolved_failures": len(state.infra_failed),
        "retried_by_resume": state.retried,
        "instances_reprovisioned": len(state.reprovisioned),
        "reprovisioned": state.reprovisioned[-20:],
    }


def endpoint_limits(state: CampaignState) -> dict[str, dict[str, Any]]:
    """Adaptive per-endpoint limits: where each settled, its range and its history of changes
    (the ceiling found is the limit now; `congested_at` the limits that met a refusal)."""
    found = {}
    for endpoint, entry in state.endpoint_limits.items():
        congested = [c["previous"] for c in entry.history if c["limit"] < c["previous"]]
        found[endpoint] = {
            "limit": entry.limit,
            "changes": len(entry.history),
            "decreases": entry.decreases,
            "congested_at": congested[-20:],
            "lowest": min(c["limit"] for c in entry.history),
            "highest": max(c["limit"] for c in entry.history),
            "history": [
                {"ts": c["ts"], "limit": c["limit"], "reason": c["reason"]} for c in entry.history
            ],
        }
    return found


def _percentiles(values: Iterable[float | None]) -> dict[str, float | None]:
    known = sorted(v for v in values if v is not None)
    if not known:
        return {"count": 0, "p50_s": None, "p95_s": None}
    return {
        "count": len(known),
        "p50_s": percentile(known, 0.5),
        "p95_s": percentile(known, 0.95),
    }
