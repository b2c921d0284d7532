"""An HTTP server that answers from the moment its socket listens, and loads its app after.

Importing the engine, the MCP SDK and the campaign models and starting the service take a
second or more (several on a loaded machine); a process supervisor, a load balancer or a client
polling `/healthz` should not see a refused connection meanwhile. So uvicorn serves
`LoadAfterListening` at once: it answers `/healthz` (liveness: the process is up and serving)
and `/readyz` (readiness: the app has loaded and its lifespan, the campaign service, has
started) itself, loads the real app in a worker thread, starts its lifespan, and hands it every
other request. A request that arrives before then waits for it, never an error; if loading
fails, waiting requests get 503 and the server is asked to stop (`on_failure`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import anyio
import anyio.abc
import anyio.to_thread
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_evalserver.server.transport.http import HEALTH_PATH, READY_PATH

logger = logging.getLogger(__name__)

_STARTING = "starting"
_READY = "ok"
_FAILED = "failed"


class LoadAfterListening:
    """ASGI app: `/healthz` and `/readyz` answered at once; every other request by the app
    `load()` returns (called in a worker thread when the server starts) once that app's
    lifespan has started. `on_ready` is called then; `on_failure` with what went wrong if
    `load` or the app's lifespan start raised (the server should stop: `failure` says why)."""

    def __init__(
        self,
        load: Callable[[], ASGIApp],
        *,
        version: str,
        on_ready: Callable[[], None] = lambda: None,
        on_failure: Callable[[BaseException], None] = lambda exc: None,
    ) -> None:
        self._load = load
        self._version = version
        self._on_ready = on_ready
        self._on_failure = on_failure
        self._app: ASGIApp | None = None
        self._started_app: _AppLifespan | None = None
        self.failure: BaseException | None = None
        self._settled = anyio.Event()  # set once the app is ready or failed to be

    @property
    def status(self) -> str:
        """`starting`, `ok` (the app serves) or `failed`."""
        if self.failure is not None:
            return _FAILED
        return _STARTING if self._app is None else _READY

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(scope, receive, send)
            return
        if scope["type"] == "http" and scope["path"] in (HEALTH_PATH, READY_PATH):
            await self._health(scope, send)
            return
        app = self._app
        if app is None:  # not ready: waits (once ready, no wait: a pass through the loop)
            await self._settled.wait()
            app = self._app
        if app is not None:
            await app(scope, receive, send)
        elif scope["type"] == "http":
            await _respond(send, 503, "the server failed to start: see its log", "text/plain")

    async def _health(self, scope: Scope, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await _respond(send, 405, "use GET", "text/plain")
            return
        status = self.status
        # Liveness fails only with the load (the process is stopping); readiness until loaded.
        code = (
            503 if status == _FAILED or (scope["path"] == READY_PATH and status != _READY) else 200
        )
        await _respond(send, code, json.dumps({"status": status, "version": self._version}))

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        assert message["type"] == "lifespan.startup"
        loading = anyio.CancelScope()
        async with anyio.create_task_group() as group:
            group.start_soon(self._load_and_start, scope, group, loading)
            await send({"type": "lifespan.startup.complete"})
            message = await receive()
            assert message["type"] == "lifespan.shutdown"
            # A load still under way is abandoned (its import ends in its thread, unused); a
            # started app is asked to end, not cancelled: its service records the shutdown.
            loading.cancel()
            if self._started_app is not None:
                await self._started_app.stop()
        await send({"type": "lifespan.shutdown.complete"})

    async def _load_and_start(
        self, scope: Scope, group: anyio.abc.TaskGroup, loading: anyio.CancelScope
    ) -> None:
        """Loads the app and starts its lifespan in `group` (where it runs until the server's
        shutdown ends it); `loading` cancels the load."""
        with loading:
            try:
                app = await anyio.to_thread.run_sync(self._load, abandon_on_cancel=True)
                self._started_app = _AppLifespan(app, scope)
                await self._started_app.start(group)
            except Exception as exc:
                self.failure = exc
                self._settled.set()
                self._on_failure(exc)
                return
            self._app = app
            self._settled.set()
            self._on_ready()


class LifespanFailed(RuntimeError):
    """The loaded app's lifespan did not start (its message says why)."""


class _AppLifespan:
    """An ASGI app's lifespan protocol driven from outside, as a server drives it."""

    def __init__(self, app: ASGIApp, scope: Scope) -> None:
        self._app = app
        self._scope = scope
        self._to_app, self._app_inbox = anyio.create_memory_object_stream[Message](1)
        self._from_app, self._outbox = anyio.create_memory_object_stream[Message](1)
        self._begun = self._started = self._stopped = False
        self._error: Exception | None = None

    async def start(self, group: anyio.abc.TaskGroup) -> None:
        """Runs the app's lifespan in `group` and waits for its start.

        Raises:
            Exception: what the app's start raised; `LifespanFailed` if it only said so.
        """
        group.start_soon(self._run)
        self._begun = True
        await self._to_app.send({"type": "lifespan.startup"})
        answer = await self._answer()
        if answer.get("type") == "lifespan.startup.complete":
            self._started = True
            return
        self._stopped = True
        await self._answer()  # the app's end: what it raised is known then
        self._close()
        if self._error is not None:
            raise self._error
        raise LifespanFailed(answer.get("message") or "the app ended its lifespan unstarted")

    async def stop(self) -> None:
        """Asks the app's lifespan to end (after its start, if that is still under way) and
        waits until the app returns."""
        if self._begun and not self._stopped:
            self._stopped = True
            await self._to_app.send({"type": "lifespan.shutdown"})
            while await self._answer():
                pass
            self._close()

    def _close(self) -> None:
        """Closes both ends of both streams once the app has returned (unclosed, each said
        so as a ResourceWarning when collected)."""
        for stream in (self._to_app, self._app_inbox, self._from_app, self._outbox):
            stream.close()

    async def _answer(self) -> Message:
        try:
            return await self._outbox.receive()
        except anyio.EndOfStream:
            return {}

    async def _run(self) -> None:
        async with self._from_app:
            try:
                await self._app(self._scope, self._app_inbox.receive, self._from_app.send)
            except Exception as exc:
                self._error = exc
                if self._started:  # nobody waits for it: say it
                    logger.error("the app's lifespan failed", exc_info=exc)


async def _respond(send: Send, status: int, body: str, kind: str = "application/json") -> None:
    data = body.encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", kind.encode()),
        (b"content-length", str(len(data)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
