"""An evaluation set's leaderboard: each agent's figures from its own campaign's report, and
every pair of agents compared on the tasks both scored, with Holm-adjusted p-values.

Per agent: the pass rate over graded trajectories, the mean pass rate over tasks with its
interval (a bootstrap over tasks: clustered by task where a task has several samples), cost,
cost per resolved trajectory, tokens and mean time per trajectory. Per pair: `compare`'s paired
difference and the test that answers it (`build_comparison`), its p-value adjusted by Holm's
step-down method over all pairs, and from the two pilots' variance how many tasks (at the set's
samples per task) would tell the observed difference from none (`build_plan`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from mcp_evalserver.engine.comparison import build_comparison
from mcp_evalserver.engine.eval_sets import EvalSet
from mcp_evalserver.engine.formatting import p_value, percent, seconds
from mcp_evalserver.engine.planning import build_plan
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.errors import InvalidInput


def holm(p_values: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjustment (family-wise error), in the input's order; None stays None
    and does not count as a hypothesis."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    adjusted: list[float | None] = [None] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(tested):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[index] = running
    return adjusted


def build_leaderboard(evalset: EvalSet, states: dict[str, CampaignState]) -> dict[str, Any]:
    """The leaderboard (JSON-ready), agents by mean pass rate, best first."""
    rows: dict[str, dict[str, Any]] = {}
    for agent, state in states.items():
        report = build_report(state)
        summary, cost = report["summary"], report["cost"]
        rows[agent] = {
            "campaign": state.id,
            "status": report["status"],
            "pass_rate": report["pass_rate"],
            "resolved": report["resolved"],
            "graded": report["graded"],
            "mean_pass_rate": summary["mean_pass_rate"],
            "mean_pass_rate_ci": summary["mean_pass_rate_ci"],
            "cost_usd": cost["cost_usd"],
            "cost_per_resolved_usd": cost["cost_per_resolved_usd"],
            "input_tokens": cost["input_tokens"],
            "output_tokens": cost["output_tokens"],
            "mean_time_s": summary["latency"]["mean_s"],
        }
    order = sorted(rows, key=lambda a: (-(rows[a]["mean_pass_rate"] or 0.0), a))
    pairs = [_pair(a, b, states[a], states[b]) for a, b in itertools.combinations(order, 2)]
    for pair, adjusted in zip(pairs, holm([p["p_value"] for p in pairs]), strict=True):
        pair["p_value_holm"] = adjusted
    return {
        "set": evalset.id,
        "name": evalset.name,
        "agents": {agent: rows[agent] for agent in order},
        "pairs": pairs,
    }


def _pair(a: str, b: str, state_a: CampaignState, state_b: CampaignState) -> dict[str, Any]:
    comparison = build_comparison(state_a, state_b)
    difference = comparison["mean_difference"]
    tasks_needed: int | None = None
    samples = state_b.spec.initial_samples
    if difference:
        try:
            plan = build_plan(state_a, state_b, delta=abs(difference))
        except InvalidInput:
            plan = None
        if plan is not None:
            option = next(
                (o for o in plan["options"] if o["samples_per_task"] == samples),
                None,
            )
            tasks_needed = option["tasks"] if option else None
    return {
        "a": a,
        "b": b,
        "shared_tasks": comparison["shared_tasks"],
        "difference": difference,
        "difference_ci": comparison["difference_ci"],
        "wins": comparison["wins"],
        "losses": comparison["losses"],
        "ties": comparison["ties"],
        "test": comparison["tests"]["answered_by"],
        "p_value": comparison["tests"]["p_value"],
        "tasks_to_tell_apart": tasks_needed,
    }


def render_leaderboard_markdown(board: dict[str, Any]) -> str:
    """The leaderboard as a person reads it."""
    lines = [
        f"# Evaluation set {board['set']}",
        "",
        "| agent | mean pass rate (95% CI) | resolved / graded | cost | cost per resolved "
        "| tokens in / out | mean time | campaign | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for agent, row in board["agents"].items():
        ci = row["mean_pass_rate_ci"]
        interval = f" ({percent(ci['low'])}–{percent(ci['high'])})" if ci else ""
        lines.append(
            f"| {agent} | {percent(row['mean_pass_rate'])}{interval} | {row['resolved']}/"
            f"{row['graded']} | {_usd(row['cost_usd'])} | {_usd(row['cost_per_resolved_usd'])}"
            f" | {row['input_tokens']} / {row['output_tokens']} | {seconds(row['mean_time_s'])}"
            f" | {row['campaign']} | {row['status']} |"
        )
    if board["pairs"]:
        lines += [
            "",
            "Pairs (B minus A, on the tasks both scored; p-values Holm-adjusted over all pairs):",
            "",
            "| A | B | tasks | difference (95% CI) | B wins / losses / ties | test | p | p (Holm) "
            "| tasks to tell apart |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for pair in board["pairs"]:
            ci = pair["difference_ci"]
            interval = f" ({_signed(ci['low'])} to {_signed(ci['high'])})" if ci else ""
            lines.append(
                f"| {pair['a']} | {pair['b']} | {pair['shared_tasks']} | "
                f"{_signed(pair['difference'])}{interval} | {pair['wins']} / {pair['losses']} / "
                f"{pair['ties']} | {pair['test'] or '-'} | {p_value(pair['p_value'], digits=4)}"
                f" | {p_value(pair['p_value_holm'], digits=4)}"
                f" | {pair['tasks_to_tell_apart'] or '-'} |"
            )
    return "\n".join(lines) + "\n"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f} pts"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:.4f}"
