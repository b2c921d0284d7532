"""The `mcp-evalserver` command line: run, status, resume, report, schema (and the server)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio

from mcp_evalserver import __version__
from mcp_evalserver.cli.agents import add_agents_command, dispatch_agents
from mcp_evalserver.cli.calibrate import add_calibrate_command, dispatch_calibrate
from mcp_evalserver.cli.endpoints import serve_trajectory
from mcp_evalserver.cli.eval_sets import dispatch_eval_set
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
from mcp_evalserver.engine.store import STATE_DIR_ENV, CampaignStore, default_state_dir, read_nodes
from mcp_evalserver.errors import EvalServerError, InvalidInput, NotFound
from mcp_evalserver.runtime.sandboxes import require_placement
from mcp_evalserver.sandbox.docker_engine import BUILD_NETWORK_ENV, NETWORK_ENV
from mcp_evalserver.scoring.base import Scorer
from mcp_evalserver.server.surface import TOOL_PROFILES
from mcp_evalserver.server.transport.http import TOKEN_ENV
from mcp_evalserver.spec.campaign import load_spec, spec_json_schema

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_CANCELLED = 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-evalserver",
        description="Run crash-safe, isolated evaluation campaigns for AI agents.",
        epilog=f"State lives in --state-dir, else ${STATE_DIR_ENV}, else "
        "$XDG_DATA_HOME/mcp-evalserver (~/.local/share/mcp-evalserver).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--state-dir", type=Path, help="where campaigns and ledgers live")
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--stdio", action="store_true", help="serve MCP over stdin/stdout")
    server.add_argument(
        "--http", action="store_true", help="serve MCP over streamable HTTP at /mcp (+ /healthz)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="--http: address (default loopback)")
    parser.add_argument("--port", type=int, default=8765, help="--http: port (0: any free one)")
    parser.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="--http: processes serving the port (default: one per CPU, at most 8; 1: a single "
        "process); any of them answers any client, one drives the campaigns",
    )
    parser.add_argument(
        "--token",
        help=f"--http: bearer token clients must send (default ${TOKEN_ENV}, else generated "
        "and printed once; required beyond loopback)",
    )
    parser.add_argument(
        "--no-resume-running",
        dest="resume_running",
        action="store_false",
        help="--stdio/--http: leave interrupted campaigns (their process died, or a server "
        "stopped) idle until a client calls resume; by default the server resumes them",
    )
    parser.add_argument(
        "--tools",
        choices=TOOL_PROFILES,
        default="all",
        help="--stdio/--http: the MCP tools served: all (default), or agent: only what an agent "
        "that claims trajectories needs (claim_trajectory and the workspace tools), a smaller "
        "list for its model to read every turn",
    )
    parser.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run instances on this Ray cluster's nodes (`auto`, HOST:PORT or ray://...) unless "
        "a campaign's `sandbox` says otherwise (servers, run, resume); needs the `ray` extra",
    )
    parser.add_argument(
        "--build-network",
        choices=("default", "host", "none"),
        help="docker backend: the network of task image builds (default: "
        "$MCP_EVALSERVER_DOCKER_BUILD_NETWORK, else the engine's default); `host` lets a "
        "Dockerfile's RUN reach this machine's network (package mirrors) on an engine "
        "without a bridge",
    )
    parser.add_argument(
        "--task-network",
        metavar="NAME",
        help="docker backend: the engine network tasks that ask for network join (default: "
        "$MCP_EVALSERVER_DOCKER_NETWORK, else `bridge`); `none` runs them offline instead, "
        "with a warning",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="--http: another Host header to accept (DNS-rebinding protection); repeatable",
    )
    parser.add_argument(
        "--allow-plugins",
        action="store_true",
        help="--http: let clients' specs load Python plugins (`python` agents and scorers), "
        "run host programs (`command` agents) and use a Ray cluster other than --ray's, i.e. "
        "run code as this server's user; off by default over HTTP, always on over --stdio",
    )
    parser.add_argument(
        "--allow-paths",
        nargs="+",
        action="extend",
        default=[],
        type=Path,
        metavar="DIR",
        help="--http: let clients' specs name host paths (a task's `path`, a task file, a "
        "predictions file) under these directories (symlinks and `..` resolved first); none "
        "by default over HTTP, any over --stdio",
    )
    parser.add_argument(
        "--allow-env",
        nargs="+",
        action="extend",
        default=[],
        metavar="NAME",
        help="--http: let clients' specs use these variables of the server's environment as "
        "API keys (`api_key_env` of `openai` agents and `llm_judge` scorers) and pass them to "
        "`command` agents' programs (`pass_env`); none by default over HTTP (a spec gives "
        '`"api_key_env": null` for an endpoint that needs no key), any over --stdio',
    )
    parser.add_argument(
        "--allow-endpoints",
        nargs="+",
        action="extend",
        default=[],
        metavar="URL",
        help="--http: model endpoints clients' specs may name as `base_url` (a URL equal to or "
        "below one of these; its host as written, so loopback and link-local addresses only "
        "when named here), besides OpenAI's and $OPENAI_BASE_URL; none by default over HTTP, "
        "any over --stdio",
    )
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
    return parser


class _StderrNotes(logging.Handler):
    """The package's warnings (a task field kept as metadata, a test command chosen) as
    `mcp-evalserver: ...` lines on whatever `sys.stderr` is when they are emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"mcp-evalserver: {record.getMessage()}", file=sys.stderr)


