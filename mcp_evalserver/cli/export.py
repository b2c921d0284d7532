"""The `export` command: a campaign's results as Inspect AI logs or ATIF trajectories.

Kept apart from `main.py` like the other command groups; `main.py` adds it with
`add_export_command` and hands it the parsed arguments with `dispatch_export`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mcp_evalserver.engine.eval_sets import EvalSetStore
from mcp_evalserver.engine.exports import FORMATS, write_export
from mcp_evalserver.engine.exports.eval_set_logs import write_eval_set_logs
from mcp_evalserver.engine.store import CampaignStore
from mcp_evalserver.errors import InvalidInput


def add_export_command(commands: Any) -> None:
    """Adds `export` to the CLI's subcommands (`commands`, from `add_subparsers`)."""
    export = commands.add_parser(
        "export",
        help="write a campaign's results for other tools: an Inspect AI log (inspect view), "
        "or ATIF trajectories; for an evaluation set, one Inspect log per agent in a directory",
    )
    export.add_argument("campaign_id", metavar="ID", help="a campaign id or an evaluation set id")
    export.add_argument(
        "--format",
        required=True,
        choices=FORMATS,
        help="inspect: one log, FILE.eval (or FILE.json), needs the `inspect` extra; for a set, "
        "DIR with one .eval per agent, eval-set.json and logs.json, as `inspect eval-set` writes; "
        "atif: DIR/<trajectory id>/trajectory.json for each trajectory",
    )
    export.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="PATH",
        help="the log file (inspect), or DIR (atif, or a set)",
    )


def dispatch_export(args: argparse.Namespace, store: CampaignStore) -> int | None:
    """Runs `export`; None when the command is another one.

    Raises:
        NotFound: no such campaign.
        InvalidInput: `--out` cannot be written or does not fit the format, or the
            `inspect` extra is missing.
    """
    if args.command != "export":
        return None
    out: Path = args.out
    sets = EvalSetStore(store)
    if sets.exists(args.campaign_id):
        return _export_set(sets, args.campaign_id, args.format, out)
    if args.format == "inspect" and out.is_dir():
        raise InvalidInput(f"--out {out} is a directory; name the log file, e.g. {out}/NAME.eval")
    if args.format == "atif" and out.exists() and not out.is_dir():
        raise InvalidInput(
            f"--out {out} is a file; ATIF is written as one trajectory.json per trajectory: "
            "name a directory (it is created if missing)"
        )
    try:
        written = write_export(store, args.campaign_id, args.format, out)
    except OSError as exc:
        where = exc.filename or out
        raise InvalidInput(
            f"cannot write {where}: {exc.strerror or exc}; choose another --out, in a directory "
            "that exists and that you may write"
        ) from exc
    if args.format == "inspect":
        print(f"wrote {out} (read it with `inspect view --log-dir {out.parent}`)", file=sys.stderr)
    else:
        print(f"wrote {len(written)} trajectory.json file(s) under {out}", file=sys.stderr)
    return 0


def _export_set(sets: EvalSetStore, set_id: str, fmt: str, out: Path) -> int:
    if fmt != "inspect":
        campaigns = ", ".join(sets.load(set_id).campaigns.values())
        raise InvalidInput(
            f"{set_id} is an evaluation set: export it with `--format inspect --out DIR`, or "
            f"export each of its campaigns ({campaigns}) as {fmt}"
        )
    if out.exists() and not out.is_dir():
        raise InvalidInput(
            f"--out {out} is a file; a set is written as one log per agent: name a directory "
            "(it is created if missing)"
        )
    try:
        written = write_eval_set_logs(sets, set_id, out)
    except OSError as exc:
        raise InvalidInput(
            f"cannot write {exc.filename or out}: {exc.strerror or exc}; choose another --out"
        ) from exc
    print(
        f"wrote {len(written)} log(s) of set {set_id} under {out} "
        f"(read them with `inspect view --log-dir {out}`)",
        file=sys.stderr,
    )
    return 0
