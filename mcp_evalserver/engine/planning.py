"""How many tasks x samples a comparison needs, from a pilot campaign's ledger (`plan`).

The variance components come from the pilot's per-task outcomes (infrastructure failures
aside, a tree of branches as one sample, as in the report); with a second campaign on the same
tasks, from the pair, whose correlation usually lowers the answer. See `scoring.stats.power`.
"""

from __future__ import annotations

from typing import Any

from mcp_evalserver.engine.report import clusters_of, verdicts
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.scoring.stats.power import (
    TaskCounts,
    plan_sample_size,
    variance_components,
)
from mcp_evalserver.scoring.stats.summary import task_stats


def build_plan(
    a: CampaignState,
    b: CampaignState | None = None,
    *,
    delta: float = 0.02,
    power: float = 0.8,
    alpha: float = 0.05,
    cluster_by: str | None = None,
) -> dict[str, Any]:
    """The plan (JSON-ready) to detect a difference `delta` in pass rate between two campaigns.

    Raises:
        InvalidInput: fewer than two scored (shared) tasks, a bad delta/power/alpha, or no
            task has the field `cluster_by`.
    """
    counts_a = _counts(a)
    counts_b = _counts(b) if b is not None else None
    tasks = counts_a.keys() & (counts_b.keys() if counts_b is not None else counts_a.keys())
    field, labels, _ = clusters_of(a, cluster_by, sorted(tasks))
    components = variance_components(counts_a, counts_b, labels)
    plan = plan_sample_size(components, delta=delta, power=power, alpha=alpha)
    return {
        "pilot": [a.id] if b is None else [a.id, b.id],
        "cluster_field": field,
        **plan.model_dump(mode="json"),
    }


def _counts(state: CampaignState) -> dict[str, TaskCounts]:
    return {
        s.task_id: TaskCounts(successes=s.successes, attempts=s.attempts)
        for s in task_stats(verdicts(state))
        if s.attempts
    }


def render_plan_markdown(plan: dict[str, Any]) -> str:
    """The plan as a person reads it."""
    components = plan["components"]
    within = components["within_task"]
    pilot = " vs ".join(plan["pilot"])
    lines = [
        f"# Plan: detect {100 * plan['delta']:.1f} points at {100 * plan['power']:.0f}% power"
        f" (alpha {plan['alpha']:g})",
        "",
        f"- pilot: {pilot}, {components['tasks']} task(s),"
        f" {components['samples_per_task']:.1f} sample(s) per task",
        f"- variance of a task's difference: between tasks {components['between_task']:.4f},"
        " within a task "
        + ("unknown (one sample per task)" if within is None else f"{within:.4f}")
        + (
            f"; task pass rates correlate {components['correlation']:.2f} between the two"
            if components["correlation"] is not None
            else ""
        )
        + (
            f"; design effect {components['design_effect']:.2f} over"
            f" {components['clusters']} clusters by `{plan['cluster_field']}`"
            if plan["cluster_field"] is not None
            else ""
        ),
        f"- the pilot's design ({components['tasks']} tasks x"
        f" {round(components['samples_per_task'])} samples) detects"
        f" **{_points(plan['detectable_difference'])}** at {100 * plan['power']:.0f}% power",
    ]
    needed = plan["samples_needed_with_pilot_tasks"]
    if needed is not None:
        lines.append(
            f"- with the pilot's {plan['pilot_tasks']} tasks: **{needed} sample(s) per task**"
        )
    lines += [
        "",
        "| samples per task | tasks | trajectories per campaign |",
        "|---:|---:|---:|",
    ]
    for option in plan["options"]:
        tasks = option["tasks"]
        lines.append(
            f"| {option['samples_per_task']} | {'-' if tasks is None else tasks} |"
            f" {'-' if tasks is None else option['trajectories_per_campaign']} |"
        )
    if plan["notes"]:
        lines += ["", *(f"- {note}" for note in plan["notes"])]
    return "\n".join(lines) + "\n"


def _points(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} points"
