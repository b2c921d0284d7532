"""The scoring commands of the CLI: compare, rescore, SWE-bench predictions in and out.

Kept apart from `cli.py` (which owns the parser's frame, running and serving) so each command
group stays small; `cli.py` adds these with `add_scoring_commands` and hands them the parsed
arguments with `dispatch_scoring`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.campaigns import CampaignStore
from mcp_evalserver.errors import InvalidInput
from mcp_evalserver.report import build_comparison, render_comparison_markdown
from mcp_evalserver.rescoring import request_rescore

#: Runs (or resumes) a campaign with the CLI's progress display and signal handling.
RunCampaign = Callable[..., int]

OUTCOME_WORDS = ("resolved", "failed", "error", "timeout", "infra_error")


def add_scoring_commands(commands: Any) -> None:
    """Adds `compare` and `rescore` to the CLI's subcommands."""
    compare = commands.add_parser(
        "compare", help="paired comparison of two campaigns on their shared tasks (B minus A)"
    )
    compare.add_argument("campaign_a", metavar="ID_A")
    compare.add_argument("campaign_b", metavar="ID_B")
    compare.add_argument("--format", choices=["markdown", "json"], default="markdown")

    rescore = commands.add_parser(
        "rescore", help="score a campaign's submissions again, without generating them again"
    )
    rescore.add_argument("campaign_id", metavar="ID")
    rescore.add_argument(
        "--scorer", help="a scorer config (JSON text or a .json file) to score with from now on"
    )
    rescore.add_argument(
        "--outcome",
        action="append",
        choices=OUTCOME_WORDS,
        help="only trajectories with this outcome (repeatable; default: all finished)",
    )
    rescore.add_argument(
        "--trajectory", action="append", metavar="TID", help="only this trajectory (repeatable)"
    )
    rescore.add_argument("--no-progress", action="store_true", help="no live progress line")


def dispatch_scoring(
    args: argparse.Namespace, store: CampaignStore, run: RunCampaign
) -> int | None:
    """Runs the command if it is one of these; None if it is not.

    Raises:
        EvalServerError: from the command (the CLI turns it into a message and exit code).
    """
    if args.command == "compare":
        comparison = build_comparison(store.load(args.campaign_a), store.load(args.campaign_b))
        if args.format == "json":
            print(json.dumps(comparison, indent=2))
        else:
            print(render_comparison_markdown(comparison), end="")
        return 0
    if args.command == "rescore":
        scorer = _scorer_argument(args.scorer) if args.scorer else None
        chosen = anyio.run(
            lambda: request_rescore(
                store,
                args.campaign_id,
                scorer=scorer,
                outcomes=args.outcome,
                trajectories=args.trajectory,
            )
        )
        print(f"rescoring {len(chosen)} trajectories of {args.campaign_id}", file=sys.stderr)
        return run(store, args.campaign_id, progress=not args.no_progress)
    return None


def _scorer_argument(value: str) -> Any:
    """A scorer config from JSON text or from a file holding it.

    Raises:
        InvalidInput: neither valid JSON nor a readable JSON file.
    """
    text = value
    if not value.lstrip().startswith("{"):
        try:
            text = Path(value).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidInput(f"--scorer {value!r}: not JSON and not a readable file") from exc
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidInput(f"--scorer: not JSON: {exc}") from exc
