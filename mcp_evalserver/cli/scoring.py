"""The scoring commands of the CLI: compare, rescore, SWE-bench predictions in and out.

Kept apart from `cli.py` (which owns the parser's frame, running and serving) so each command
group stays small; `cli.py` adds these with `add_scoring_commands` and hands them the parsed
arguments with `dispatch_scoring`.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.cli.plan import add_cluster_option
from mcp_evalserver.engine.comparison import build_comparison, render_comparison_markdown
from mcp_evalserver.engine.parts import check_spec
from mcp_evalserver.engine.rescoring import request_rescore
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.engine.swebench_runs import (
    export_predictions,
    predictions_spec,
    write_swebench_reports,
)
from mcp_evalserver.errors import InvalidInput

#: Runs (or resumes) a campaign with the CLI's progress display and signal handling.
RunCampaign = Callable[..., int]

OUTCOME_WORDS = ("resolved", "failed", "error", "timeout", "infra_error")


def add_scoring_commands(commands: Any) -> None:
    """Adds `compare`, `rescore`, `import-predictions`, `export-predictions` and
    `report --swebench DIR` to the CLI's subcommands (`commands`, from `add_subparsers`)."""
    compare = commands.add_parser(
        "compare", help="paired comparison of two campaigns on their shared tasks (B minus A)"
    )
    compare.add_argument("campaign_a", metavar="ID_A")
    compare.add_argument("campaign_b", metavar="ID_B")
    compare.add_argument("--format", choices=["markdown", "json"], default="markdown")
    add_cluster_option(compare)

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

    imported = commands.add_parser(
        "import-predictions",
        help="evaluate SWE-bench predictions (a file, or `gold`): an evaluation-only campaign",
    )
    imported.add_argument("predictions", metavar="PREDICTIONS", help=".json/.jsonl, or gold")
    imported.add_argument(
        "--instances",
        required=True,
        type=Path,
        help=".json/.jsonl instances, or a SWE-bench task repository (a folder with sweb.yaml)",
    )
    imported.add_argument(
        "--id", dest="campaign_id", help="campaign id (default: name-time-random)"
    )
    imported.add_argument("--name", help="campaign name (default: the model's name)")
    imported.add_argument("--scorer", help="scorer config, JSON text or file (default: tests)")
    environment = imported.add_mutually_exclusive_group()
    environment.add_argument(
        "--image", metavar="TEMPLATE", help="instance image, e.g. 'sweb.eval.{instance_id}'"
    )
    environment.add_argument(
        "--path", metavar="TEMPLATE", help="instance directory (local backend), e.g. '/r/{repo}'"
    )
    imported.add_argument("--no-run", action="store_true", help="create the campaign only")
    imported.add_argument("--no-progress", action="store_true", help="no live progress line")

    exported = commands.add_parser(
        "export-predictions", help="write a campaign's patches as a SWE-bench predictions file"
    )
    exported.add_argument("campaign_id", metavar="ID")
    exported.add_argument("out", type=Path, metavar="FILE", help=".jsonl (or .json)")
    exported.add_argument("--model", help="model_name_or_path (default: the campaign's name)")
    exported.add_argument("--sample", type=int, default=0, help="which sample (default 0)")

    # `report` belongs to cli.py; the SWE-bench layout is one more way to write it.
    report = commands.choices["report"]
    report.add_argument(
        "--swebench", type=Path, metavar="DIR", help="also write SWE-bench's report.json files "
        "and run summary under DIR",
    )  # fmt: skip
    report.add_argument("--model", help="--swebench: model name (default: the campaign's name)")
    report.add_argument("--run-id", help="--swebench: run id (default: the campaign id)")
    report.add_argument("--sample", type=int, default=0, help="--swebench: which sample")


def dispatch_scoring(
    args: argparse.Namespace, store: CampaignStore, run: RunCampaign
) -> int | None:
    """Runs the command if it is one of these; None if it is not.

    Raises:
        EvalServerError: from the command (the CLI turns it into a message and exit code).
    """
    if args.command == "compare":
        comparison = build_comparison(
            store.load(args.campaign_a), store.load(args.campaign_b), cluster_by=args.cluster_by
        )
        if args.format == "json":
            print(json.dumps(comparison, indent=2))
        else:
            print(render_comparison_markdown(comparison), end="")
        return 0
    if args.command == "rescore":
        scorer = scorer_argument(args.scorer) if args.scorer else None
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
    if args.command == "import-predictions":
        spec = predictions_spec(
            args.predictions,
            args.instances,
            scorer=scorer_argument(args.scorer) if args.scorer else None,
            name=args.name,
            image=args.image,
            path=args.path,
        )
        scorer = check_spec(spec)  # once: the run grades with it
        create = functools.partial(store.create, spec, args.campaign_id, scorer=scorer)
        campaign_id = anyio.run(create)
        print(f"campaign {campaign_id} ({store.directory(campaign_id)})", file=sys.stderr)
        if args.no_run:
            print(campaign_id)
            return 0
        return run(store, campaign_id, progress=not args.no_progress, scorer=scorer)
    if args.command == "export-predictions":
        state = store.load(args.campaign_id)
        path = export_predictions(
            state,
            store.directory(args.campaign_id),
            args.out,
            model=args.model or state.spec.name,
            sample=args.sample,
        )
        print(path)
        return 0
    if args.command == "report" and args.swebench is not None:
        state = store.load(args.campaign_id)
        summary = write_swebench_reports(
            state,
            store.directory(args.campaign_id),
            args.swebench,
            model=args.model,
            run_id=args.run_id,
            sample=args.sample,
        )
        print(f"SWE-bench run summary: {summary}", file=sys.stderr)
    return None


def scorer_argument(value: str) -> Any:
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
