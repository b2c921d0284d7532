"""The `calibrate` command: a campaign's `llm_judge` against human labels (see calibration.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.engine.calibration import calibrate_campaign, load_labels
from mcp_evalserver.engine.report_markdown import calibration_line
from mcp_evalserver.engine.store import CampaignStore


def add_calibrate_command(commands: Any) -> None:
    """Adds `calibrate` to the CLI's subcommands (`commands`, from `add_subparsers`)."""
    calibrate = commands.add_parser(
        "calibrate",
        help="compare a campaign's llm_judge scores with human labels (Spearman, Kendall, "
        "agreement); recorded so the campaign's report shows it",
    )
    calibrate.add_argument("campaign_id", metavar="ID")
    calibrate.add_argument(
        "--labels",
        type=Path,
        required=True,
        help='JSONL/JSON: {"trajectory": "t1@0", "label": 0.5} per trajectory, or with '
        '"requirement": "..." per rubric requirement; labels are true/false or 0..1',
    )
    calibrate.add_argument("--format", choices=["markdown", "json"], default="markdown")


def dispatch_calibrate(args: argparse.Namespace, store: CampaignStore) -> int | None:
    """Runs the calibrate command; None when `args` is another command."""
    if args.command != "calibrate":
        return None
    labels, digest = load_labels(args.labels)
    source = {"file": str(args.labels), "sha256": digest, "rows": len(labels)}
    result = anyio.run(lambda: calibrate_campaign(store, args.campaign_id, labels, source=source))
    if args.format == "json":
        print(json.dumps(result, indent=2))
    else:
        print(calibration_line(result).removeprefix("- "))
        confusion = result["confusion"]
        print(
            f"confusion (judge vs labels): {confusion['true_positive']} both resolved, "
            f"{confusion['true_negative']} both not, {confusion['false_positive']} judge only, "
            f"{confusion['false_negative']} labels only; {result['unmatched_labels']} label(s) "
            f"matched no judged trajectory, {result['judge_errors']} left out for the judge's "
            "own errors"
        )
    return 0
