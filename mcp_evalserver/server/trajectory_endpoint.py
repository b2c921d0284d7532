"""One trajectory's MCP endpoint, served for the `command` agent's program.

Made here, where the server is assembled, and handed to the agent as a factory
(`agents.command.EndpointFactory`): agents never import the protocol layer. The endpoint is
streamable HTTP on 127.0.0.1, a random port and a fresh bearer token; its tools reach that
trajectory's workspace only (`ScopedTrajectory`).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import anyio

from mcp_evalserver.agents.base import Submission, TrajectoryContext
from mcp_evalserver.server.scoped import ScopedTrajectory


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
async def serve_trajectory_endpoint(context: TrajectoryContext) -> AsyncIterator[ServedTrajectory]:
    """Serves the trajectory's endpoint for the life of the `async with`.

    Raises:
        InvalidInput: no loopback port can be bound.
    """
    # Imported here: the MCP SDK and uvicorn are needed only by campaigns of this agent.
    import uvicorn

    from mcp_evalserver.server.http import BearerAuth, listening_socket
    from mcp_evalserver.server.mcp_app import trajectory_http_app

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
            BearerAuth(trajectory_http_app(scoped), token),
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
