"""The campaign commands of `mcp-evalserver` (run, status, resume, report, schema and the
subcommand modules'), over the engine: imported by `main` only when a command runs."""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver.cli.agents import add_agents_command, dispatch_agents
from mcp_evalserver.cli.calibrate import add_calibrate_command, dispatch_calibrate
from mcp_evalserver.cli.endpoints import serve_trajectory
from mcp_evalserver.cli.eval_sets import dispatch_eval_set
from mcp_evalserver.cli.exits import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK, EXIT_USAGE
from mcp_evalserver.cli.export import add_export_command, dispatch_export
from mcp_evalserver.cli.plan import add_cluster_option, add_plan_command, dispatch_plan
from mcp_evalserver.cli.progress import progress_line, show_progress
from mcp_evalserver.cli.scoring import add_scoring_commands, dispatch_scoring
from mcp_evalserver.cli.sweep import add_sweep_command, dispatch_sweep
from mcp_evalserver.cli.validate import add_validate_command, dispatch_validate
from mcp_evalserver.engine.parts import check_spec
from mcp_evalserver.engine.report import build_report
from mcp_evalserver.engine.report_markdown import render_markdown
from mcp_evalserver.engine.runner import CampaignRunner
from mcp_evalserver.engine.state import CampaignState
from mcp_evalserver.engine.store import CampaignStore, read_nodes
from mcp_evalserver.errors import EvalServerError, InvalidInput, NotFound
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.spec.campaign import load_spec, spec_json_schema


def add_commands(parser: argparse.ArgumentParser) -> None:
    """Every command, as subparsers of `parser`."""
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="start a campaign from a spec file and run it (a spec with `agents`: an "
        "evaluation set, one campaign per agent on shared instances)",
    )
    run.add_argument("spec", type=Path, help="campaign or set spec (JSON); see `schema`")
    run.add_argument(
        "--id",
        dest="campaign_id",
        help="campaign id, or set id: an existing set gets the spec's new agents "
        "(default: name-time-random)",
    )
    run.add_argument("--no-progress", action="store_true", help="no live progress line")

    status = commands.add_parser("status", help="show one campaign, or list them all")
    status.add_argument("campaign_id", nargs="?", metavar="ID")

    resume = commands.add_parser(
        "resume",
        help="continue an interrupted campaign (or every campaign of a set), and run again "
        "what ended in an infrastructure failure",
    )
    resume.add_argument("campaign_id", metavar="ID")
    resume.add_argument("--no-progress", action="store_true", help="no live progress line")
    resume.add_argument(
        "--budget-usd",
        type=float,
        metavar="USD",
        help="a new budget, larger than what it spent: what the old one stopped runs again",
    )

    report = commands.add_parser("report", help="print a campaign's report, or a set's leaderboard")
    report.add_argument("campaign_id", metavar="ID")
    report.add_argument(
        "--format",
        choices=["markdown", "json", "html"],
        default="markdown",
        help="html: the dashboard's campaign page as one self-contained file",
    )
    report.add_argument("--out", type=Path, metavar="FILE", help="write to FILE, not stdout")
    report.add_argument(
        "--branches-as-samples",
        action="store_true",
        help="count forked branches as samples of their own (default: a root and its branches "
        "count once, resolved when any is)",
    )
    add_cluster_option(report)
    add_scoring_commands(commands)
    add_sweep_command(commands)
    add_calibrate_command(commands)
    add_export_command(commands)
    add_plan_command(commands)
    add_validate_command(commands)
    add_agents_command(commands)

    commands.add_parser("schema", help="print the JSON schema of a campaign spec")


