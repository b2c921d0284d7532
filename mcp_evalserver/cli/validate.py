"""The `validate` command: run a task set's gold and empty patches before it grades anyone."""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.cli.scoring import RunCampaign, scorer_argument
from mcp_evalserver.engine.parts import check_spec
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.engine.validation import clean_tasks, validation_report, validation_runs
from mcp_evalserver.errors import InvalidInput, NotFound
from mcp_evalserver.spec.campaign import CampaignSpec, parse_spec
from mcp_evalserver.spec.harbor import harbor_of
from mcp_evalserver.spec.scorers import HarborScorerConfig


def add_validate_command(commands: Any) -> None:
    """Adds `validate` to the CLI's subcommands (`commands`, from `add_subparsers`)."""
    validate = commands.add_parser(
        "validate",
        help="run each task's gold patch and its empty patch several times (a campaign: "
        "resumable) and name the broken, trivial and flaky tasks and tests",
    )
    validate.add_argument("tasks", type=Path, help="task file, SWE-bench or Harbor task folder")
    validate.add_argument(
        "--runs", type=int, default=5, help="gold runs and empty runs per task (default 5)"
    )
    validate.add_argument(
        "--scorer",
        help="scorer config, JSON text or file (default: `tests`, or `harbor` for Harbor tasks)",
    )
    validate.add_argument(
        "--id",
        dest="campaign_id",
        help="campaign id; an existing validation is resumed (default: a new one)",
    )
    validate.add_argument("--concurrency", type=int, default=4, help="runs at once (default 4)")
    validate.add_argument(
        "--write-clean", type=Path, metavar="FILE", help="write the tasks fit to grade (JSONL)"
    )
    validate.add_argument(
        "--write-ignore",
        type=Path,
        metavar="FILE",
        help='write the flaky tests, {"task id": [tests]}: the `tests` scorer\'s `ignore_tests`',
    )
    validate.add_argument("--no-progress", action="store_true", help="no live progress line")


def validation_spec(
    tasks: Path, runs: int, scorer: dict[str, Any] | None, concurrency: int
) -> CampaignSpec:
    """A validation campaign's spec: 2 * `runs` samples of every task, the first half gold.

    Raises:
        InvalidInput: the tasks or the scorer are invalid, or `runs` is out of range.
    """
    if not 1 <= runs <= 100:
        raise InvalidInput(f"--runs {runs}: give 1 to 100")
    data: dict[str, Any] = {
        "name": "validate",
        "tasks": str(tasks.resolve()),
        "samples": 2 * runs,
        "agent": {"type": "validation", "runs": runs},
        "scorer": scorer or {"type": "tests", "grade_empty": True},
        "limits": {"concurrency": concurrency},
    }
    spec = parse_spec(data)
    if scorer is None and all(harbor_of(task.metadata) for task in spec.task_list()):
        spec = spec.model_copy(update={"scorer": HarborScorerConfig()})
    return spec


def dispatch_validate(
    args: argparse.Namespace, store: CampaignStore, run: RunCampaign
) -> int | None:
    """Runs the validate command; None when `args` is another command.

    Raises:
        EvalServerError: invalid tasks or scorer, or a campaign that is not a validation.
    """
    if args.command != "validate":
        return None
    campaign_id = args.campaign_id
    try:
        existing = store.load(campaign_id) if campaign_id else None
    except NotFound:
        existing = None
    if existing is None:
        scorer = scorer_argument(args.scorer) if args.scorer else None
        spec = validation_spec(args.tasks, args.runs, scorer, args.concurrency)
        checked = check_spec(spec)
        create = functools.partial(store.create, spec, campaign_id, scorer=checked)
        campaign_id = anyio.run(create)
        print(f"validation {campaign_id} ({store.directory(campaign_id)})", file=sys.stderr)
        status = run(store, campaign_id, progress=not args.no_progress, scorer=checked)
    else:
        validation_runs(existing)  # refuses a campaign that is not a validation
        print(f"resuming validation {campaign_id}", file=sys.stderr)
        status = run(store, campaign_id, progress=not args.no_progress)
    state = store.load(campaign_id)
    report = validation_report(state)
    if args.write_ignore is not None:
        _write_file(args.write_ignore, json.dumps(report["ignore_tests"], indent=2) + "\n")
    if args.write_clean is not None:
        rows = (
            json.dumps(task.model_dump(mode="json", exclude_defaults=True))
            for task in clean_tasks(state, report)
        )
        _write_file(args.write_clean, "".join(f"{row}\n" for row in rows))
    return status


def _write_file(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write {path}: {exc.strerror}; choose another path") from exc
    print(f"wrote {path}", file=sys.stderr)
