"""One JSON response per MCP request over HTTP, unless the request streams.

The SDK answers every request of a session as a one-event SSE stream unless its whole app is
built with `json_response=True`: headers sent before the tool runs, then the event, then the
stream's end, each a write that wakes the client. A single JSON response costs about half the
SDK's CPU per call (bench/front.py's `bare_sdk_cpu_ms`), and every MCP client accepts one. So
the choice is made per request: a request that asked for progress (`_meta.progressToken`) or
for log events (`_meta` naming a log level, 2026-07-28), or comes in a handshake-era session
whose client set a log level (`logging/setLevel`), keeps SSE; every other one is answered with
JSON. mcp_app/json_answers.py points the SDK's session manager and its transports at
`answering_json()`.

A request answered with JSON carries only its response: the SDK drops (2026-07-28) or cannot
frame what relates to it, so nothing may send such a request a notification it did not ask
for; this server sends progress only on a token and log events only to who asked for them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Container
from contextvars import ContextVar

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The task serving a POST that is answered with one JSON response. A task, not a flag: the
#: tasks a request starts inherit its context (the session's own tasks, started by its
#: `initialize`, outlive it), and they must keep the SDK's default, SSE.
_ANSWERING_JSON: ContextVar[asyncio.Task[object] | None] = ContextVar(
    "mcp_evalserver_answering_json", default=None
)


def answering_json() -> bool:
    """Whether the request this task serves is answered with one JSON response (what the
    SDK's session manager and transports read as their `json_response` setting)."""
    return _ANSWERING_JSON.get() is asyncio.current_task()


SESSION_HEADER = b"mcp-session-id"


def streams(body: bytes, session: str | None, following: Container[str], log_key: str) -> bool:
    """Whether the JSON-RPC message `body` asks to be answered as a stream: it asks for
    progress or (under `log_key` in its `_meta`) for log events, or its `session` is one of
    those `following` log events. What is not one JSON object is left to the SDK as it was."""
    if session is not None and session in following:
        return True
    try:
        message = json.loads(body)
    except ValueError:
        return True
    if not isinstance(message, dict):
        return True
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and ("progressToken" in meta or log_key in meta)


class JsonUnlessStreaming:
    """ASGI middleware in front of the SDK's session manager: decides `answering_json()` for
    each POST from its body, then hands the body on unchanged. `following` holds the handshake-era
    sessions whose client set a log level; `log_key` is the `_meta` key of a 2026-07-28 log
    level."""

    def __init__(self, app: ASGIApp, following: Container[str], log_key: str) -> None:
        self.app = app
        self.following = following
        self.log_key = log_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        first: Message | None = None
        while first is None:
            message = await receive()
            if message["type"] != "http.request":
                first = message  # the client left: the SDK sees it as it would have
                break
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        session = next((v.decode("latin-1") for k, v in scope["headers"] if k == SESSION_HEADER),
                       None)  # fmt: skip
        pending = [first or {"type": "http.request", "body": body, "more_body": False}]
        json_only = not streams(body, session, self.following, self.log_key)
        answering = _ANSWERING_JSON.set(asyncio.current_task() if json_only else None)
        try:
            if json_only and session is None and first is None:
                await _cancelled_if_the_client_leaves(self.app, scope, pending, receive, send)
            else:

                async def replay() -> Message:
                    return pending.pop() if pending else await receive()

                await self.app(scope, replay, send)
        finally:
            _ANSWERING_JSON.reset(answering)


#: How long a 2026-07-28 request answered with JSON runs before a task starts watching for
#: its client's disconnection: most calls end well within it (a trivial one takes about a
#: millisecond), and a watcher task adds a third to such a call's work (cProfile: 1,370
#: function calls per `list_campaigns` with it from the start, 1,034 without; 1,171 with the
#: cancel scope and timer every call has now, 1,290 with the task group it had before). A
#: client that left meanwhile is seen at once when the watcher starts.
WATCH_AFTER_S = 0.1


async def _cancelled_if_the_client_leaves(
    app: ASGIApp, scope: Scope, pending: list[Message], receive: Receive, send: Send
) -> None:
    """Runs a 2026-07-28 request answered with JSON, cancelled if its client disconnects first
    (seen from WATCH_AFTER_S into the call).

    The SDK cancels such a request's handler when its SSE stream's client leaves, but answers
    JSON without watching (there, a dead client's `sleep 600` would run its whole timeout and
    hold its claim meanwhile: agents/external.py). A handshake-era request is left running, as
    that era's spec asks (a disconnection is not a cancellation; the client sends one).
    """
    left = anyio.Event()

    async def replay() -> Message:
        if pending:
            return pending.pop()
        await left.wait()
        return {"type": "http.disconnect"}

    # A task of its own for the watcher, made only once the call has run WATCH_AFTER_S, and
    # a cancel scope around the call for it to cancel: a task group around every call cost
    # a call that never started a watcher a sixth of its work.
    serving = anyio.CancelScope()
    watcher: asyncio.Task[None] | None = None

    async def watch() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        left.set()
        serving.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = asyncio.get_running_loop().create_task(watch())

    later = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watching)
    try:
        with serving:
            await app(scope, replay, send)
    finally:
        later.cancel()
        if watcher is not None:
            watcher.cancel()
    if watcher is not None and watcher.done() and not watcher.cancelled():
        watcher.result()  # what went wrong in it, if anything, as its task group raised it
