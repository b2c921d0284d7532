"""What a campaign's model calls cost: the price table it runs with, the check a budget needs,
and the cost figures of its report (per trajectory, per task, per campaign).

The ledger's `model_usage` records are the only source: replay sums them (`state.Spend`), and
a budget is checked against that running total.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from mcp_evalserver.engine.state import CampaignState, Spend
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.runtime.pricing import PRICES_ENV, PriceTable
from mcp_evalserver.spec.agents import OpenAIAgentConfig
from mcp_evalserver.spec.campaign import CampaignSpec
from mcp_evalserver.spec.prices import read_price_file
from mcp_evalserver.spec.scorers import LlmJudgeScorerConfig

#: How many of the most expensive trajectories a report lists.
MOST_EXPENSIVE = 10


def price_table(spec: CampaignSpec) -> PriceTable:
    """The prices a campaign runs with: shipped, `$MCP_EVALSERVER_PRICES`, then the spec's.

    Raises:
        InvalidInput: a price file is missing or is not one.
    """
    prices = spec.prices
    if isinstance(prices, str):  # a spec not yet resolved (the ledger's always is)
        prices = read_price_file(Path(prices))
    return PriceTable.for_campaign(prices)


def check_budget_prices(
    spec: CampaignSpec, table: PriceTable, budget_usd: float | None = None
) -> None:
    """Under a budget (the spec's, or `budget_usd` a resume gives), every model the spec names
    must have a price: a call of unknown cost could not be counted against it.

    Raises:
        InvalidInput: there is a budget and the spec names a model the table does not price.
    """
    if spec.limits.budget_usd is None and budget_usd is None:
        return
    unpriced = sorted({m for m in spec_models(spec) if table.lookup(m) is None})
    if unpriced:
        raise InvalidInput(
            f"limits.budget_usd needs the price of every model, and {', '.join(unpriced)} has "
            'none: add it to the spec\'s `prices` ({"MODEL": {"input": ..., "output": ...}} '
            f"in US dollars per million tokens) or to the file ${PRICES_ENV} names"
        )


def spec_models(spec: CampaignSpec) -> list[str]:
    """The models the spec's agent and judges call (those known before the campaign runs)."""
    found = [spec.agent.model] if isinstance(spec.agent, OpenAIAgentConfig) else []
    return found + [judge.model for judge in _judges(spec.scorer)]


def _judges(config: Any) -> Iterator[LlmJudgeScorerConfig]:
    if isinstance(config, LlmJudgeScorerConfig):
        yield config
    elif isinstance(config, BaseModel):
        for name in type(config).model_fields:
            yield from _judges(getattr(config, name))
    elif isinstance(config, list):
        for item in config:
            yield from _judges(item)


def cost_report(state: CampaignState, resolved_by_task: dict[str, int]) -> dict[str, Any]:
    """The campaign's cost: in all, by source, per task, per resolved trajectory, its most
    expensive trajectories, and its budget."""
    per_task: dict[str, Spend] = {}
    for trajectory in state.trajectories.values():
        if trajectory.spend is not None:
            per_task[trajectory.task_id] = trajectory.spend.merged(per_task.get(trajectory.task_id))
    resolved = sum(resolved_by_task.values())
    total = state.spend.cost_usd if state.spend.records else None
    spent = [t for t in state.trajectories.values() if t.spend is not None]
    spent.sort(key=lambda t: (-(t.spend.priced_usd if t.spend else 0.0), t.id))
    return {
        **state.spend.as_json(),
        "cost_usd": total,
        "cost_per_resolved_usd": total / resolved if total is not None and resolved else None,
        "tasks": {
            task: {
                "cost_usd": spend.cost_usd,
                "unpriced_records": spend.unpriced,
                "resolved": resolved_by_task.get(task, 0),
                "cost_per_resolved_usd": (
                    spend.cost_usd / resolved_by_task[task]
                    if spend.cost_usd is not None and resolved_by_task.get(task)
                    else None
                ),
            }
            for task, spend in sorted(per_task.items())
        },
        "most_expensive": [
            {"trajectory": t.id, "cost_usd": t.spend.cost_usd, "outcome": t.outcome}
            for t in spent[:MOST_EXPENSIVE]
            if t.spend is not None
        ],
        "budget": {
            "budget_usd": state.budget_usd,
            "spent_usd": state.spend.priced_usd,
            "exhausted": state.over_budget,
            "trajectories_stopped": len(state.budget_exhausted),
        }
        if state.budget_usd is not None or state.budget_exhausted
        else None,
    }


def cost_lines(cost: dict[str, Any]) -> list[str]:
    """The report's Markdown lines about cost and budget (none when nothing was recorded)."""
    lines = []
    if cost["records"]:
        sources = ", ".join(f"{k} ${v:.4f}" for k, v in cost["by_source"].items())
        total = cost["cost_usd"]
        shown = (
            f"**${total:.4f}**"
            if total is not None
            else f"**unknown** (${cost['priced_usd']:.4f} priced, {cost['unpriced_records']}"
            " record(s) of unknown price: add their model to the prices)"
        )
        per = cost["cost_per_resolved_usd"]
        lines.append(
            f"- cost: {shown}"
            + (f" ({sources})" if sources else "")
            + f"; {cost['requests']} model call(s), {cost['input_tokens']} tokens in"
            f" ({cost['cached_input_tokens']} cached), {cost['output_tokens']} out"
            + (f"; ${per:.4f} per resolved trajectory" if per is not None else "")
        )
    if (budget := cost["budget"]) is not None:
        lines.append(
            f"- budget: ${budget['spent_usd']:.4f} spent of "
            + (f"${budget['budget_usd']:.2f}" if budget["budget_usd"] is not None else "none")
            + (
                f"; **{budget['trajectories_stopped']} trajectory(ies) stopped at the budget**"
                " (budget_exhausted: not graded, excluded from every rate; resume with a larger"
                " budget_usd to run them)"
                if budget["trajectories_stopped"]
                else ""
            )
        )
    return lines
