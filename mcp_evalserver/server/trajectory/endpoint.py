"""One trajectory's MCP endpoint, served for the `command` agent's program.

Handed to the agent as a factory (`agents.command.EndpointFactory`): agents never import the
protocol layer. The endpoint is streamable HTTP on 127.0.0.1, a random port and a fresh bearer
token; its tools reach that trajectory's workspace only (`ScopedTrajectory`). Which MCP app
serves them is the caller's (`server.mcp_app.serve_trajectory`): this module knows no SDK.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp

from mcp_evalserver.agents.base import TrajectoryContext
from mcp_evalserver.server.trajectory.scoped import ScopedTrajectory
from mcp_evalserver.spec.submission import Submission


@dataclass(frozen=True)
class ServedTrajectory:
    """The endpoint while it is served: where it is, its token, and what was done through it."""

    scoped: ScopedTrajectory
    url: str
    token: str

    @property
    def calls(self) -> list[dict[str, Any]]:
        return self.scoped.calls

    @property
    def submission(self) -> Submission | None:
        return self.scoped.submission

    @property
    def submitted(self) -> anyio.Event:
        return self.scoped.submitted


@contextlib.asynccontextmanager
async def serve_trajectory_endpoint(
    context: TrajectoryContext, app_for: Callable[[ScopedTrajectory], ASGIApp]
) -> AsyncIterator[ServedTrajectory]:
    """Serves the trajectory's endpoint, the app `app_for` makes, for the life of the `async with`.

    Raises:
        InvalidInput: no loopback port can be bound.
    """
    # Imported here: uvicorn is needed only by campaigns of this agent.
    import uvicorn

    from mcp_evalserver.server.transport.http import BearerAuth, listening_socket

    class QuietServer(uvicorn.Server):
        """A uvicorn server that leaves signals alone: it lives inside another process's run."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn would take over SIGINT/SIGTERM while it serves; a trajectory's endpoint
            # must not swallow the Ctrl-C meant for the CLI or the main server.
            yield

    scoped = ScopedTrajectory(context)
    token = secrets.token_urlsafe(32)
    sock = listening_socket("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    server = QuietServer(
        uvicorn.Config(
            BearerAuth(app_for(scoped), token),
            http="httptools",  # as the main server: the C parser, not h11
            log_level="warning",
            # None: uvicorn leaves the process's logging configuration as it is.
            log_config=None,
            lifespan="on",
            timeout_graceful_shutdown=2,
        )
    )

    async def serve() -> None:
        # Shielded: the endpoint always stops through `should_exit`, which closes its socket
        # and sessions, even when the trajectory is cancelled (its timeout).
        with anyio.CancelScope(shield=True):
            await server.serve(sockets=[sock])

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(serve)
            try:
                yield ServedTrajectory(scoped, url, token)
            finally:
                server.should_exit = True
    finally:
        sock.close()
