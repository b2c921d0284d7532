"""The `mcp-evalserver` command line: run, status, resume, report, schema (and the server).

Serving (`--stdio`, `--http`) reads only the global options and imports only the server: a
client waits for the server's first answer, and the campaign commands (`commands.py`) import
the engine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import logging
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import anyio

from mcp_evalserver import __version__
from mcp_evalserver.cli.exits import EXIT_OK, EXIT_USAGE
from mcp_evalserver.engine.state_dir import STATE_DIR_ENV, default_state_dir
from mcp_evalserver.errors import EvalServerError, InvalidInput
from mcp_evalserver.sandbox.docker_engine import BUILD_NETWORK_ENV, NETWORK_ENV
from mcp_evalserver.server.tool_profiles import TOOL_PROFILES
from mcp_evalserver.server.transport.http import TOKEN_ENV

if TYPE_CHECKING:
    from mcp_evalserver.server.front.worker_config import WorkerConfig
    from mcp_evalserver.server.privileges import Privileges

PROG = "mcp-evalserver"


def build_parser() -> argparse.ArgumentParser:
    from mcp_evalserver.cli.commands import add_commands

    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run crash-safe, isolated evaluation campaigns for AI agents.",
        epilog=f"State lives in --state-dir, else ${STATE_DIR_ENV}, else "
        "$XDG_DATA_HOME/mcp-evalserver (~/.local/share/mcp-evalserver).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    add_global_options(parser)
    add_commands(parser)
    return parser


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """The options before a command: the server's, and those every command shares."""
    parser.add_argument("--state-dir", type=Path, help="where campaigns and ledgers live")
    server = parser.add_mutually_exclusive_group()
    server.add_argument("--stdio", action="store_true", help="serve MCP over stdin/stdout")
    server.add_argument(
        "--http",
        action="store_true",
        help="serve MCP over streamable HTTP at /mcp (+ /healthz at once, /readyz once loaded)",
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


class _OnlyGlobalOptions(argparse.ArgumentParser):
    """The global options alone; an error is raised, not printed: `build_parser` says it."""

    def error(self, message: str) -> NoReturn:
        raise argparse.ArgumentError(None, message)


def _serving(argv: list[str] | None) -> argparse.Namespace | None:
    """`argv` read as a server's (`--stdio` or `--http` and global options only), or None when
    it is anything else (a command, help, a mistake): the whole parser then reads it."""
    parser = _OnlyGlobalOptions(prog=PROG, add_help=False)
    add_global_options(parser)
    try:
        args, rest = parser.parse_known_args(argv)
    except argparse.ArgumentError:
        return None
    if rest or not (args.stdio or args.http):
        return None
    args.command = None
    return args


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
    args = _serving(argv)
    parser = None
    if args is None:
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
    if args.ray is not None:  # `--ray` without Ray: say so before anything runs
        from mcp_evalserver.runtime.sandboxes import require_placement

        try:
            require_placement(None, args.ray)
        except InvalidInput as exc:
            print(f"mcp-evalserver: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.stdio or args.http:
        try:
            return _serve(args)
        except EvalServerError as exc:
            print(f"mcp-evalserver: {exc}", file=sys.stderr)
            return EXIT_USAGE
    assert parser is not None
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    from mcp_evalserver.cli.commands import run_command

    return run_command(args, args.state_dir or default_state_dir())


def _serve(args: argparse.Namespace) -> int:
    # Imported here: the campaign commands need neither the MCP SDK nor uvicorn, and stdio
    # needs no HTTP server (its first answer waits for every import).
    state_dir = args.state_dir or default_state_dir()
    if args.stdio:
        # The collector frees nothing among what imports make (modules, classes, schemas) and
        # costs about a tenth of the MCP SDK's import: off while the server is imported.
        gc.disable()
        try:
            from mcp_evalserver.server.mcp_app import serve_stdio
        finally:
            gc.enable()
        serve = functools.partial(
            serve_stdio, state_dir, args.ray, resume_running=args.resume_running, tools=args.tools
        )
        with _long_lived_objects(), contextlib.suppress(KeyboardInterrupt):
            anyio.run(serve)
        return EXIT_OK
    # Only what listening needs: the app, its engine and its privileges' checks load in
    # the background once the socket answers (server/http_server.py).
    from mcp_evalserver.server.front.workers import default_workers, serve_workers
    from mcp_evalserver.server.http_options import HttpOptions
    from mcp_evalserver.server.http_server import serve_http, serve_worker
    from mcp_evalserver.server.transport.http import resolve_token

    def privileges() -> Privileges:
        from mcp_evalserver.server.privileges import Privileges

        return Privileges.for_http(
            allow_plugins=args.allow_plugins,
            allow_paths=args.allow_paths,
            allow_env=args.allow_env,
            allow_endpoints=args.allow_endpoints,
        )

    options = HttpOptions(
        host=args.host,
        token=resolve_token(args.token, args.host),
        privileges=privileges,
        allowed_hosts=args.allow_host,
        ray_address=args.ray,
        resume_running=args.resume_running,
        tools=args.tools,
    )
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise InvalidInput("--workers must be at least 1")
    if workers > 1:

        def run_worker(config: WorkerConfig, port: int, ready: Callable[[], None]) -> None:
            serve_worker(config, state_dir, options, port=port, ready=ready)

        return serve_workers(args.host, args.port, workers, run_worker)
    with contextlib.suppress(KeyboardInterrupt):
        anyio.run(functools.partial(serve_http, state_dir, options, port=args.port))
    return EXIT_OK


@contextlib.contextmanager
def _long_lived_objects() -> Iterator[None]:
    """Marks what exists now (modules, schemas) and, at the end, everything as permanent for
    the garbage collector: collections while serving skip it (`settle_for_serving`, which also
    collects less often), and the interpreter's teardown does not walk it (a second or more on
    a busy machine: a client waiting for the server to end would wait for that)."""
    from mcp_evalserver.server.collector import settle_for_serving

    settle_for_serving()
    try:
        yield
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
