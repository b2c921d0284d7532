"""Campaign reports from the ledger, as a JSON-ready dict and as Markdown."""

from __future__ import annotations

from collections import Counter
from typing import Any

from mcp_evalserver.state import INFRA_OUTCOMES, CampaignState


def build_report(state: CampaignState) -> dict[str, Any]:
    """The figures of a campaign. Infrastructure failures are counted apart from the task's."""
    outcomes = Counter(t.outcome or t.phase for t in state.trajectories.values())
    per_task: dict[str, dict[str, Any]] = {}
    for trajectory in state.trajectories.values():
        row = per_task.setdefault(
            trajectory.task_id, {"samples": 0, "resolved": 0, "graded": 0, "infra_errors": 0}
        )
        row["samples"] += 1
        row["resolved"] += trajectory.outcome == "resolved"
        row["infra_errors"] += trajectory.outcome in INFRA_OUTCOMES
        row["graded"] += trajectory.done and trajectory.outcome not in INFRA_OUTCOMES
    for row in per_task.values():
        row["pass_rate"] = row["resolved"] / row["graded"] if row["graded"] else None
    graded = sum(row["graded"] for row in per_task.values())
    resolved = sum(row["resolved"] for row in per_task.values())
    return {
        "campaign": state.id,
        "name": state.spec.name,
        "status": state.status,
        "trajectories": len(state.trajectories),
        "done": state.done_count,
        "outcomes": dict(sorted(outcomes.items())),
        "pass_rate": resolved / graded if graded else None,
        "resolved": resolved,
        "graded": graded,
        "runs": state.runs,
        "tasks": per_task,
    }


def render_markdown(report: dict[str, Any]) -> str:
    """A report a person reads: the headline figures, then one row per task."""
    rate = report["pass_rate"]
    lines = [
        f"# Campaign {report['campaign']}",
        "",
        f"- status: **{report['status']}** ({report['done']}/{report['trajectories']} done,"
        f" {report['runs']} run(s))",
        f"- pass rate: **{_percent(rate)}** ({report['resolved']}/{report['graded']} graded"
        " trajectories; infrastructure errors excluded)",
        "- outcomes: " + ", ".join(f"{k} {v}" for k, v in report["outcomes"].items()),
        "",
        "| task | samples | resolved | pass rate | infra errors |",
        "|---|---:|---:|---:|---:|",
    ]
    for task_id, row in report["tasks"].items():
        lines.append(
            f"| {task_id} | {row['samples']} | {row['resolved']} | {_percent(row['pass_rate'])}"
            f" | {row['infra_errors']} |"
        )
    return "\n".join(lines) + "\n"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"
