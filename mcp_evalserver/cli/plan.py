"""The `plan` command: how many tasks x samples detect a difference, from a pilot campaign."""

from __future__ import annotations

import argparse
import json
from typing import Any

from mcp_evalserver.engine.planning import build_plan, render_plan_markdown
from mcp_evalserver.engine.store import CampaignStore


def add_plan_command(commands: Any) -> None:
    """Adds `plan` to the CLI's subcommands (`commands`, from `add_subparsers`)."""
    plan = commands.add_parser(
        "plan",
        help="how many tasks x samples detect a difference in pass rate, from a pilot "
        "campaign's variance (two campaigns on the same tasks: their correlation too)",
    )
    plan.add_argument("campaign_id", metavar="ID")
    plan.add_argument(
        "campaign_b", nargs="?", metavar="ID_B", help="a second campaign on the same tasks"
    )
    plan.add_argument(
        "--delta", type=float, default=0.02, help="difference in pass rate (default 0.02)"
    )
    plan.add_argument("--power", type=float, default=0.8, help="power (default 0.8)")
    plan.add_argument("--alpha", type=float, default=0.05, help="two-sided level (default 0.05)")
    add_cluster_option(plan)
    plan.add_argument("--format", choices=["markdown", "json"], default="markdown")


def add_cluster_option(parser: argparse.ArgumentParser) -> None:
    """`--cluster-by FIELD`, shared by report, compare and plan."""
    parser.add_argument(
        "--cluster-by",
        metavar="FIELD",
        help="cluster tasks by this task field or metadata key for clustered standard errors "
        "(default: `repo` when every task has one, else each task alone)",
    )


def dispatch_plan(args: argparse.Namespace, store: CampaignStore) -> int | None:
    """Runs the plan command; None when `args` is another command.

    Raises:
        EvalServerError: a campaign is missing, or the pilot cannot give a plan.
    """
    if args.command != "plan":
        return None
    plan = build_plan(
        store.load(args.campaign_id),
        store.load(args.campaign_b) if args.campaign_b else None,
        delta=args.delta,
        power=args.power,
        alpha=args.alpha,
        cluster_by=args.cluster_by,
    )
    if args.format == "json":
        print(json.dumps(plan, indent=2))
    else:
        print(render_plan_markdown(plan), end="")
    return 0