def run_command(args: argparse.Namespace, state_dir: Path) -> int:
    """Runs the command `args` names on the campaigns under `state_dir`; its exit status."""
    store = CampaignStore(state_dir)
    try:
        return _dispatch(args, store)
    except EvalServerError as exc:
        print(f"mcp-evalserver: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, InvalidInput | NotFound) else EXIT_FAILED


def _dispatch(args: argparse.Namespace, store: CampaignStore) -> int:
    handled = dispatch_eval_set(args, store)
    if handled is None:
        handled = dispatch_scoring(args, store, _run)
    if handled is None:
        handled = dispatch_validate(args, store, _run)
    # Each subcommand module answers its own commands and None to the others.
    for dispatch in (
        dispatch_sweep,
        dispatch_calibrate,
        dispatch_export,
        dispatch_plan,
        dispatch_agents,
    ):
        if handled is None:
            handled = dispatch(args, store)
    if handled is not None:
        return handled
    if args.command == "schema":
        print(json.dumps(spec_json_schema(), indent=2))
        return EXIT_OK
    if args.command == "run":
        spec = load_spec(args.spec)
        # Checked once; the run grades with the scorer the check built.
        scorer = check_spec(spec, ray_address=args.ray)
        create = functools.partial(store.create, spec, args.campaign_id, scorer=scorer)
        campaign_id = anyio.run(create)
        print(f"campaign {campaign_id} ({store.directory(campaign_id)})", file=sys.stderr)
        return _run(
            store, campaign_id, progress=not args.no_progress, ray_address=args.ray, scorer=scorer
        )
    if args.command == "resume":
        stopped = store.load(args.campaign_id)
        if args.budget_usd is None and stopped.budget_exhausted and stopped.over_budget:
            raise InvalidInput(
                f"campaign {args.campaign_id} {stopped.describe_status()}: "
                f"${stopped.spend.priced_usd:.4f} spent; give --budget-usd larger than that"
            )
        if failed := len(stopped.infra_failed):
            print(
                f"running {failed} trajectory(ies) again: their last outcome was an "
                "infrastructure failure",
                file=sys.stderr,
            )
        return _run(
            store,
            args.campaign_id,
            progress=not args.no_progress,
            ray_address=args.ray,
            budget_usd=args.budget_usd,
        )
    if args.command == "status":
        if args.campaign_id is None:
            _print_campaign_list(store)
        else:
            state = store.load(args.campaign_id)
            status = _status(state)
            # Where sandbox work runs now, as the running process last wrote it.
            status["nodes_now"] = read_nodes(store.directory(args.campaign_id))
            print(json.dumps(status, indent=2))
        return EXIT_OK
    if args.command == "report":
        text = _report_text(
            store, args.campaign_id, args.format, args.branches_as_samples, args.cluster_by
        )
        _write(text, args.out)
        return EXIT_OK
    raise AssertionError(f"unhandled command {args.command}")


def _report_text(
    store: CampaignStore,
    campaign_id: str,
    output: str,
    branches_as_samples: bool = False,
    cluster_by: str | None = None,
) -> str:
    if output == "html":
        # Imported here: the other commands need no template engine.
        from mcp_evalserver.server.dashboard.render import static_report

        return static_report(store, campaign_id)
    report = build_report(
        store.load(campaign_id), branches_as_samples=branches_as_samples, cluster_by=cluster_by
    )
    return json.dumps(report, indent=2) + "\n" if output == "json" else render_markdown(report)


def _write(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot write {out}: {exc.strerror}; choose another --out") from exc
    print(f"wrote {out}", file=sys.stderr)


def _run(
    store: CampaignStore,
    campaign_id: str,
    *,
    progress: bool,
    ray_address: str | None = None,
    scorer: Scorer | None = None,
    budget_usd: float | None = None,
) -> int:
    """Runs (or resumes) a campaign in this process; `scorer`: the one its creation checked;
    `budget_usd`: its budget from now on."""
    runner = CampaignRunner(
        store,
        campaign_id,
        scorer=scorer,
        ray_address=ray_address,
        trajectory_endpoints=serve_trajectory,
        budget_usd=budget_usd,
    )

    async def supervise() -> CampaignState:
        # Caught inside the group so the user sees the error itself, not an ExceptionGroup.
        error: EvalServerError | None = None
        state: CampaignState | None = None
        async with anyio.create_task_group() as group:
            group.start_soon(_cancel_on_signal, runner)
            if progress:
                group.start_soon(show_progress, runner)
            try:
                state = await runner.run()
            except EvalServerError as exc:
                error = exc
            finally:
                group.cancel_scope.cancel()
        if error is not None:
            raise error
        assert state is not None
        return state

    state = anyio.run(supervise)
    if progress and runner.progress is not None:
        final = progress_line(
            state,
            done_at_start=runner.progress.done_at_start,
            elapsed_s=time.monotonic() - runner.progress.started_monotonic,
        )
        print(("\r" if sys.stderr.isatty() else "") + final + "\x1b[K" * sys.stderr.isatty(),
              file=sys.stderr)  # fmt: skip
    print(render_markdown(build_report(state)), end="")
    print(f"\nledger: {store.directory(campaign_id) / 'ledger.jsonl'}", file=sys.stderr)
    if state.status == "cancelled":
        print(f"cancelled; continue with `mcp-evalserver resume {campaign_id}`", file=sys.stderr)
        return EXIT_CANCELLED
    return EXIT_OK


async def _cancel_on_signal(runner: CampaignRunner) -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            runner.cancel()
            return


def _status(state: CampaignState) -> dict[str, Any]:
    report = build_report(state)
    report.pop("tasks")
    report["torn_tail_bytes"] = state.extra.get("torn_tail_bytes", 0)
    return report


def _print_campaign_list(store: CampaignStore) -> None:
    ids = store.list_ids()
    if not ids:
        print(f"no campaigns in {store.state_dir}; start one with `mcp-evalserver run SPEC`")
        return
    for campaign_id in ids:
        try:
            state = store.load(campaign_id)
        except EvalServerError as exc:
            print(f"{campaign_id}  unreadable: {exc}")
            continue
        print(
            f"{campaign_id}  {state.describe_status()}  "
            f"{state.done_count}/{len(state.trajectories)}  resolved {state.count('resolved')}"
        )