def _say_notes_on_stderr() -> None:
    package = logging.getLogger("mcp_evalserver")
    if not any(isinstance(h, _StderrNotes) for h in package.handlers):
        handler = _StderrNotes(logging.WARNING)
        package.addHandler(handler)


def main(argv: list[str] | None = None) -> int:
    _say_notes_on_stderr()
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.stdio or args.http) and args.command is not None:
        parser.error(f"--stdio/--http serve MCP; they do not combine with {args.command!r}")
    # The docker backend reads its engine's settings from the environment (workers and Ray
    # nodes started from here inherit them).
    if args.build_network is not None:
        os.environ[BUILD_NETWORK_ENV] = args.build_network
    if args.task_network is not None:
        os.environ[NETWORK_ENV] = args.task_network
    try:
        require_placement(None, args.ray)  # `--ray` without Ray: say so before anything runs
    except InvalidInput as exc:
        print(f"mcp-evalserver: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.stdio or args.http:
        try:
            return _serve(args)
        except EvalServerError as exc:
            print(f"mcp-evalserver: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    store = CampaignStore(args.state_dir or default_state_dir())
    try:
        return _dispatch(args, store)
    except EvalServerError as exc:
        print(f"mcp-evalserver: {exc}", file=sys.stderr)
        return EXIT_USAGE if isinstance(exc, InvalidInput | NotFound) else EXIT_FAILED


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the campaign commands need neither the MCP SDK nor uvicorn.
    from mcp_evalserver.server.front.service import WorkerConfig
    from mcp_evalserver.server.front.workers import default_workers, serve_workers
    from mcp_evalserver.server.http_app import serve_http, serve_worker
    from mcp_evalserver.server.mcp_app import serve_stdio
    from mcp_evalserver.server.privileges import Privileges
    from mcp_evalserver.server.transport.http import resolve_token

    state_dir = args.state_dir or default_state_dir()
    if args.stdio:
        serve = functools.partial(
            serve_stdio, state_dir, args.ray, resume_running=args.resume_running, tools=args.tools
        )
        with _long_lived_objects(), contextlib.suppress(KeyboardInterrupt):
            anyio.run(serve)
        return EXIT_OK
    token = resolve_token(args.token, args.host)
    privileges = Privileges.for_http(
        allow_plugins=args.allow_plugins,
        allow_paths=args.allow_paths,
        allow_env=args.allow_env,
        allow_endpoints=args.allow_endpoints,
    )
    options: dict[str, Any] = {
        "host": args.host,
        "token": token,
        "allowed_hosts": args.allow_host,
        "ray_address": args.ray,
        "resume_running": args.resume_running,
        "privileges": privileges,
        "tools": args.tools,
    }
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise InvalidInput("--workers must be at least 1")
    if workers > 1:

        def run_worker(config: WorkerConfig, port: int, ready: Callable[[], None]) -> None:
            serve_worker(config, state_dir, port=port, ready=ready, **options)

        return serve_workers(args.host, args.port, workers, run_worker)
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(functools.partial(serve_http, state_dir, port=args.port, **options))
    return EXIT_OK


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


@contextlib.contextmanager
def _long_lived_objects() -> Iterator[None]:
    """Marks what exists now (modules, schemas) and, at the end, everything as permanent for
    the garbage collector: collections while serving skip it, and the interpreter's teardown
    does not walk it (a second or more on a busy machine: a client waiting for the server to
    end would wait for that)."""
    gc.freeze()
    try:
        yield
    finally:
        gc.freeze()


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


if __name__ == "__main__":
    sys.exit(main())
