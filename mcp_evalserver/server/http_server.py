"""Serving over HTTP: uvicorn on a socket that answers `/healthz` from the moment it listens,
the app (`http_app`: MCP, the dashboard) loaded in the background after (`transport.starting`).

Nothing here imports the engine, the MCP SDK or the campaign models: they cost a second or
more, and a probe or a client polling the port must not meet a refused connection meanwhile.
An MCP request that arrives before the app is ready waits for it.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import anyio
import uvicorn
from starlette.types import ASGIApp

from mcp_evalserver import __version__
from mcp_evalserver.server.collector import settle_for_serving
from mcp_evalserver.server.front.worker_config import WorkerConfig, worker_socket
from mcp_evalserver.server.http_options import HttpOptions
from mcp_evalserver.server.transport.http import (
    BACKLOG,
    listening_socket,
    raise_fd_limit,
    unix_listening_socket,
)
from mcp_evalserver.server.transport.one_write import OneWriteHttpToolsProtocol
from mcp_evalserver.server.transport.starting import LoadAfterListening


async def serve_http(
    state_dir: Path, options: HttpOptions, *, port: int = 8765, stderr: TextIO | None = None
) -> None:
    """Serves until cancelled or signalled; prints the URL once listening (port 0 = any free).

    Raises:
        InvalidInput: the address cannot be bound.
        Exception: what loading the app or starting its service raised (the server stopped).
    """
    stderr = stderr or sys.stderr  # read when called: a test's capture replaces it
    raise_fd_limit()
    sock = listening_socket(options.host, port)
    bound_port = sock.getsockname()[1]
    server, app = _server(state_dir, options)
    display = f"[{options.host}]" if ":" in options.host else options.host
    # Scripts read the URL as the last word of the first line: keep it so.
    print(f"mcp-evalserver: serving MCP at http://{display}:{bound_port}/mcp", file=stderr)
    print(f"mcp-evalserver: dashboard at http://{display}:{bound_port}/", file=stderr)
    stderr.flush()
    await server.serve(sockets=[sock])
    if app.failure is not None:
        raise app.failure


def serve_worker(
    worker: WorkerConfig,
    state_dir: Path,
    options: HttpOptions,
    *,
    port: int,
    ready: Callable[[], None],
) -> None:
    """Serves as `worker` of `--workers N` (front/workers.py) on `port`, shared with the
    others by SO_REUSEPORT, and on its own unix socket for the requests they pass it (its
    sessions'); calls `ready` once its app has loaded and started.

    Raises:
        InvalidInput: the address cannot be bound.
        Exception: what loading the app or starting its service raised (the worker stopped).
    """
    raise_fd_limit()
    sockets = [
        listening_socket(options.host, port, reuse_port=True),
        unix_listening_socket(worker_socket(worker.run_dir, worker.index)),
    ]
    server, app = _server(state_dir, options, worker, ready)
    anyio.run(functools.partial(server.serve, sockets=sockets))
    if app.failure is not None:
        raise app.failure


def _server(
    state_dir: Path,
    options: HttpOptions,
    worker: WorkerConfig | None = None,
    ready: Callable[[], None] = lambda: None,
) -> tuple[uvicorn.Server, LoadAfterListening]:
    """A uvicorn server of `LoadAfterListening`, which it stops if the app fails to load."""

    def stop(exc: BaseException) -> None:
        server.should_exit = True

    def serving() -> None:
        settle_for_serving()  # the app and its service have loaded: kept until the end
        ready()

    app = LoadAfterListening(
        functools.partial(_load, state_dir, options, worker),
        version=__version__,
        on_ready=serving,
        on_failure=stop,
    )
    server = uvicorn.Server(_config(app))
    return server, app


def _load(state_dir: Path, options: HttpOptions, worker: WorkerConfig | None) -> ASGIApp:
    """The app, built in a worker thread once the socket listens: most of the start's cost is
    these imports."""
    from mcp_evalserver.server.http_app import build_http_app

    return build_http_app(state_dir, options, worker)


def _config(app: ASGIApp) -> uvicorn.Config:
    # httptools, not uvicorn's pure-Python h11: parsing and writing each request was ~0.2 ms
    # of the server's CPU per tool call (bench/mcp.py); its answers leave in one write
    # (one_write.py). No keep-alive timeout to speak of: an agent's client keeps its
    # connection while its model thinks (minutes), and an idle connection costs the server a
    # few kilobytes.
    return uvicorn.Config(
        app,
        http=OneWriteHttpToolsProtocol,
        log_level="warning",
        lifespan="on",
        timeout_graceful_shutdown=5,
        timeout_keep_alive=3600,
        backlog=BACKLOG,
    )
